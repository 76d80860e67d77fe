"""The MCP servers of one attempt's tool loop: started, listed, called, stopped.

A stdio server is a program that runs on model-chosen arguments: like an agent command, it
gets only the environment a program needs plus the variables its entry names (`env`), never
the keys of the process that runs interlock.

Uses the official `mcp` SDK (the optional extra ``interlock[mcp]``). Every fault of a server
becomes a `ProviderError` that names the server and says what to do: a command that is not
found (not retryable: the workflow must change), a server that exits, fails to start or does
not answer a call within its `timeout` (retryable: the next attempt starts it afresh). What a
tool itself reports as an error is no fault: it goes back to the model as an error result.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO, cast

from interlock.core.tools import ToolServer
from interlock.providers.base import ProviderError, ToolCall, ToolResult, ToolSpec
from interlock.providers.cli_env import allowed_env

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import RequestParamsMeta

INSTALL_HINT = (
    "pip install 'interlock[mcp]' (in a clone of the repository: pip install -e '.[mcp]')"
)
_STDERR_TAIL = 600  # characters of a server's stderr quoted when it fails
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
KEY_META = "interlock/idempotency-key"
"""The request metadata (`_meta`) entry of a tool call that holds its idempotency key."""


def sdk_missing() -> str | None:
    """Why tools cannot run in this environment (the MCP SDK is missing), or None."""
    try:
        import mcp  # noqa: F401  (only whether it imports)
    except ImportError:
        return f"tools need the MCP client library, which is not installed: {INSTALL_HINT}"
    return None


class _Server:
    """One connected server: its client, its settings and where its stderr goes."""

    def __init__(self, server: ToolServer, client: Client, errlog: TextIO | None) -> None:
        self.server = server
        self.client = client
        self.errlog = errlog

    def said(self) -> str:
        """The end of what the server wrote to stderr, for error messages."""
        if self.errlog is None:
            return ""
        self.errlog.flush()
        # Only the tail is read: a server may have written gigabytes.
        raw = self.errlog.buffer
        size = raw.seek(0, os.SEEK_END)
        raw.seek(max(0, size - 4 * _STDERR_TAIL))
        text = raw.read().decode("utf-8", errors="replace").strip()
        return f"; it wrote: {text[-_STDERR_TAIL:]}" if text else ""


class Toolbox:
    """The tools of a worker's servers, open for one attempt (an async context manager).

    Args:
        servers: The worker's `tools:` entries.
        role: The worker, named in error messages.
        cwd: Where stdio servers start (the workflow file's folder).
    """

    def __init__(self, servers: list[ToolServer], *, role: str, cwd: Path | None) -> None:
        self._servers = servers
        self._role = role
        self._cwd = cwd
        self._stack = AsyncExitStack()
        self._by_tool: dict[str, _Server] = {}  # by the name the model knows
        self._names: dict[str, str] = {}  # the name the model knows -> the server's name
        self._calls: dict[int, int] = {}  # calls made of each server (by id), this attempt
        self.specs: tuple[ToolSpec, ...] = ()

    async def __aenter__(self) -> Toolbox:
        missing = sdk_missing()
        if missing is not None:
            raise ProviderError(f"worker {self._role!r}: {missing}", retryable=False)
        try:
            specs: list[ToolSpec] = []
            for server in self._servers:
                specs += await self._open(server)
        except BaseException:
            await self._close()
            raise
        self.specs = tuple(specs)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        # A server that already died cannot be stopped twice: its close errors say nothing.
        with contextlib.suppress(Exception):
            await self._stack.aclose()

    def _where(self, server: ToolServer) -> str:
        return f"worker {self._role!r}: tool server {server.label!r}"

    async def _open(self, server: ToolServer) -> list[ToolSpec]:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        errlog: TextIO | None = None
        if server.mcp is not None:
            errlog = cast(
                TextIO,
                self._stack.enter_context(
                    tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 (the stack closes it)
                ),
            )
            params = StdioServerParameters(
                command=server.mcp[0],
                args=server.mcp[1:],
                env=allowed_env(os.environ, server.env or ()),
                cwd=self._cwd,
            )
            client = Client(stdio_client(params, errlog=errlog), mode="legacy")
        else:
            client = Client(str(server.url), mode="legacy")
        opened = _Server(server, client, errlog)
        where = self._where(server)
        try:
            await self._stack.enter_async_context(client)
            listed = await client.list_tools()
        except OSError as exc:
            if server.mcp is not None and isinstance(exc, FileNotFoundError):
                raise ProviderError(
                    f"{where}: command {server.mcp[0]!r} was not found: install it or fix "
                    "the 'mcp' entry under the worker's 'tools'",
                    retryable=False,
                ) from None
            raise ProviderError(
                f"{where} could not be reached: {exc}{opened.said()}", retryable=True
            ) from None
        except Exception as exc:
            failed = "did not start" if server.mcp is not None else "could not be reached"
            raise ProviderError(
                f"{where} {failed}: {_describe(exc)}{opened.said()}", retryable=True
            ) from None
        offered = {tool.name for tool in listed.tools}
        for key in ("allow", "approve"):
            unknown = [name for name in getattr(server, key) or () if name not in offered]
            if unknown:
                raise ProviderError(
                    f"{where} offers no tool {unknown[0]!r}, which its {key!r} names; it "
                    f"offers: {', '.join(sorted(offered)) or 'none'}",
                    retryable=False,
                )
        specs = []
        for tool in listed.tools:
            if not server.offers(tool.name):
                continue
            name = wire_name(tool.name)
            if name in self._by_tool:
                other = self._by_tool[name].server.label
                raise ProviderError(
                    f"{where} offers tool {tool.name!r}, which {other!r} offers too (as "
                    f"{name!r}): list servers whose tool names differ",
                    retryable=False,
                )
            self._by_tool[name] = opened
            self._names[name] = tool.name
            schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
            specs.append(
                ToolSpec(
                    name=name,
                    description=tool.description or "",
                    input_schema={"type": "object", **schema},
                )
            )
        return specs

    def asks(self, call: ToolCall) -> bool:
        """Whether `call` is of a tool its server's `approve` lists: it waits for a person."""
        opened = self._by_tool.get(call.name)
        return opened is not None and opened.server.asks(self._names[call.name])

    async def call(self, call: ToolCall, *, key: str = "") -> ToolResult:
        """Run one call the model asked for, `key` (its idempotency key, when given) sent in
        the request's metadata as `KEY_META`.

        A call of a tool no server offers, or with arguments that are no JSON object, is
        answered with an error result the model can act on.

        Raises:
            ProviderError: The server exited, or did not answer within its timeout.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        opened = self._by_tool.get(call.name)
        if opened is None:
            known = ", ".join(sorted(self._by_tool)) or "none"
            return ToolResult(
                call_id=call.id,
                content=f"unknown tool {call.name!r}; the tools are: {known}",
                is_error=True,
            )
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError as exc:
            arguments = exc
        if not isinstance(arguments, dict):
            return ToolResult(
                call_id=call.id,
                content=f"the arguments of {call.name!r} must be a JSON object; got "
                f"{call.arguments!r}",
                is_error=True,
            )
        server = opened.server
        where = self._where(server)
        made = self._calls.get(id(server), 0)
        if server.max_calls is not None and made >= server.max_calls:
            return ToolResult(
                call_id=call.id,
                content=f"the tools of this server may be called {server.max_calls} time(s) "
                f"in this task, and were: answer without {call.name!r}",
                is_error=True,
            )
        self._calls[id(server)] = made + 1
        timeout = server.timeout_of(self._names[call.name])
        try:
            result = await opened.client.call_tool(
                self._names[call.name],
                arguments,
                read_timeout_seconds=timeout,
                meta=cast("RequestParamsMeta", {KEY_META: key}) if key else None,
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                said = (
                    "its 'timeouts' entry" if timeout != server.timeout else "the entry's 'timeout'"
                )
                raise ProviderError(
                    f"{where}: tool {call.name!r} did not answer within {timeout:g} s "
                    f"({said}); the attempt was stopped",
                    retryable=True,
                ) from None
            if "closed" in exc.message.lower():
                raise ProviderError(
                    f"{where} exited while tool {call.name!r} was running{opened.said()}",
                    retryable=True,
                ) from None
            # A protocol-level error about this call (bad arguments, unknown tool on the
            # server's side): the model gets to see it and try again.
            return ToolResult(call_id=call.id, content=exc.message, is_error=True)
        except Exception as exc:
            raise ProviderError(
                f"{where} failed while tool {call.name!r} was running: {_describe(exc)}"
                f"{opened.said()}",
                retryable=True,
            ) from None
        return ToolResult(
            call_id=call.id,
            content=_content_text(result.content, result.structured_content),
            is_error=bool(result.is_error),
        )


def wire_name(name: str) -> str:
    """A tool's name as both APIs accept it (letters, digits, '_' and '-', at most 64): MCP
    allows more, such as dots and slashes."""
    return _UNSAFE.sub("_", name)[:64] or "tool"


def _describe(exc: BaseException) -> str:
    """A one-line account of an error, looking inside exception groups."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _content_text(content: list[Any], structured: Any) -> str:
    """A tool result as the text the model reads: its text parts, other parts named."""
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content not shown]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(parts)
