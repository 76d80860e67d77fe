"""What the MCP tools act on: the API object, the orchestrator that drives runs here, the
pipelines that can be started, and who the caller is.

The same tools serve two places. Over stdio (`interlock mcp`) the process runs its own
orchestrator loop and the local user has every scope unless the command narrowed them. Under
`interlock serve` (`/mcp`) the server's orchestrator drives runs and each request's bearer
token, checked before the request reaches the MCP app, names the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interlock.errors import LeaseHeld
from interlock.runtime.processes import holder_is_dead
from interlock.server.auth import SCOPES, Principal
from interlock.server.errors import ApiError

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.mcpserver.pipelines import Pipelines
    from interlock.runtime.orchestrator import Orchestrator
    from interlock.server.reads import Reads

PRINCIPAL_KEY = "interlock.principal"  # where the HTTP guard leaves the caller in the ASGI scope


@dataclass
class Backend:
    """One place the tools run: the store and home of `api`, driven by `orchestrator`."""

    api: Interlock
    pipelines: Pipelines
    local: bool  # stdio: the caller is on this machine (prompts may be read)
    principal: Principal | None = None  # stdio: fixed; HTTP: None, taken from each request
    limit: Callable[[str], None] | None = None  # HTTP: the rate limit of one action key
    reads: Reads | None = None  # HTTP: the server's; stdio: made on first use
    # When the loop that drives runs here stops (the server's, or `interlock mcp`'s): the
    # batches started here are fed until then.
    stopping: Callable[[], asyncio.Event] | None = None

    def reader(self) -> Reads:
        """Where the tools read runs' folded histories: off the event loop, kept per run."""
        if self.reads is None:
            from interlock.server.reads import Reads

            self.reads = Reads(self.api)
        return self.reads

    def stop(self) -> asyncio.Event:
        """The event set when the loop that drives runs here stops."""
        if self.stopping is None:  # nothing said when: fed until the process ends
            never = asyncio.Event()
            self.stopping = lambda: never
        return self.stopping()

    @property
    def orchestrator(self) -> Orchestrator:
        """The orchestrator that records and drives runs here."""
        return self.api.orchestrator

    def caller(self, request: Any) -> Principal:
        """Who is calling: the fixed local principal, or the one the HTTP guard checked."""
        if self.principal is not None:
            return self.principal
        scope = getattr(request, "scope", None) or {}
        found = scope.get(PRINCIPAL_KEY)
        if not isinstance(found, Principal):
            raise ApiError(401, "unauthorized", "a bearer token is required")
        return found

    def allow(self, principal: Principal, scope: str, tool: str, action: str = "") -> None:
        """Refuse a caller without `scope`; an `action` spends the caller's rate-limit bucket
        for it (the REST route's, so both ways in share one limit)."""
        if scope not in principal.scopes:
            raise ApiError(
                403,
                "forbidden",
                f"{tool} needs the {scope!r} scope; this caller has "
                f"{', '.join(sorted(principal.scopes)) or 'none'}",
            )
        if action and self.limit is not None:
            self.limit(f"{principal.key}:{action}")

    def drive(self, run_id: str) -> None:
        """Make sure someone drives `run_id` after a command: this orchestrator takes the run
        unless a live process holds its lease (which then records the command)."""
        orchestrator = self.orchestrator
        if run_id not in orchestrator.drivers:
            record = self.api.store.get_run(run_id)
            owner = record.lease_owner
            live = owner and (record.lease_expires or 0) > time.time() and not holder_is_dead(owner)
            if not live:
                with contextlib.suppress(LeaseHeld):  # taken by another process just now
                    orchestrator.take(run_id)
        orchestrator.look_now()


def local_principal(user: str, scopes: list[str] | None) -> Principal:
    """The caller over stdio: every scope, or those the command was started with."""
    chosen = frozenset(scopes) if scopes else frozenset(SCOPES)
    return Principal(subject=user, scopes=chosen, key=f"local:{user}")
