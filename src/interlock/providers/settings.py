"""The validated shapes of `interlock.toml` entries and of a resolved model alias.

`config.py` documents the file format and does the loading; this module only says what a
valid `[providers.<name>]` and `[models.<alias>]` table contains.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from interlock.core.params import RequestSettings
from interlock.providers.bounds import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    AnswerLimits,
)
from interlock.providers.prices import BATCH, STANDARD, LongContext, Pricing, rates_at, tier_of

if TYPE_CHECKING:
    from interlock.core.workflow import Worker

ProviderKind = Literal["openai", "anthropic", "cli", "offline"]

BUILTIN_PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {
        "kind": "openai",
        "base_url": "https://api.openai.com/v1",
        "api_key_env": "OPENAI_API_KEY",
        # OpenAI's reasoning models reject the older `max_tokens` field.
        "max_tokens_field": "max_completion_tokens",
    },
    "anthropic": {
        "kind": "anthropic",
        "base_url": "https://api.anthropic.com",
        "api_key_env": "ANTHROPIC_API_KEY",
    },
    "ollama": {"kind": "openai", "base_url": "http://localhost:11434/v1"},
    "offline": {"kind": "offline"},
}
"""Providers usable without a `[providers.<name>]` table; a table of the same name overlays
these defaults field by field."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def looks_like_a_key(value: str) -> bool:
    """Whether a value meant to name a variable is more likely a pasted key.

    Variable names are words; keys are long runs of mixed-case letters and digits (or have
    characters no name has, such as ``sk-...``).
    """
    if not _ENV_NAME.fullmatch(value):
        return True
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return len(value) >= 20 and mixed and any(c.isdigit() for c in value)


def check_env_name(value: str, field: str) -> str:
    """`value` if it can be an environment variable's name; never repeats it otherwise."""
    if looks_like_a_key(value):
        raise ValueError(
            f"{field} must name an environment variable (such as OPENAI_API_KEY), not hold "
            "a key: put the key itself in that variable or in secrets_file"
        )
    return value


class ProviderSettings(BaseModel):
    """One `[providers.<name>]` table (merged over a built-in of the same name)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: ProviderKind
    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int | None = Field(default=8, gt=0)
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    # The provider limits each model on its own (OpenAI, Anthropic): one set of buckets per
    # model id instead of one for the key.
    limits_per_model: bool = False
    max_attempts: int = Field(default=4, ge=1)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_cap_s: float = Field(default=20.0, ge=0)
    max_retry_after_s: float = Field(default=60.0, ge=0)
    # openai kind
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # anthropic kind
    anthropic_version: str = "2023-06-01"
    default_max_output_tokens: int = Field(default=8192, gt=0)
    # cli kind
    command: tuple[str, ...] = ()
    cwd: str | None = None
    kill_grace_s: float = Field(default=2.0, ge=0)
    env: tuple[str, ...] = ()  # variables passed to the agent beyond the allow-list

    @field_validator("api_key_env")
    @classmethod
    def _key_variable(cls, value: str | None) -> str | None:
        return None if value is None else check_env_name(value, "api_key_env")

    @field_validator("env")
    @classmethod
    def _variables(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_env_name(name, "each name in env") for name in value)

    @model_validator(mode="after")
    def _check_kind_fields(self) -> ProviderSettings:
        if self.kind in ("openai", "anthropic") and not self.base_url:
            raise ValueError(f"kind = {self.kind!r} needs base_url")
        if self.kind == "cli" and not self.command:
            raise ValueError('kind = "cli" needs command, e.g. ["my-agent", "{prompt}"]')
        return self


class ModelEntry(RequestSettings):
    """One `[models.<alias>]` table: where the model is, what it costs, and the request
    settings of every call to it (`interlock.core.params.RequestSettings`)."""

    # Built at its first use: only an interlock.toml with [models] tables needs it.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    provider: str
    model: str | None = None  # defaults to the alias itself
    # USD per million tokens; unset ones come from the bundled price table when it knows
    # the model (`interlock.providers.prices`).
    input_price_per_mtok: float | None = Field(default=None, ge=0)
    output_price_per_mtok: float | None = Field(default=None, ge=0)
    cache_read_price_per_mtok: float | None = Field(default=None, ge=0)
    cache_write_price_per_mtok: float | None = Field(default=None, ge=0)
    reasoning_price_per_mtok: float | None = Field(default=None, ge=0)
    context_tokens: int | None = Field(default=None, gt=0)
    # What one call may bring back (`interlock.providers.bounds`): the longest line of its
    # event stream, and the largest answer it keeps. Not request settings: nothing is sent.
    max_line_bytes: int = Field(default=DEFAULT_MAX_LINE_BYTES, ge=1024)
    max_answer_bytes: int = Field(default=DEFAULT_MAX_ANSWER_BYTES, ge=1024)
    # Calls sent through the provider's batch API at its batch price
    # (`interlock.providers.batch_provider`): gathered for `batch_window` seconds (or "10m"),
    # at most `batch_max` requests a batch.
    batch: bool = False
    batch_window: float = Field(default=600.0, gt=0)
    batch_max: int = Field(default=1000, ge=1, le=50000)

    @field_validator("batch_window", mode="before")
    @classmethod
    def _window(cls, value: Any) -> Any:
        from interlock.core.workflow import duration_seconds

        return duration_seconds(value, "batch_window")

    def batch_mode(self) -> BatchMode | None:
        """How this alias's calls are batched, or None when they are sent one by one."""
        return (
            BatchMode(window_s=self.batch_window, max_requests=self.batch_max)
            if self.batch
            else None
        )

    def prices(self) -> dict[str, float]:
        """The prices this table sets, by field name."""
        return {k: v for k, v in self.model_dump().items() if k.endswith("_price_per_mtok")
                and v is not None}  # fmt: skip

    def limits(self, alias: str) -> AnswerLimits:
        """The bounds of every call to `alias`."""
        return AnswerLimits(
            max_line_bytes=self.max_line_bytes,
            max_answer_bytes=self.max_answer_bytes,
            table=f"[models.{alias}]",
        )

    def settings(self) -> RequestSettings:
        """The request settings this table gives."""
        names = RequestSettings.model_fields
        return RequestSettings.model_validate(
            {k: v for k, v in self.model_dump(exclude_none=True).items() if k in names}
        )


