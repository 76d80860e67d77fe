"""`interlock mcp`: the MCP server over stdin/stdout, driving the runs it starts.

The orchestrator loop runs beside the MCP session in one event loop, so the runs a client
starts, approves or resumes here go on while the client is connected. When the client closes
the session the tasks in flight are stopped and the leases handed back: those runs stay
resumable (`interlock resume RUN`, or the next `interlock mcp` asked about them).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass

from interlock.api import Interlock
from interlock.mcpserver.backend import Backend, local_principal
from interlock.mcpserver.pipelines import Pipelines
from interlock.mcpserver.server import build


def local_user() -> str:
    """The local user's name (commands are recorded as theirs)."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers: still serve
        return "local"


async def serve_stdio(api: Interlock, pipelines: Pipelines, scopes: list[str] | None) -> None:
    """Serve until the client closes stdin, driving runs meanwhile."""
    from interlock.providers import aclose_providers

    stop = asyncio.Event()
    backend = Backend(
        api=api,
        pipelines=pipelines,
        local=True,
        principal=local_principal(local_user(), scopes),
        stopping=lambda: stop,
    )
    server = build(backend)
    from interlock.runtime.shared_limits import limits_shared_for

    loop = asyncio.create_task(api.orchestrator.serve_forever(stop))
    # The runs it drives share rate limits with every process on the store, as `serve` does.
    shared = limits_shared_for(None, store=api.store)
    try:
        with shared:
            await server.run_stdio_async()
    finally:
        stop.set()
        api.orchestrator.wake()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(loop, 10)
        await api.orchestrator.shutdown()
        await aclose_providers()
