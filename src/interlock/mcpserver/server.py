"""The MCP server: interlock's tools and resources on the official SDK's `MCPServer`."""

from __future__ import annotations

import inspect
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from interlock.errors import InterlockError
from interlock.mcpserver.backend import Backend
from interlock.mcpserver.batch_tools import BatchTools
from interlock.mcpserver.tools import Tools, failure, read_text
from interlock.runtime.home import check_run_id
from interlock.server.errors import ApiError
from interlock.server.views import run_row

INSTRUCTIONS = """\
interlock runs multi-agent pipelines defined in workflow files. A typical session:
list_pipelines (what can run, and its inputs) -> start_run -> wait_for_run (or run_status)
-> when paused: list_outputs / read_output, then approve, reject (back to a phase with
feedback) or edit_output -> wait_for_run -> read_output final.md. A run waiting for a signal
(status waiting) goes on when it is sent with signal. run_events and explain say
what happened and why. Outputs are also resources: interlock://runs/{run_id}/outputs/{name}.
A dataset: start_batch (one run per row) -> batch_status -> retry_batch (failed rows) or
cancel_batch; list_batches lists them; compare_batches compares an experiment's variants or
two batches of the same rows.
"""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
ACTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
STOPS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)
TOOL_NAMES = (
    "list_pipelines",
    "list_runs",
    "start_run",
    "rerun",
    "run_status",
    "wait_for_run",
    "run_events",
    "explain",
    "list_outputs",
    "read_output",
    "approve",
    "reject",
    "edit_output",
    "decide_tool_call",
    "cancel",
    "signal",
    "resume",
)
BATCH_TOOL_NAMES = (
    "list_batches",
    "batch_status",
    "start_batch",
    "retry_batch",
    "cancel_batch",
    "compare_batches",
)


def _version() -> str:
    try:
        return version("interlock")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0"


class _Server(MCPServer):
    """`MCPServer` whose refusal of a call's arguments (a required one missing, one of the
    wrong type) is an error result in the API's shape, as every other refusal is, with the
    REST API's code for a request that does not match its schema."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            return failure(ApiError(422, "invalid_request", invalid_arguments(name, cause)))


def invalid_arguments(tool: str, exc: ValidationError) -> str:
    """The problems of a call's arguments in words, without their values (the caller's
    data): `start_run: topic: required, give it`."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        place = ".".join(str(part) for part in error["loc"]) or "arguments"
        said = "required, give it" if error["type"] == "missing" else error["msg"]
        problems.append(f"{place}: {said}")
    return f"{tool}: " + "; ".join(problems)


def build(backend: Backend) -> MCPServer:
    """An MCP server whose tools act on `backend`."""
    server: MCPServer = _Server(
        "interlock",
        title="interlock",
        description="Start, follow, review and steer runs of interlock pipelines.",
        instructions=INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",
        warn_on_duplicate_tools=True,
    )
    tools = Tools(backend)
    batches = BatchTools(backend)
    named = [(n, getattr(tools, n)) for n in TOOL_NAMES]
    named += [(n, getattr(batches, n)) for n in BATCH_TOOL_NAMES]
    for name, method in named:
        scope = method.scope
        stops = name in ("cancel", "cancel_batch")
        hints = READ_ONLY if scope == "read" else STOPS if stops else ACTS
        description = inspect.cleandoc(method.__doc__ or "")  # no docstring indentation
        server.add_tool(
            method, name=name, description=description, annotations=hints, structured_output=True
        )

    @server.resource(
        "interlock://runs",
        name="runs",
        description="The 100 newest runs (JSON), as list_runs gives them.",
        mime_type="application/json",
    )
    def runs() -> str:
        records = backend.api.store.list_runs(limit=100)
        return json.dumps([run_row(r) for r in records], indent=2)

    @server.resource(
        "interlock://runs/{run_id}/outputs/{name}",
        name="run output",
        description="An output of a run (a name list_outputs gives, or final.md).",
        mime_type="text/plain",
    )
    async def output(run_id: str, name: str, ctx: Context) -> str:
        try:
            backend.allow(backend.caller(ctx.request_context.request), "read", "read_output")
            run_id = backend.api.resolve(check_run_id(run_id))
            return read_text(backend, run_id, name)
        except ApiError as exc:
            raise ResourceError(f"{exc.code}: {exc.message}") from None
        except InterlockError as exc:
            raise ResourceError(exc.message) from None

    return server
