"""The `tools:` of a model worker: MCP servers whose tools the model may call.

A worker lists servers as ``{mcp: [command, args...]}`` (started as a subprocess, spoken to
over stdio) or ``{url: https://...}`` (streamable HTTP); the runtime runs the tool loop. This
module only checks the shape. Pure: no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from interlock.core.params import unknown_keys_message

DEFAULT_TOOL_TIMEOUT_S = 60.0  # one tool call; a server that hangs fails the attempt after it
DEFAULT_MAX_TURNS = 10  # model calls in one attempt's tool loop, when the worker sets none
MAX_TURNS_LIMIT = 100


class ToolServer(BaseModel):
    """One MCP server a model worker may call tools of."""

    # Built at its first use: reading a workflow file validates it inside the pipeline's.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    mcp: list[str] | None = None  # argv of a stdio server
    url: str | None = None  # a streamable HTTP server's endpoint
    # Seconds one tool call may take before the attempt fails.
    timeout: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_TOOL_TIMEOUT_S
    # Names of variables a stdio server gets besides the few every started program gets
    # (see `interlock.providers.cli_env`): names only, so no value is pinned with the run.
    env: list[str] | None = None
    # Which of the server's tools the model is offered (by the server's names): only those
    # of `allow` when given, never those of `deny`.
    allow: list[str] | None = None
    deny: list[str] | None = None
    # Calls of this server's tools in one attempt; past it a call is answered with an error
    # the model can act on (finish without it).
    max_calls: Annotated[int, Field(ge=1, le=10_000)] | None = None
    # Seconds one call of a named tool may take, instead of `timeout`.
    timeouts: dict[str, Annotated[float, Field(gt=0, le=3600)]] | None = None
    # Tools (by the server's names) whose every call waits for a person: the run pauses
    # showing the call, and `interlock approve --call` lets it run or `reject --call`
    # answers the model with a refusal.
    approve: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        message = unknown_keys_message(value, list(cls.model_fields), "tools key")
        if message is not None:
            raise ValueError(message)
        return value

    @field_validator("mcp")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0].strip()):
            raise ValueError("mcp must be a non-empty argv list, e.g. ['python', 'server.py']")
        return value

    @field_validator("url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"url {value!r} must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ToolServer:
        if (self.mcp is None) == (self.url is None):
            raise ValueError(
                "each tools entry needs exactly one of 'mcp' (a command, e.g. "
                "{mcp: [python, server.py]}) or 'url' (e.g. {url: http://localhost:8000/mcp})"
            )
        if self.env is not None and self.mcp is None:
            raise ValueError("'env' only applies to 'mcp' servers started as a command")
        for key in ("allow", "deny", "approve"):
            names = getattr(self, key) or []
            if any(not isinstance(n, str) or not n.strip() for n in names):
                raise ValueError(f"'{key}' lists tool names: each a non-empty string")
        both = sorted(set(self.allow or ()) & set(self.deny or ()))
        if both:
            raise ValueError(f"tool {both[0]!r} is both in 'allow' and in 'deny': keep one")
        denied = sorted(set(self.approve or ()) & set(self.deny or ()))
        if denied:
            raise ValueError(
                f"tool {denied[0]!r} is both in 'approve' and in 'deny': a denied tool is "
                "never offered, so no call of it waits for approval; keep one"
            )
        if self.allow is not None and self.approve:
            other = sorted(set(self.approve) - set(self.allow))
            if other:
                raise ValueError(
                    f"'approve' names {other[0]!r}, which 'allow' leaves out: add it to "
                    "'allow' or remove it from 'approve'"
                )
        if self.allow is not None and self.timeouts:
            other = sorted(set(self.timeouts) - set(self.allow))
            if other:
                raise ValueError(
                    f"'timeouts' names {other[0]!r}, which 'allow' leaves out: no call of it "
                    "can be made"
                )
        return self

    def offers(self, name: str) -> bool:
        """Whether the model may be offered the server's tool `name`."""
        if self.allow is not None and name not in self.allow:
            return False
        return name not in (self.deny or ())

    def asks(self, name: str) -> bool:
        """Whether a call of the server's tool `name` waits for a person's approval."""
        return name in (self.approve or ())

    def timeout_of(self, name: str) -> float:
        """Seconds one call of tool `name` may take."""
        return (self.timeouts or {}).get(name, self.timeout)

    @property
    def label(self) -> str:
        """How messages name this server: its command line or its URL."""
        return " ".join(self.mcp) if self.mcp is not None else str(self.url)
