"""Typed models of a workflow file.

A workflow file maps pipeline names to pipelines. These models check the shape of each value
(types, ranges, unknown keys); `interlock.core.validate` checks what spans several places
(roles, reads, transitions, loops). Both report problems in the words of the file.
"""

from __future__ import annotations

import re
from collections.abc import KeysView
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from interlock.core.inputs import TYPES, InputType, convert, kind_of
from interlock.core.params import RequestSettings
from interlock.core.schema_patterns import pattern_problem
from interlock.core.schemas import implied_extract, schema_problem
from interlock.core.task_size import MAX_TASK_SIZE_LIMIT
from interlock.core.tolerance import Tolerance, parse_tolerance
from interlock.core.tools import MAX_TURNS_LIMIT, ToolServer

# A role, phase id or output name becomes part of a path on disk: keep it to one plain segment.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# `name`, or `file.yaml#name` (a workflow file relative to the one that names it).
PIPELINE_REF = re.compile(r"^(?:[^#\s][^#]*\.(?:ya?ml|json)#)?[^#\s/][^#/]*$")
MAX_TIMEOUT_S = 7 * 24 * 3600  # a week; anything longer is a typo for minutes or ms
DEFAULT_GRACE_S = 120.0  # how long past its timeout a task may run before the engine acts
# How long a dispatched attempt may wait to start before it counts as lost (a dispatch the
# queue or its transport dropped, a fleet that is gone). Waiting for a free slot is normal, so
# it is generous: a day covers a phase of thousands of model calls at a few at a time.
DEFAULT_START_TIMEOUT_S = 86400.0


def check_safe_name(value: str, what: str) -> str:
    """Reject names that could escape a directory or hide in a listing."""
    if not SAFE_NAME.match(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} is not a safe name: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, without '..' or path separators"
        )
    return value


