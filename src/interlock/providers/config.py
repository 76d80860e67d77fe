"""Loading `interlock.toml`: which provider and model id each alias in a workflow means.

The caller passes candidate paths (a ``.toml`` file, or a directory that may hold an
``interlock.toml``); `ModelConfig.for_workflow` passes them in the order of
`config_paths` (``--config``/INTERLOCK_CONFIG, the workflow's folder, the current directory
up to the project root, the state directory, the user's file). Every existing file is read;
when two define the same provider or alias, the earlier file wins.

File format::

    secrets_file = "secrets.toml"     # optional, relative to this file; never logged

    [providers.openai]                 # the name is free; `kind` selects the client
    kind = "openai"                    # openai | anthropic | cli | offline
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"     # keys come only from the environment or secrets_file
    max_concurrency = 8                # calls in flight at once (default 8)
    requests_per_minute = 500          # optional client-side rate limits
    tokens_per_minute = 200000
    limits_per_model = false           # true: those limits apply to each model on its own
    max_attempts = 4                   # HTTP requests per call on 429/5xx (default 4)
    backoff_base_s = 0.5               # first backoff, doubled per retry, with jitter
    backoff_cap_s = 20.0               # longest backoff between them
    max_retry_after_s = 60.0           # a longer Retry-After ends the call (retryable)
    max_tokens_field = "max_tokens"    # openai kind; OpenAI itself: "max_completion_tokens"

    [providers.anthropic]
    kind = "anthropic"
    base_url = "https://api.anthropic.com"   # the client appends /v1/messages
    api_key_env = "ANTHROPIC_API_KEY"
    anthropic_version = "2023-06-01"
    default_max_output_tokens = 8192   # max_tokens when neither request nor alias sets one

    [providers.claude-code]
    kind = "cli"
    command = ["claude", "-p", "{prompt}"]   # no {prompt}: the prompt goes to stdin
                                             # {system} and {model} are also replaced
    cwd = "."                          # optional working directory
    kill_grace_s = 2.0                 # SIGTERM, then SIGKILL after this, on timeout
    env = ["CLAUDE_CONFIG_DIR"]        # variables it gets beyond the allow-list below
    api_key_env = "ANTHROPIC_API_KEY"  # optional: passed on under this name


    [models.sonnet]
    provider = "anthropic"
    model = "claude-sonnet-4-5"
    input_price_per_mtok = 3.0         # this alias's prices (at its own service tier)
    output_price_per_mtok = 15.0
    context_tokens = 200000
    max_output_tokens = 8192           # optional
    max_line_bytes = 1048576           # longest line of its event stream (default 1 MiB)
    max_answer_bytes = 33554432        # largest answer one call keeps (default 32 MiB)
    # Request settings (each optional; see interlock.core.params and docs/models.md):
    # temperature, top_p, seed, stop, reasoning_effort, thinking_budget, timeout, stream,
    # cache_prompt, extra_body = {...}, headers = {...}
    batch = false                      # true: calls go through the batch API, at its price
    batch_window = "10m"               # how long calls are gathered into one batch
    batch_max = 1000                   # a batch is sent once it holds this many

    [prices."gpt-5.4"]                 # prices of a model id, per tier (see
    input_price_per_mtok = 2.5         # interlock.providers.price_tables)
    [prices."gpt-5.4".flex]
    input_price_per_mtok = 1.25

Providers named ``openai``, ``anthropic``, ``ollama`` and ``offline`` exist without a table
(with the usual base URLs and key variables); a table of the same name overrides fields.

An agent command does not inherit the environment: it gets only the variables of
`interlock.providers.cli_env.ALLOWED` (PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE,
LC_*, TERM, TZ, TMPDIR, TMP, TEMP, XDG_*, the proxy variables and the CA bundle variables),
plus those named by its own table's ``env`` and ``api_key_env`` (the key also when it comes
from the secrets file). Other providers' keys never reach it.

The secrets file is TOML (``OPENAI_API_KEY = "..."``) or ``KEY=value`` lines; a key is
looked up under the provider's ``api_key_env`` name, in the environment first.

Environment variables:
    INTERLOCK_CONFIG: an extra config file, read before the candidates (``--config``).
    INTERLOCK_MODELS: aliases without a file, e.g. ``"fast=ollama:llama3.2,big=openai:gpt-4o"``;
        they override aliases of the same name from files.
    INTERLOCK_SECRETS_FILE: the secrets file, overriding ``secrets_file``.

With no file and neither INTERLOCK_CONFIG nor INTERLOCK_MODELS, every alias resolves to the
offline provider with ``offline_fallback=True``, unless an interlock.toml the order does not
read (above the workflow's folder or the current directory) defines it: that is an error
naming the file. As soon as any configuration exists, an unknown alias is an error: offline
output is never chosen silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from interlock.providers.cli_env import allowed_env
from interlock.providers.config_files import (
    ConfigError,
    build_models,
    build_providers,
    env_models,
    read_toml,
    tables,
    unknown_top_level,
)
from interlock.providers.config_paths import (
    CONFIG_NAME,
    config_candidates,
    file_sha256,
    unread_configs,
)
from interlock.providers.config_paths import used_line as _used_line
from interlock.providers.failures import ProviderError
from interlock.providers.price_tables import price_tables
from interlock.providers.prices import BATCH, PriceTable, Pricing, tier_of
from interlock.providers.redaction import Secret
from interlock.providers.secrets_file import read_secrets_file
from interlock.providers.settings import ModelEntry, ProviderSettings, ResolvedModel
from interlock.providers.spend import SpendLimits, parse_limits

__all__ = [
    "CONFIG_NAME",
    "ConfigError",
    "MissingKeyError",
    "ModelConfig",
    "ResolvedModel",
    "UnknownModelError",
]


class UnknownModelError(ConfigError):
    """A workflow names an alias that the configuration does not define."""

    def __init__(self, message: str, *, alias: str) -> None:
        super().__init__(message)
        self.alias = alias


class MissingKeyError(ConfigError):
    """A provider needs an API key that is neither in the environment nor the secrets file."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The merged configuration: providers, aliases and where they came from."""

    providers: Mapping[str, ProviderSettings]
    models: Mapping[str, ModelEntry]
    prices: Mapping[str, PriceTable] = field(default_factory=dict)  # [prices.<model id>]
    searched: tuple[Path, ...] = ()
    loaded: tuple[Path, ...] = ()
    # The SHA-256 of each loaded file as it was read (a run records which files it used).
    digests: tuple[str, ...] = ()
    env_sources: tuple[str, ...] = ()
    # interlock.toml files near the workflow that the order does not read (see `resolve`).
    unread: tuple[Path, ...] = ()
    secrets_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # holds keys: no repr
    # [limits]: spend caps across runs, from the first file that has the table.
    spend: SpendLimits = field(default_factory=SpendLimits)
    # `secrets()` of the key it was computed for (see there): asked for several times per run.
    _secrets: tuple[object, list[Secret]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def load(
        cls, candidates: Sequence[str | Path], *, env: Mapping[str, str] | None = None
    ) -> ModelConfig:
        """Read every existing candidate plus the environment.

        Args:
            candidates: In priority order: ``.toml`` files, or directories that may hold an
                ``interlock.toml``.
            env: The environment to use; defaults to ``os.environ``.

        Raises:
            ConfigError: A file is unreadable or invalid (the message names the file).
        """
        environ = dict(os.environ if env is None else env)
        # A directory need not exist yet (a fresh state directory), so decide by the name.
        paths = [
            Path(c) if Path(c).suffix == ".toml" else Path(c) / CONFIG_NAME for c in candidates
        ]
        env_sources: list[str] = []
        if environ.get("INTERLOCK_CONFIG"):
            explicit = Path(environ["INTERLOCK_CONFIG"])
            if not explicit.is_file():
                raise ConfigError(f"INTERLOCK_CONFIG points to {explicit}, which is not a file")
            paths.insert(0, explicit)
            env_sources.append("INTERLOCK_CONFIG")
        raw_providers: dict[str, tuple[Path, dict[str, Any]]] = {}
        raw_models: dict[str, tuple[str, dict[str, Any]]] = {}
        raw_prices: dict[str, tuple[str, dict[str, Any]]] = {}
        secrets_file: Path | None = None
        spend: SpendLimits | None = None
        loaded: list[Path] = []
        digests: list[str] = []
        for path in paths:
            if not path.is_file():
                continue
            document = read_toml(path)
            unknown_top_level(document, path)
            loaded.append(path)
            digests.append(file_sha256(path) or "")
            for name, table in tables(document, "providers", path).items():
                raw_providers.setdefault(name, (path, table))
            for alias, table in tables(document, "models", path).items():
                raw_models.setdefault(alias, (str(path), table))
            for model_id, table in tables(document, "prices", path).items():
                raw_prices.setdefault(model_id, (str(path), table))
            if spend is None and "limits" in document:
                spend = parse_limits(document["limits"], str(path))
            if secrets_file is None and isinstance(document.get("secrets_file"), str):
                secrets_file = path.parent / document["secrets_file"]
        if environ.get("INTERLOCK_MODELS"):
            env_sources.append("INTERLOCK_MODELS")
            for alias, table in env_models(environ["INTERLOCK_MODELS"]).items():
                raw_models[alias] = ("INTERLOCK_MODELS", table)
        if environ.get("INTERLOCK_SECRETS_FILE"):
            secrets_file = Path(environ["INTERLOCK_SECRETS_FILE"])
        providers = build_providers(raw_providers)
        models = build_models(raw_models, providers)
        return cls(
            providers=providers,
            models=models,
            prices=price_tables(raw_prices),
            searched=tuple(paths),
            loaded=tuple(loaded),
            digests=tuple(digests),
            env_sources=tuple(env_sources),
            secrets_file=secrets_file,
            env=environ,
            spend=spend or SpendLimits(),
        )

    @classmethod
    def for_workflow(
        cls,
        workflow_dir: Path | None,
        home: Path | None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ModelConfig:
        """The configuration of a workflow in `workflow_dir` (None: no file, e.g. a pipeline
        built in code), read in the order of `config_paths`.

        Raises:
            ConfigError: A file is unreadable or invalid (the message names the file).
        """
        environ = dict(os.environ if env is None else env)
        candidates = config_candidates(workflow_dir, home, cwd=cwd, env=environ)
        config = cls.load(candidates, env=environ)
        if config.configured:
            return config
        unread = unread_configs(workflow_dir, candidates, cwd=cwd)
        return dataclasses.replace(config, unread=tuple(unread))

    @property
    def used_line(self) -> str:
        """``config: FILE`` (or that none was found), as the commands print it."""
        return _used_line(self.loaded, self.env_sources)

    def defined_elsewhere(self, alias: str) -> Path | None:
        """An unread interlock.toml near the workflow that defines `alias`, if any."""
        for path in self.unread:
            try:
                models = tables(read_toml(path), "models", path)
            except ConfigError:  # not this file's turn to be judged: it is not read
                continue
            if alias in models:
                return path
        return None

    @property
    def configured(self) -> bool:
        """Whether any configuration file or variable exists at all."""
        return bool(self.loaded or self.env_sources)

    def resolve(self, alias: str) -> ResolvedModel:
        """What the alias means: provider, model id, prices, context limit, key source.

        Raises:
            UnknownModelError: A configuration exists but does not define `alias`.
        """
        if not self.configured:
            elsewhere = self.defined_elsewhere(alias)
            if elsewhere is not None:
                raise UnknownModelError(self.elsewhere_message(alias, elsewhere), alias=alias)
            return ResolvedModel(alias=alias, provider="offline", kind="offline", model=alias,
                                 offline_fallback=True)  # fmt: skip
        entry = self.models.get(alias)
        if entry is None:
            raise UnknownModelError(self._unknown_alias_message(alias), alias=alias)
        settings = self.providers[entry.provider]
        model = entry.model or alias
        request = entry.settings()
        pricing = Pricing(
            model=model,
            base_url=settings.base_url,
            table=self.prices.get(model),
            alias=alias,
            alias_prices=entry.prices(),
            alias_tier=BATCH if entry.batch else tier_of(request.extra_body),
        )
        return ResolvedModel(
            alias=alias,
            provider=settings.name,
            kind=settings.kind,
            model=model,
            base_url=settings.base_url,
            context_tokens=entry.context_tokens,
            max_output_tokens=entry.max_output_tokens,
            api_key_env=settings.api_key_env,
            secrets_file=self.secrets_file,
            settings=request,
            limits=entry.limits(alias),
            batch=entry.batch_mode(),
        ).priced(pricing)

    def missing_models(self, aliases: Iterable[str]) -> list[str]:
        """The aliases that `resolve` would reject, in the given order, without duplicates."""
        if not self.configured:
            return list(dict.fromkeys(a for a in aliases if self.defined_elsewhere(a)))
        return list(dict.fromkeys(a for a in aliases if a not in self.models))

    def provider(self, name: str) -> ProviderSettings:
        """The settings of a provider by name (declared or built-in)."""
        return self.providers[name]

    def api_key(self, resolved: ResolvedModel) -> Secret | None:
        """The key for `resolved`'s provider, from the environment, then the secrets file.

        Raises:
            MissingKeyError: The provider names a key variable that is set nowhere.
        """
        name = resolved.api_key_env
        if name is None:
            return None
        if self.env.get(name):
            return Secret(self.env[name])
        if self.secrets_file is not None and self.secrets_file.is_file():
            value = read_secrets_file(self.secrets_file).get(name)
            if value:
                return Secret(value)
        where = f" or add it to {self.secrets_file}" if self.secrets_file else ""
        raise MissingKeyError(
            f"provider {resolved.provider!r} (alias {resolved.alias!r}) needs an API key: "
            f"set the environment variable {name}{where}"
        )

    def secrets(self) -> list[Secret]:
        """Every key this configuration can reach, for masking in messages.

        Each provider's ``api_key_env`` that is set, in the environment or the secrets file;
        a missing one is skipped (asking for it raises in `api_key`).
        """
        names = sorted({p.api_key_env for p in self.providers.values() if p.api_key_env})
        # Cached until the environment's keys or the secrets file change (an edited file has
        # a new mtime or size), so a rotated key is still masked from then on.
        key = (tuple(self.env.get(n) for n in names), self._file_stamp())
        cached = self._secrets
        if cached is not None and cached[0] == key:
            return list(cached[1])
        filed: dict[str, str] = {}
        if key[1] is not None:
            assert self.secrets_file is not None  # a stamp is only taken of a file
            with contextlib.suppress(ProviderError, OSError):
                filed = read_secrets_file(self.secrets_file)
        found = [self.env.get(n) or filed.get(n) for n in names]
        secrets = [Secret(value) for value in found if value]
        object.__setattr__(self, "_secrets", (key, secrets))  # a cache, not state: frozen
        return list(secrets)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        """The secrets file's identity and version, or None when there is no such file."""
        if self.secrets_file is None:
            return None
        try:
            stat = self.secrets_file.stat()
        except OSError:
            return None
        if not S_ISREG(stat.st_mode):
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def agent_env(self, settings: ProviderSettings) -> dict[str, str]:
        """The environment of a ``kind = "cli"`` agent (see the module docstring)."""
        env = allowed_env(self.env, settings.env)
        if settings.api_key_env:
            resolved = ResolvedModel(
                alias=settings.name,
                provider=settings.name,
                kind=settings.kind,
                model="",
                api_key_env=settings.api_key_env,
                secrets_file=self.secrets_file,
            )
            key = self.api_key(resolved)
            if key is not None:
                env[settings.api_key_env] = key.reveal()
        return env

    def elsewhere_message(self, alias: str, path: Path) -> str:
        """Why `alias` is refused although `path` defines it, and the fix."""
        looked = ", ".join(str(p) for p in self.searched)
        return (
            f"model alias {alias!r} is defined in {path}, which is not read for this workflow "
            f"(looked at: {looked}); without it the offline stand-in would answer. Fix: pass "
            f"--config {path} (or set INTERLOCK_CONFIG={path}), or move the workflow or the "
            "file so that the file sits beside the workflow or in the current directory."
        )

    def _unknown_alias_message(self, alias: str) -> str:
        looked = ", ".join(
            f"{p} ({'found' if p in self.loaded else 'not found'})" for p in self.searched
        )
        sources = "; ".join(filter(None, [looked, ", ".join(self.env_sources)])) or "nothing"
        known = ", ".join(sorted(self.models)) or "none"
        return (
            f"unknown model alias {alias!r}: no [models.{alias}] table. Looked at: {sources}. "
            f"Known aliases: {known}. Fix: add to interlock.toml\n"
            f'  [models.{alias}]\n  provider = "<provider name>"\n  model = "<model id>"\n'
            "or use one of the known aliases in the workflow."
        )