@dataclass(frozen=True, kw_only=True)
class BatchMode:
    """An alias whose calls go through the provider's batch API."""

    window_s: float = 600.0  # how long calls are gathered before a batch is sent
    max_requests: int = 1000  # a batch is sent as soon as it holds this many


@dataclass(frozen=True, kw_only=True)
class ResolvedModel:
    """Everything needed to call the model behind an alias, except the key itself.

    Attributes:
        alias: The name used in the workflow file.
        provider: The provider name (a `[providers.<name>]` table or a built-in).
        kind: Which client serves it: openai, anthropic, cli or offline.
        model: The provider's model id.
        base_url: The provider's base URL (openai and anthropic kinds), None otherwise.
        input_price_per_mtok: USD per million input tokens.
        output_price_per_mtok: USD per million output tokens.
        cache_read_price_per_mtok: For input tokens read from the provider's prompt cache
            (the input price when None).
        cache_write_price_per_mtok: For input tokens written to it (the input price when None).
        reasoning_price_per_mtok: For reasoning tokens (the output price when None).
        price_source: Where the prices came from: "interlock.toml", "genai-prices", both
            joined by "+", or "" when no price is known (calls then cost 0).
        price_tier: The service tier the prices are of (`interlock.providers.prices`).
        price_sources: Each table that gave a price, highest precedence first.
        price_note: Why the tier priced is not the request's, or "".
        long_context: Rates of calls whose prompt passes a threshold.
        context_tokens: The model's context window, when known.
        max_output_tokens: Output cap sent with each call, when configured.
        api_key_env: Name of the variable holding the key (in the environment or the
            secrets file); None when the provider needs no key.
        secrets_file: The secrets file consulted after the environment, if any.
        offline_fallback: True when no configuration exists and the offline provider was
            chosen for that reason; the runtime should warn.
        settings: The request settings of its calls (the alias's, under a worker's `params`).
        limits: What one call may bring back (``max_line_bytes``, ``max_answer_bytes``).
    """

    alias: str
    provider: str
    kind: ProviderKind
    model: str
    base_url: str | None = None
    input_price_per_mtok: float = 0.0
    output_price_per_mtok: float = 0.0
    cache_read_price_per_mtok: float | None = None
    cache_write_price_per_mtok: float | None = None
    reasoning_price_per_mtok: float | None = None
    price_source: str = ""
    price_tier: str = STANDARD
    price_sources: tuple[str, ...] = ()
    price_note: str = ""
    long_context: tuple[LongContext, ...] = ()
    context_tokens: int | None = None
    max_output_tokens: int | None = None
    api_key_env: str | None = None
    secrets_file: Path | None = None
    offline_fallback: bool = False
    settings: RequestSettings = field(default_factory=RequestSettings)
    limits: AnswerLimits = field(default_factory=AnswerLimits)
    pricing: Pricing | None = field(default=None, compare=False, repr=False)
    batch: BatchMode | None = None  # its calls go through the provider's batch API

    def __post_init__(self) -> None:
        if self.limits.table == AnswerLimits.table:  # the defaults: name this alias's table
            object.__setattr__(self, "limits", replace(self.limits, table=f"[models.{self.alias}]"))

    def with_params(self, params: RequestSettings | None) -> ResolvedModel:
        """This model with a worker's `params` laid over the alias's settings."""
        if params is None:
            return self
        settings = params.over(self.settings)
        model = replace(self, settings=settings, max_output_tokens=settings.max_output_tokens)
        # The params may name another service tier: that is the one the calls cost.
        return model.priced(self.pricing) if self.pricing is not None else model

    def for_worker(self, worker: Worker) -> ResolvedModel:
        """This model as `worker` calls it: its `params` over the alias's settings, and its
        `batch` (with `batch_window`, `batch_max`) over the alias's, priced at that tier."""
        model = self.with_params(worker.params)
        if worker.batch is None or self.kind not in ("openai", "anthropic"):
            return model  # the other kinds have no batch API: `batch` is ignored for them
        if worker.batch:
            base = model.batch or BatchMode()
            mode: BatchMode | None = BatchMode(
                window_s=base.window_s if worker.batch_window is None else worker.batch_window,
                max_requests=base.max_requests if worker.batch_max is None else worker.batch_max,
            )
        else:
            mode = None
        if mode == model.batch:
            return model
        model = replace(model, batch=mode)
        return model.priced(model.pricing) if model.pricing is not None else model

    def priced(self, pricing: Pricing) -> ResolvedModel:
        """This model with the prices of the tier its settings send, from `pricing`."""
        found = pricing.at(BATCH if self.batch else tier_of(self.settings.extra_body))
        given = found.prices
        return replace(
            self,
            input_price_per_mtok=given.get("input_price_per_mtok", 0.0),
            output_price_per_mtok=given.get("output_price_per_mtok", 0.0),
            cache_read_price_per_mtok=given.get("cache_read_price_per_mtok"),
            cache_write_price_per_mtok=given.get("cache_write_price_per_mtok"),
            reasoning_price_per_mtok=given.get("reasoning_price_per_mtok"),
            price_source=found.source,
            price_tier=found.tier,
            price_sources=found.sources,
            price_note=found.note,
            long_context=found.long_context,
            pricing=pricing,
        )

    def sent_with(self, settings: RequestSettings, *, batch: bool = False) -> ResolvedModel:
        """This model priced as a call sent with `settings` is: at the batch price when it
        went through the provider's batch API, else at the service tier its `extra_body`
        names. A provider object serves an alias, while each worker's `params` may send it
        at another tier: the call costs what was sent, not what the alias says."""
        asked = BATCH if self.batch else tier_of(self.settings.extra_body)
        wanted = BATCH if batch else tier_of(settings.extra_body)
        if self.pricing is None or wanted == asked:
            return self
        mode = (self.batch or BatchMode()) if batch else None
        return replace(self, settings=settings, batch=mode).priced(self.pricing)

    def identity(self) -> dict[str, Any]:
        """What calls to this model are, as stable JSON values: provider, model id and
        request settings. Part of a task's fingerprint; header values are hashed, never
        shown, since they may hold credentials."""
        identity: dict[str, Any] = {
            "alias": self.alias,
            "provider": self.provider,
            "kind": str(self.kind),
            "model": self.model,
            "max_output_tokens": self.max_output_tokens,
        }
        settings = recorded_settings(self.settings, hash_headers=True)
        if settings:
            identity["settings"] = settings
        return identity

    def cost_usd(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> float:
        """The price of a call with these token counts at this alias's rates.

        `input_tokens` and `output_tokens` are totals: the cached and reasoning tokens are
        parts of them, charged at their own rates.
        """
        uncached = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
        answer = max(0, output_tokens - reasoning_tokens)
        rates = self.rates(input_tokens)
        input_rate = _or(rates["input_price_per_mtok"], 0.0)
        output_rate = _or(rates["output_price_per_mtok"], 0.0)
        read_rate = _or(rates["cache_read_price_per_mtok"], input_rate)
        write_rate = _or(rates["cache_write_price_per_mtok"], input_rate)
        reasoning_rate = _or(rates["reasoning_price_per_mtok"], output_rate)
        return (
            uncached * input_rate
            + cache_read_tokens * read_rate
            + cache_write_tokens * write_rate
            + answer * output_rate
            + reasoning_tokens * reasoning_rate
        ) / 1_000_000

    def rates(self, input_tokens: int = 0) -> dict[str, float | None]:
        """USD per million tokens by price field for a call with `input_tokens` of prompt:
        long-context rates above their threshold (a field not priced is None, but input and
        output, which are 0)."""
        base: dict[str, float | None] = {
            "input_price_per_mtok": self.input_price_per_mtok,
            "output_price_per_mtok": self.output_price_per_mtok,
            "cache_read_price_per_mtok": self.cache_read_price_per_mtok,
            "cache_write_price_per_mtok": self.cache_write_price_per_mtok,
            "reasoning_price_per_mtok": self.reasoning_price_per_mtok,
        }
        given = {k: v for k, v in base.items() if v is not None}
        return {**base, **rates_at(given, self.long_context, input_tokens)}


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def recorded_settings(settings: RequestSettings, *, hash_headers: bool = False) -> dict[str, Any]:
    """The settings as a ledger or a fingerprint may hold them: header names only, or with
    each value replaced by a short hash of it."""
    values = settings.set_fields()
    headers = values.pop("headers", None)
    if headers:
        if hash_headers:
            values["headers"] = {
                name: hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]
                for name, value in sorted(headers.items())
            }
        else:
            values["headers"] = sorted(headers)
    return values