class _Model(BaseModel):
    # Unknown keys are almost always typos ("timout"), so they are errors, not ignored.
    # Each model's validator is built at its first use: a pipeline's, built below, holds the
    # schema of every model in it, and reading a file validates nothing else (a worker's
    # or a phase's own is built by a run, once per process).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class Cache(_Model):
    """Reuse a completed task of any earlier run of the store with the same fingerprint."""

    ttl: Annotated[float, Field(gt=0)] | None = (
        None  # seconds (or "30m", "12h", "7d"); None: any age
    )

    @field_validator("ttl", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = _DURATION.match(value)
            if match is None:
                raise ValueError(f"ttl {value!r} must be seconds or a duration like 30m, 12h, 7d")
            return float(match.group(1)) * _UNIT_S[match.group(2)]
        return value


DEFAULT_REJECTIONS = 3


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def env_names(value: list[str]) -> list[str]:
    """`value` if each item can name an environment variable; a bad item is never repeated
    (it may be a pasted value, even a key)."""
    for index, name in enumerate(value):
        if not _ENV_NAME.match(name):
            raise ValueError(
                f"env item {index + 1} is not a variable's name: 'env' lists names (such as "
                "GITHUB_TOKEN), whose values the command gets from the environment it runs in"
            )
    return list(dict.fromkeys(value))


def cache_setting(value: Any) -> Any:
    """`cache:` as written: true, false, or a mapping such as {ttl: 7d} (one clear error)."""
    if value is None or isinstance(value, bool | Cache):
        return value
    if isinstance(value, dict):
        try:
            return Cache.model_validate(value)
        except ValidationError as exc:
            words = (str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            raise ValueError("; ".join(words)) from None
    raise ValueError(f"cache must be true, false or a mapping like {{ttl: 7d}}, not {value!r}")


def _drop_unset_cache(data: Any, cache: Any) -> Any:
    # Pipelines without `cache:` keep the canonical JSON (and so the hash) they always had.
    if cache is None and isinstance(data, dict):
        data.pop("cache", None)
    return data


class Backoff(_Model):
    """Delay before retry n is min(max, initial * multiplier**(n-1)), with seeded jitter."""

    initial: Annotated[float, Field(ge=0, le=MAX_TIMEOUT_S)] = 2.0
    max: Annotated[float, Field(ge=0, le=MAX_TIMEOUT_S)] = 300.0
    multiplier: Annotated[float, Field(ge=1, le=10)] = 2.0
    jitter: Annotated[float, Field(ge=0, le=1)] = 0.2  # fraction of the delay


class Extract(_Model):
    """Pull one named value out of a worker's output: a JSON field or a regex group."""

    json_path: str | None = Field(default=None, alias="json")
    regex: str | None = None
    type: Literal["number", "string", "bool", "list"] = "string"
    required: bool = True

    @field_validator("type", mode="before")
    @classmethod
    def _inputs_words(cls, value: Any) -> Any:
        # An input's type is written `text` or `boolean`: the same words are taken here.
        return (
            {"text": "string", "boolean": "bool"}.get(value, value)
            if isinstance(value, str)
            else value
        )

    @model_validator(mode="after")
    def _one_source(self) -> Extract:
        if (self.json_path is None) == (self.regex is None):
            raise ValueError("give exactly one of 'json' (a field path) or 'regex'")
        return self

    @field_validator("regex")
    @classmethod
    def _linear_regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from interlock.core.patterns import PatternError, compile_pattern

        try:
            compiled = compile_pattern(value)
        except PatternError as exc:
            raise ValueError(str(exc)) from None
        if compiled.groups > 1:
            raise ValueError("regex may have at most one capture group")
        return value


class ConcurrencyKey(_Model):
    """At most `limit` at once per value of `key`, a CEL expression (`inputs.customer`): runs
    of a pipeline (the key reads topic and inputs) or attempts of a worker's tasks (it may also
    read `item` and `model`). What is past the limit waits for a slot, oldest first."""

    key: str
    limit: Annotated[int, Field(ge=1, le=100_000)]


class Worker(_Model):
    """One pure executor: a model call, a command or a Python callable."""

    role: str
    task: str = ""
    timeout: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = 600.0
    grace: Annotated[float, Field(ge=0, le=MAX_TIMEOUT_S)] = DEFAULT_GRACE_S
    # Seconds (or "30m", "2h", "1d") a dispatched attempt may wait to start; unset: a day
    # (`start_deadline`). Left out of the canonical form when unset, so that existing
    # definitions keep their hashes.
    start_timeout: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    reads: list[str] = Field(default_factory=list)
    final: bool = False
    output: str | None = None
    model: str | None = None
    command: list[str] | None = None
    # Names of environment variables a command gets beyond the few every started program
    # gets (`interlock.providers.cli_env`) and its INTERLOCK_* variables: names only, so no
    # value is pinned with the run. Left out of the canonical form when empty.
    env: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    call: str | None = None
    system: str | None = None
    retries: Annotated[int, Field(ge=0, le=20)] = 0
    backoff: Backoff = Backoff()
    fallback_models: list[str] = Field(default_factory=list)
    # Keep a model's answer cut off at its output limit instead of failing the attempt.
    # Left out of the canonical form when off, so existing definitions keep their hashes.
    accept_truncated: bool = Field(default=False, exclude_if=lambda value: not value)
    extract: dict[str, Extract] = Field(default_factory=dict)
    # Characters the worker's rendered task (and each value its templates build) may have;
    # unset: MAX_TASK_SIZE. Left out of the canonical form when unset, so other workers keep
    # their hashes.
    max_task_size: Annotated[int, Field(ge=1, le=MAX_TASK_SIZE_LIMIT)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    tags: list[str] = Field(default_factory=list)
    cache: bool | Cache | None = None  # None: as the pipeline says
    # At most `limit` attempts of this worker's tasks at once per value of `key`, across every
    # run and orchestrator of the store; the key may read topic, inputs, item and model. Left
    # out of the canonical form when unset, so other workers keep their hashes.
    concurrency: ConcurrencyKey | None = Field(default=None, exclude_if=lambda value: value is None)

    # Send its model calls through the provider's batch API, at the batch price (true), or
    # one by one (false), whatever its alias says (unset: as the alias says); `batch_window`
    # (seconds, or "10m") and `batch_max` as in interlock.toml. Each is left out of the
    # canonical form when unset, so other workers keep their hashes.
    batch: bool | None = Field(default=None, exclude_if=lambda value: value is None)
    batch_window: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    batch_max: Annotated[int, Field(ge=1, le=50_000)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    @field_validator("cache", mode="before")
    @classmethod
    def _cache_setting(cls, value: Any) -> Any:
        return cache_setting(value)

    @field_validator("batch_window", mode="before")
    @classmethod
    def _batch_duration(cls, value: Any) -> Any:
        return duration_seconds(value, "batch_window")

    @model_validator(mode="after")
    def _batch_of_a_model(self) -> Worker:
        given = [k for k in ("batch", "batch_window", "batch_max") if getattr(self, k) is not None]
        if given and self.model is None:
            raise ValueError(
                f"{given[0]!r} only applies to model workers: remove it, or give the worker a model"
            )
        if self.batch is not True and (self.batch_window, self.batch_max) != (None, None):
            raise ValueError(
                "'batch_window' and 'batch_max' need 'batch: true' on the worker (an alias "
                "with batch = true takes its own from interlock.toml)"
            )
        return self

    @field_validator("start_timeout", mode="before")
    @classmethod
    def _start_duration(cls, value: Any) -> Any:
        return duration_seconds(value, "start_timeout")

    @property
    def start_deadline(self) -> float:
        """Seconds a dispatched attempt may wait for its start (`start_timeout` or a day)."""
        return DEFAULT_START_TIMEOUT_S if self.start_timeout is None else self.start_timeout

    # Request settings over those of the model's alias (and of each fallback model's).
    params: RequestSettings | None = Field(default=None, exclude_if=lambda value: value is None)
    # The JSON Schema a model's answer must match (a path to a .json file is read when the
    # workflow file is loaded); its top-level properties are extracted values.
    output_schema: dict[str, Any] | str | None = Field(
        default=None, alias="schema", exclude_if=lambda value: value is None
    )
    # MCP servers whose tools the model may call, in a loop of at most `max_turns` model
    # calls; `accept_max_turns` keeps the last answer when the model still asks for tools.
    # Each is left out of the canonical form when unset, so other workers keep their hashes.
    tools: list[ToolServer] = Field(default_factory=list, exclude_if=lambda value: not value)
    max_turns: Annotated[int, Field(ge=1, le=MAX_TURNS_LIMIT)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    accept_max_turns: bool = Field(default=False, exclude_if=lambda value: not value)
    # A sub-pipeline: `NAME` (same file) or `file.yaml#NAME` (relative to this file) runs as
    # a child run, whose final.md is this worker's output; `inputs` are its inputs (task
    # templates) and `task` its topic (the parent's topic when empty). The loader pins the
    # child's definition into `pipeline_definition`, so a run keeps the child it started with.
    # Each is left out of the canonical form when unset, so other workers keep their hashes.
    pipeline: str | None = Field(default=None, exclude_if=lambda value: value is None)
    inputs: dict[str, str | int | float | bool] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    pipeline_definition: Pipeline | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    @model_validator(mode="before")
    @classmethod
    def _schema_values(cls, data: Any) -> Any:
        # Every top-level property can be read by conditions, as if extracted: an explicit
        # `extract` rule of the same name wins.
        schema = data.get("schema") if isinstance(data, dict) else None
        if isinstance(schema, dict) and schema_problem(schema) is None:
            implied = implied_extract(schema)
            if implied:
                explicit = data.get("extract") if isinstance(data.get("extract"), dict) else {}
                data = {**data, "extract": {**implied, **explicit}}
        return data

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
        if isinstance(value, str) and not value.endswith(".json"):
            raise ValueError("'schema' is a JSON Schema object or the path of a .json file")
        problem = (
            schema_problem(value) or pattern_problem(value) if isinstance(value, dict) else None
        )
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _drop_unset_cache(handler(self), self.cache)

    @field_validator("role")
    @classmethod
    def _safe_role(cls, value: str) -> str:
        return check_safe_name(value, "role")

    @field_validator("output")
    @classmethod
    def _safe_output(cls, value: str | None) -> str | None:
        return None if value is None else check_safe_name(value, "output")

    @field_validator("command")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0].strip()):
            raise ValueError("command must be a non-empty argv list, e.g. ['python', 'x.py']")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        return env_names(value)

    @model_validator(mode="after")
    def _env_of_a_command(self) -> Worker:
        if self.env and self.command is None:
            raise ValueError(
                "'env' only applies to command workers: a model or call: worker does not "
                "start a program (tools: servers take their own 'env')"
            )
        return self

    @field_validator("call")
    @classmethod
    def _call_ref(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$", value):
            raise ValueError(
                f"call {value!r} must be 'package.module:function' or a registered name"
            )
        return value

    @field_validator("pipeline")
    @classmethod
    def _pipeline_ref(cls, value: str | None) -> str | None:
        if value is not None and not PIPELINE_REF.match(value):
            raise ValueError(
                f"pipeline {value!r} must be a pipeline name of this file or "
                "'other.yaml#name' (a file next to this one)"
            )
        return value

    @field_validator("extract")
    @classmethod
    def _value_names(cls, value: dict[str, Extract]) -> dict[str, Extract]:
        for name in value:
            if not re.match(r"^[A-Za-z_]\w{0,63}$", name):
                raise ValueError(f"extracted value name {name!r} must be an identifier")
        return value

    @model_validator(mode="after")
    def _one_executor(self) -> Worker:
        given = [
            k for k in ("model", "command", "call", "pipeline") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise ValueError(
                f"worker {self.role!r} needs exactly one of 'model', 'command', 'call' or "
                f"'pipeline' (found: {found})"
            )
        if self.pipeline_definition is not None and self.pipeline is None:
            raise ValueError("'pipeline_definition' is filled in from 'pipeline': remove it")
        if self.inputs and self.pipeline is None:
            raise ValueError("'inputs' only applies to 'pipeline' workers (a child run's inputs)")
        if self.pipeline is not None and self.reads:
            raise ValueError(
                "a 'pipeline' worker reads no files: pass what the child needs through "
                "'inputs' (templates such as '{{ topic }}')"
            )
        if self.fallback_models and self.model is None:
            raise ValueError("'fallback_models' only applies to 'model' workers")
        if self.accept_truncated and self.model is None:
            raise ValueError("'accept_truncated' only applies to 'model' workers")
        if self.params is not None and self.model is None:
            raise ValueError("'params' only applies to 'model' workers")
        if self.output_schema is not None and self.model is None:
            raise ValueError("'schema' only applies to 'model' workers")
        for key in ("tools", "max_turns", "accept_max_turns"):
            if getattr(self, key) and self.model is None:
                raise ValueError(f"{key!r} only applies to 'model' workers")
        if (self.max_turns is not None or self.accept_max_turns) and not self.tools:
            raise ValueError(
                "'max_turns' and 'accept_max_turns' bound a tool loop: give the worker 'tools'"
            )
        return self

    @property
    def output_name(self) -> str:
        """The file this worker writes, `<role>.md` unless `output` says otherwise."""
        return self.output or f"{self.role}.md"

    @property
    def kind(self) -> Literal["model", "command", "call", "pipeline"]:
        """How this worker runs."""
        if self.model is not None:
            return "model"
        if self.pipeline is not None:
            return "pipeline"
        return "command" if self.command is not None else "call"

    @property
    def child_name(self) -> str:
        """The name of the pipeline a `pipeline` worker runs (after any `file#`)."""
        return (self.pipeline or "").rpartition("#")[2]

    @property
    def max_attempts(self) -> int:
        """Attempts in all: (retries + 1) for the model and again for each fallback."""
        return (self.retries + 1) * (1 + len(self.fallback_models))

    def model_for_attempt(self, attempt: int) -> str | None:
        """The model alias attempt `attempt` (1-based) uses: own retries first, then fallbacks."""
        if self.model is None:
            return None
        index = (attempt - 1) // (self.retries + 1)
        return ([self.model, *self.fallback_models])[min(index, len(self.fallback_models))]


class Rule(_Model):
    """A transition: when `if` holds (or always, without it), go to `goto`."""

    if_: str | None = Field(default=None, alias="if")
    goto: str
    max_visits: Annotated[int, Field(ge=1, le=1000)] | None = None


class ForEach(_Model):
    """Fan-out: run the phase's workers once per item of an extracted list."""

    items: str  # "<role>.<value>", a list extracted from an earlier worker's output
    concurrency: Annotated[int, Field(ge=1, le=10_000)] | None = None
    max_items: Annotated[int, Field(ge=1, le=100_000)] = 1000
    # How many items may fail for good while the run goes on: a count or "N%" of the items
    # (`core.tolerance`). Left out of the canonical form when unset (definitions keep hashes).
    tolerate: Tolerance | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("tolerate", mode="before")
    @classmethod
    def _tolerance(cls, value: Any) -> Any:
        return None if value is None else parse_tolerance(value)

    @field_validator("items")
    @classmethod
    def _ref(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.[A-Za-z_]\w*$", value):
            raise ValueError(f"for_each items {value!r} must be '<role>.<extracted value>'")
        return value


def duration_seconds(value: Any, what: str) -> Any:
    """`30s`, `5m`, `2h`, `1d`, `1w` or a number of seconds, as seconds (others unchanged)."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(f"{what} {value!r} must be seconds or a duration like 30s, 5m, 2h, 1d")
        return float(match.group(1)) * _UNIT_S[match.group(2)]
    return value


SIGNAL_NAME = re.compile(r"^[A-Za-z_]\w{0,63}$")  # read as `signals.NAME` by conditions


class WaitFor(_Model):
    """Wait for a signal from outside the run before the phase starts or after it ends."""

    signal: str
    # Seconds (or "30m", "2h", "1d"); None: wait as long as it takes. When it passes, the
    # phase's `next` rules decide with `signals.NAME == null` (a phase waiting to start
    # does not run).
    timeout: Annotated[float, Field(gt=0)] | None = None
    # The JSON Schema the signal's data must match (checked when it is sent).
    data_schema: dict[str, Any] | None = Field(
        default=None, alias="schema", exclude_if=lambda value: value is None
    )
    when: Literal["before", "after"] = "before"

    @field_validator("signal")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SIGNAL_NAME.match(value):
            raise ValueError(
                f"signal name {value!r} must be an identifier (letters, digits, '_'), "
                "since conditions read it as signals.NAME"
            )
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return duration_seconds(value, "timeout")

    @field_validator("data_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = schema_problem(value) or pattern_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value


class Phase(_Model):
    """A group of workers run in parallel or one after another."""

    id: str
    mode: Literal["parallel", "sequential"] = "parallel"
    workers: Annotated[list[Worker], Field(min_length=1)]
    pause_after: bool = False
    next: list[Rule] = Field(default_factory=list)
    for_each: ForEach | None = None
    # Durable waits (`core.waits`), left out of the canonical form when unset so that
    # existing definitions keep their hashes.
    wait_for: WaitFor | None = Field(default=None, exclude_if=lambda value: value is None)
    delay: Annotated[float, Field(ge=0)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )  # seconds (or "2h", "1d") between the phase being entered and its start
    # A CEL expression giving the earliest start: a timestamp, RFC 3339 text or epoch seconds.
    not_before: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_safe_name(value, "phase id")

    @field_validator("delay", mode="before")
    @classmethod
    def _delay(cls, value: Any) -> Any:
        return duration_seconds(value, "delay")

    @model_validator(mode="after")
    def _one_start_time(self) -> Phase:
        if self.delay is not None and self.not_before is not None:
            raise ValueError("give 'delay' or 'not_before', not both")
        return self

    @field_validator("for_each", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"items": value} if isinstance(value, str) else value


class InputSpec(_Model):
    """A declared pipeline parameter."""

    default: str | int | float | bool | None = None
    # What a given value must be; without it, the default's kind (text when there is none).
    type: InputType | None = Field(default=None, exclude_if=lambda value: value is None)
    required: bool = False
    description: str = ""

    @property
    def kind(self) -> InputType:
        """The type a given value is converted to."""
        return self.type or kind_of(self.default)

    @model_validator(mode="before")
    @classmethod
    def _default_fits(cls, data: Any) -> Any:
        # An extracted value's type is written `string` or `bool`: the same words are taken.
        if isinstance(data, dict) and data.get("type") in ("string", "bool"):
            data = {**data, "type": {"string": "text", "bool": "boolean"}[data["type"]]}
        # A default is written in the file's own kind; `type: number, default: 1` keeps 1.0.
        if (
            not isinstance(data, dict)
            or data.get("type") not in TYPES
            or not isinstance(data.get("default"), str | int | float | bool)
        ):
            return data  # no default, or one `_scalar` refuses in its own words
        kind, default = data["type"], data["default"]
        if isinstance(default, str) and kind != "text":
            raise ValueError(
                f"the default {default!r} is text, but the input's type is {kind!r}: write it "
                "without quotes"
            )
        try:
            return {**data, "default": convert(default, kind)}
        except (ValueError, TypeError, OverflowError):
            raise ValueError(
                f"the default {default!r} is not of the input's type {kind!r}"
            ) from None

    @field_validator("default", mode="before")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        # One clear message instead of one per member of the union.
        if value is not None and not isinstance(value, str | int | float | bool):
            kinds = {"list": "a list", "dict": "a mapping"}
            kind = kinds.get(type(value).__name__, f"a {type(value).__name__}")
            raise ValueError(f"an input's default must be text, a number or true/false, not {kind}")
        return value


class Budget(_Model):
    """Limits on what one run may spend; reaching one fails or pauses the run."""

    max_cost_usd: Annotated[float, Field(gt=0)] | None = None
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    on_exceed: Literal["fail", "pause"] = "fail"


class Pipeline(_Model):
    """A static pipeline definition; a run pins the exact one it started with."""

    description: str = ""
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    phases: Annotated[list[Phase], Field(min_length=1)]
    budget: Budget | None = None
    schedule: str | None = None
    # At most this many runs of the pipeline at once, or per value of a key.
    concurrency: Annotated[int, Field(ge=1)] | ConcurrencyKey | None = None
    cache: bool | Cache | None = None  # for every worker that does not say otherwise
    # Environment variables every command worker of the pipeline gets (see `Worker.env`).
    env: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    # What a delivered run scores, name -> CEL over extracted values (`reviewer.score`): read
    # by `interlock compare`. Left out of the canonical form when empty, so that a pipeline
    # without metrics hashes as before.
    metrics: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)

    @field_validator("cache", mode="before")
    @classmethod
    def _cache_setting(cls, value: Any) -> Any:
        return cache_setting(value)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        return env_names(value)

    def env_for(self, role: str) -> list[str]:
        """The variables a command worker `role` gets beyond the base set: the pipeline's
        `env`, then the worker's."""
        return list(dict.fromkeys([*self.env, *self.worker(role).env]))

    # How many times a person may send a run back at a review (`interlock reject`).
    max_rejections: Annotated[int, Field(ge=0, le=1000)] = DEFAULT_REJECTIONS

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = _drop_unset_cache(handler(self), self.cache)
        if self.max_rejections == DEFAULT_REJECTIONS and isinstance(data, dict):
            data.pop("max_rejections", None)  # the hash of a pipeline that does not set it
        return data

    @property
    def slots(self) -> ConcurrencyKey | None:
        """The run concurrency as a key and a limit (a plain number: one key, the pipeline)."""
        if isinstance(self.concurrency, int):
            return ConcurrencyKey(key='""', limit=self.concurrency)
        return self.concurrency

    def cache_for(self, role: str) -> Cache | None:
        """The cache settings of worker `role` (None: off)."""
        setting = self.worker(role).cache
        if setting is None:
            setting = self.cache
        if setting is None or setting is False:
            return None
        return Cache() if setting is True else setting

    @field_validator("inputs", mode="before")
    @classmethod
    def _input_shorthand(cls, value: Any) -> Any:
        # `inputs: {language: French}` is short for `{language: {default: French}}`.
        if isinstance(value, dict):
            return {k: v if isinstance(v, dict) else {"default": v} for k, v in value.items()}
        return value

    # Lookups by name, built once per (frozen) pipeline: the engine asks them on every step.

    @cached_property
    def _phase_positions(self) -> dict[str, int]:
        positions: dict[str, int] = {}
        for index, phase in enumerate(self.phases):
            positions.setdefault(phase.id, index)
        return positions

    @cached_property
    def _roles(self) -> dict[str, tuple[Worker, Phase]]:
        roles: dict[str, tuple[Worker, Phase]] = {}
        for phase in self.phases:
            for worker in phase.workers:
                roles.setdefault(worker.role, (worker, phase))
        return roles

    @cached_property
    def shortest_deadline(self) -> float:
        """The least timeout + grace of any worker: no started attempt can time out sooner."""
        return min(w.timeout + w.grace for p in self.phases for w in p.workers)

    @cached_property
    def shortest_start(self) -> float:
        """The least start deadline of any worker: no attempt counts as lost sooner."""
        return min(w.start_deadline for p in self.phases for w in p.workers)

    @cached_property
    def writers(self) -> dict[str, str]:
        """Output file name -> the role that writes it."""
        return {w.output_name: w.role for p in self.phases for w in p.workers}

    @property
    def phase_ids(self) -> KeysView[str]:
        """Every phase's id, in file order."""
        return self._phase_positions.keys()

    def phase(self, phase_id: str) -> Phase:
        """The phase named `phase_id` (KeyError if none)."""
        return self.phases[self._phase_positions[phase_id]]

    def phase_index(self, phase_id: str) -> int:
        """Position of the phase in file order (ValueError if none)."""
        try:
            return self._phase_positions[phase_id]
        except KeyError:
            raise ValueError(f"{phase_id!r} is not a phase") from None

    @cached_property
    def task_keys(self) -> bool:
        """Whether a worker has a concurrency key (most pipelines skip that gate entirely)."""
        return any(w.concurrency is not None for p in self.phases for w in p.workers)

    def worker(self, role: str) -> Worker:
        """The worker whose role is `role` (KeyError if none)."""
        return self._roles[role][0]

    def phase_of(self, role: str) -> Phase:
        """The phase that holds the worker `role`."""
        return self._roles[role][1]

    @cached_property
    def final_worker(self) -> Worker:
        """The worker whose output is the run's result."""
        return next(w for p in self.phases for w in p.workers if w.final)


# Built now, once: the file's validator below reuses it (the models in it stay unbuilt).
Pipeline.model_rebuild()


class WorkflowFile(RootModel[dict[str, Pipeline]]):
    """The top level of a workflow file: pipeline name -> pipeline."""

    model_config = ConfigDict(frozen=True)
