"""The MCP tools: list pipelines, start and rerun runs, read them, and a person's commands.

Each tool calls the public API (`interlock.api.Interlock`) and the functions the REST routes
share (`interlock.server.views`, `files`), so a tool answers what the matching route answers.
Each needs the scope its route needs: reading needs `read`, acting needs `operate`. A refused
or failed call is an MCP error result whose structured content is the API's error body,
`{"error": {"code", "message"}}`, with the same codes and messages.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent

from interlock.core.state import RunState
from interlock.errors import InterlockError
from interlock.mcpserver.backend import Backend
from interlock.runtime.home import check_run_id
from interlock.server import files
from interlock.server.errors import ApiError, from_interlock
from interlock.server.messages import event_record
from interlock.server.views import run_detail, run_row

Scalar = str | int | float | bool
Result = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Awaitable[Result]])
ENDED = ("delivered", "failed", "cancelled")
WAIT_LIMIT = 120.0  # seconds one wait_for_run call may block


def output_uri(run_id: str, name: str) -> str:
    """The resource that holds output `name` of a run."""
    return f"interlock://runs/{run_id}/outputs/{name}"


def failure(error: ApiError) -> CallToolResult:
    """An MCP error result carrying the API's error body."""
    text = f"{error.code}: {error.message}"
    content = {"error": {"code": error.code, "message": error.message}}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=content, is_error=True
    )


