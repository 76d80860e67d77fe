"""Request settings of a model call: the one model shared by `interlock.toml` and `params:`.

A `[models.<alias>]` table sets them for every call to that alias; a worker's `params:`
overrides them for its own calls (and those of its fallback models). Which provider kinds
accept which settings is said in `interlock.providers.request`; this module only checks the
values. Pure: no I/O.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


def unknown_keys_message(given: Any, known: list[str], what: str) -> str | None:
    """A message naming each key of `given` not in `known`, with the closest known one."""
    if not isinstance(given, dict):
        return None
    problems = []
    for key in given:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"unknown {what} {key!r}{hint}")
    if not problems:
        return None
    return f"{'; '.join(problems)}; known: {', '.join(sorted(known))}"


class RequestSettings(BaseModel):
    """What a model call is sent besides its messages. Unset settings are not sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    seed: int | None = None
    stop: list[str] | None = None  # one string is read as a list of one
    max_output_tokens: Annotated[int, Field(gt=0)] | None = None
    reasoning_effort: ReasoningEffort | None = None  # OpenAI reasoning models
    thinking_budget: Annotated[int, Field(ge=1024)] | None = None  # Anthropic extended thinking
    # Seconds one call to this model may take, within the worker's `timeout`.
    timeout: Annotated[float, Field(gt=0)] | None = None
    # False: ask for one JSON answer instead of an event stream.
    stream: bool | None = None
    # Anthropic: mark the system prompt and the input files as cacheable.
    cache_prompt: bool | None = None
    extra_body: dict[str, Any] | None = None  # merged into the request body last
    headers: dict[str, str] | None = None  # sent with every request; values never recorded

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        message = unknown_keys_message(value, list(cls.model_fields), "setting")
        if message is not None:
            raise ValueError(message)
        if isinstance(value, dict) and isinstance(value.get("stop"), str):
            value = {**value, "stop": [value["stop"]]}
        return value

    def set_fields(self) -> dict[str, Any]:
        """The settings given, by name (JSON values)."""
        return self.model_dump(mode="json", exclude_none=True)

    def over(self, base: RequestSettings) -> RequestSettings:
        """These settings laid over `base`: each one given here wins; `extra_body` and
        `headers` are merged key by key."""
        merged = {**base.set_fields(), **self.set_fields()}
        for key in ("extra_body", "headers"):
            mine, theirs = getattr(self, key), getattr(base, key)
            if mine is not None and theirs is not None:
                merged[key] = {**theirs, **mine}
        return RequestSettings.model_validate(merged)


SETTING_NAMES = tuple(RequestSettings.model_fields)
"""Every request setting, in declaration order."""