def tool(scope: str, action: str = "") -> Callable[[F], F]:
    """A tool method that needs `scope`; an acting one spends the rate-limit bucket of the
    REST route doing the same `action`. Interlock's errors become error results."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        async def wrapper(self: Tools, *args: Any, ctx: Context, **kwargs: Any) -> Any:
            try:
                principal = self.backend.caller(ctx.request_context.request)
                self.backend.allow(principal, scope, method.__name__, action)
                return await method(self, *args, ctx=ctx, **kwargs)
            except ApiError as exc:
                return failure(exc)
            except InterlockError as exc:
                return failure(from_interlock(exc))

        wrapper.scope = scope  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


class Tools:
    """The tools of one backend (registered by `interlock.mcpserver.server.build`)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.api = backend.api

    def _run(self, run_id: str) -> str:
        """A run id or unambiguous prefix, resolved (a clear error when unknown)."""
        return self.api.resolve(check_run_id(run_id))

    async def _in_state(self, run_id: str, action: str, allowed: tuple[str, ...]) -> str:
        """The resolved run, refused unless its status is one of `allowed`."""
        run_id = self._run(run_id)
        status = await self.backend.reader().call(run_id, lambda f: f.state.status.value)
        if status not in allowed:
            raise ApiError(
                409,
                "wrong_state",
                f"cannot {action} run {run_id}: it is {status}; {action} needs a run that is "
                f"{' or '.join(allowed)}",
            )
        return run_id

    def _by(self, ctx: Context) -> str:
        return self.backend.caller(ctx.request_context.request).subject

    # -- pipelines and runs -------------------------------------------------------------------

    @tool("read")
    async def list_pipelines(self, *, ctx: Context) -> Result:
        """The pipelines that can be started here: description, declared inputs (default,
        whether required) and phases. Give one to start_run."""
        return self.backend.pipelines.describe()

    @tool("read")
    async def list_runs(
        self,
        status: str | None = None,
        pipeline: str | None = None,
        limit: int = 30,
        *,
        ctx: Context,
    ) -> Result:
        """Runs, newest first (status: running, waiting, paused, delivered, failed or
        cancelled)."""
        limit = max(1, min(limit, 1000))
        records = self.api.store.list_runs(status=status, pipeline=pipeline, limit=limit)
        return {"runs": [run_row(r) for r in records]}

    @tool("operate", "start")
    async def start_run(
        self,
        pipeline: str,
        topic: str,
        inputs: dict[str, Scalar] | None = None,
        run_id: str | None = None,
        *,
        ctx: Context,
    ) -> Result:
        """Start a run of `pipeline` about `topic`, with values for its declared inputs; it
        is driven here. Follow it with wait_for_run or run_status."""
        definition = self.backend.pipelines.get(pipeline)
        new = self.api.start(definition, topic=topic, inputs=inputs or {}, run_id=run_id)
        self.backend.orchestrator.wake()
        return run_row(self.api.store.get_run(new))

    @tool("operate", "rerun")
    async def rerun(
        self,
        run_id: str,
        from_phase: str | None = None,
        topic: str | None = None,
        inputs: dict[str, Scalar] | None = None,
        pipeline: str | None = None,
        no_cache: bool = False,
        dry_run: bool = False,
        *,
        ctx: Context,
    ) -> Result:
        """Start a new run from an ended one: tasks before `from_phase` whose inputs did not
        change reuse the source's outputs at no cost. `pipeline` runs that pipeline's current
        definition instead of the pinned one; `dry_run` returns only the plan."""
        source = await self._in_state(run_id, "rerun", ENDED)
        definition = self.backend.pipelines.get(pipeline) if pipeline else None
        options: dict[str, Any] = {
            "from_phase": from_phase,
            "topic": topic,
            "inputs": inputs,
            "no_cache": no_cache,
            "definition": definition,
        }
        if dry_run:
            return self.api.plan_rerun(source, **options).as_dict()
        new = self.api.rerun(source, **options)
        self.backend.orchestrator.wake()
        return {**run_row(self.api.store.get_run(new)), "rerun_of": source}

    @tool("read")
    async def run_status(self, run_id: str, *, ctx: Context) -> Result:
        """A run's state: status, phase, why it is paused, each phase's workers and tasks
        (attempts, outputs, errors), cost, tokens, warnings, failure, final output."""
        return await self._detail(self._run(run_id))

    async def _detail(self, run_id: str) -> Result:
        """What run_status answers (the REST route's view), read off the event loop."""
        return await self.backend.reader().call(
            run_id, lambda f: run_detail(self.api, run_id, state=f.state, record=f.record)
        )

    @tool("read")
    async def wait_for_run(self, run_id: str, timeout_s: float = 30.0, *, ctx: Context) -> Result:
        """Wait until a run is no longer running (waiting for a signal or a time, paused,
        delivered, failed, cancelled) or `timeout_s` passes (at most 120), then return its
        state as run_status does."""
        run_id = self._run(run_id)
        deadline = time.monotonic() + max(0.0, min(timeout_s, WAIT_LIMIT))
        while True:
            record = self.api.store.get_run(run_id)
            commands = self.api.store.pending_commands(run_id)
            settled = record.summary.status != "running" and not commands
            if settled or time.monotonic() >= deadline:
                return {**await self._detail(run_id), "timed_out": not settled}
            await asyncio.sleep(0.05)

    @tool("read")
    async def run_events(
        self, run_id: str, since: int = 0, limit: int = 200, *, ctx: Context
    ) -> Result:
        """A run's history after sequence number `since`: each event with the rule and
        reason that decided it and one readable sentence."""
        run_id = self._run(run_id)
        since, limit = max(0, min(since, 2**62)), max(1, min(limit, 10_000))
        events = await self.backend.reader().off_loop(
            lambda: [event_record(s) for s in self.api.store.events(run_id, since, limit)]
        )
        last = events[-1]["seq"] if events else since
        return {"run_id": run_id, "events": events, "last_seq": last}

    @tool("read")
    async def explain(self, run_id: str, prompts_of: str | None = None, *, ctx: Context) -> Result:
        """Each decision of a run with the rule that made it, why, and the values its
        conditions read; with `prompts_of` (a task id such as draft.writer.1), the exact
        prompts that task was sent (on this machine only: not served over HTTP)."""
        from interlock.runtime.explain import decisions, prompts

        run_id = self._run(run_id)
        if prompts_of is None:
            return {"run_id": run_id, "decisions": decisions(self.api.store, run_id)}
        if not self.backend.local:
            raise ApiError(
                403,
                "not_served",
                "prompts are not served by the MCP endpoint over HTTP: GET "
                f"/api/runs/{run_id}/attempts/SEQ shows an attempt's prompt (credentials "
                "masked), or read them on the server's machine (interlock explain RUN --prompt "
                "TASK)",
            )
        found = prompts(self.api.run_dir(run_id), prompts_of)
        return {"run_id": run_id, "prompts": [{"attempt": a, "text": t} for a, t in found]}

    @tool("read")
    async def list_outputs(self, run_id: str, *, ctx: Context) -> Result:
        """The outputs a run committed so far (and final.md once delivered), each with the
        resource URI that reads it."""
        run_id = self._run(run_id)
        directory = files.run_dir(self.api.home, run_id)
        served = await self.backend.reader().call(
            run_id, lambda f: files.served(f.state, directory)
        )
        listed = [{**item, "uri": output_uri(run_id, str(item["name"]))} for item in served]
        return {"run_id": run_id, "outputs": listed}

    @tool("read")
    async def read_output(self, run_id: str, name: str, *, ctx: Context) -> Result:
        """The text of output `name` of a run (a name list_outputs gives, or final.md)."""
        run_id = self._run(run_id)
        text = await self.backend.reader().call(
            run_id, lambda f: read_text(self.backend, run_id, name, f.state)
        )
        return {"run_id": run_id, "name": name, "text": text}

    # -- a person's commands ------------------------------------------------------------------

    @tool("operate", "approve")
    async def approve(self, run_id: str, note: str = "", *, ctx: Context) -> Result:
        """Approve a paused run (with an optional note kept in its history); it goes on."""
        run_id = await self._in_state(run_id, "approve", ("paused",))
        self.api.approve(run_id, note, by=self._by(ctx))
        self.backend.drive(run_id)
        return {"run_id": run_id, "accepted": "approve"}

    @tool("operate", "reject")
    async def reject(self, run_id: str, to: str, feedback: str, *, ctx: Context) -> Result:
        """Send a paused run back to phase `to`; `feedback` is what its tasks are told to
        change (after a model's task, or where a template places {{ feedback }})."""
        run_id = await self._in_state(run_id, "reject", ("paused",))
        self.api.reject(run_id, to, feedback, by=self._by(ctx))
        self.backend.drive(run_id)
        return {"run_id": run_id, "accepted": "reject", "to": to}

    @tool("operate", "approve")
    async def decide_tool_call(
        self, run_id: str, call: str, approve: bool, reason: str = "", *, ctx: Context
    ) -> Result:
        """Decide a tool call that waits for a person (`call` as TASK/TURN/CALL, as the run's
        status lists it): `approve` true lets it run once, false refuses it and the model is
        told `reason`; the run goes on."""
        self.api.decide_call(run_id, call, approved=approve, note=reason, by=self._by(ctx))
        self.backend.drive(self.api.resolve(run_id))
        return {"run_id": run_id, "accepted": "approve" if approve else "reject", "call": call}

    @tool("operate", "edit")
    async def edit_output(
        self, run_id: str, output: str, text: str, note: str = "", *, ctx: Context
    ) -> Result:
        """Replace output `output` (a file name such as draft.md, or a role) of a paused run
        with `text`. The run stays paused; tasks that read the old text run again once it is
        approved."""
        run_id = await self._in_state(run_id, "edit", ("paused",))
        self.api.edit(run_id, output, text, note=note, by=self._by(ctx))
        self.backend.drive(run_id)
        return {"run_id": run_id, "accepted": "edit", "output": output}

    @tool("operate", "cancel")
    async def cancel(self, run_id: str, reason: str = "", *, ctx: Context) -> Result:
        """Cancel a running or paused run; its in-flight tasks are stopped."""
        run_id = await self._in_state(run_id, "cancel", ("running", "paused"))
        self.api.cancel(run_id, reason, by=self._by(ctx))
        self.backend.drive(run_id)
        return {"run_id": run_id, "accepted": "cancel"}

    @tool("operate", "signal")
    async def signal(
        self, run_id: str, name: str, data: Any = None, key: str | None = None, *, ctx: Context
    ) -> Result:
        """Send signal `name` with JSON `data` to a run (running, waiting or paused): the phase
        that waits for it (`wait_for`) goes on, reading `signals.NAME`. A signal sent before
        the wait is kept until then; a repeated idempotency `key` is ignored."""
        run_id = await self._in_state(run_id, "signal", ("running", "paused"))
        receipt = self.api.signal(run_id, name, data, key=key, by=self._by(ctx))
        self.backend.drive(run_id)
        return {
            "run_id": receipt.run_id,
            "signal": receipt.name,
            "key": receipt.key,
            "accepted": "ignored" if receipt.duplicate else "signal",
            "duplicate": receipt.duplicate,
            "message": receipt.note,
        }

    @tool("operate", "resume")
    async def resume(self, run_id: str, *, ctx: Context) -> Result:
        """Drive a running or paused run here again when nothing drives it (its process was
        stopped); a run another live process drives is left to it."""
        run_id = await self._in_state(run_id, "resume", ("running", "paused"))
        self.backend.drive(run_id)
        return {"run_id": run_id, "accepted": "resume"}


def read_text(backend: Backend, run_id: str, name: str, state: RunState | None = None) -> str:
    """Output `name` of a run, as the API serves it (only what its outputs list names)."""
    state = backend.api.state(run_id) if state is None else state
    path = files.output_path(backend.api.home, state, run_id, name)
    return path.read_bytes().decode("utf-8", errors="replace")
