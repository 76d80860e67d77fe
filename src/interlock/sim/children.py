"""Child runs in the simulator: their supervision stepped in the simulator's loop.

The real orchestrator starts a `pipeline` worker's attempt through `runtime.children`; with
the simulator's dispatcher that attempt's `Supervision` is hosted here instead of in an
asyncio task, and looked at twice per simulated step (before and after the orchestrator's
iteration). Parent and child runs are driven by the same orchestrator in the same loop, with
the same decide/apply core, so a seed replays every step of both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interlock.runtime.children import Supervision


class ChildHandle:
    """Stands in for the asyncio task that hosts one attempt's supervision."""

    def __init__(self, supervision: Supervision) -> None:
        self.supervision = supervision
        self.task_id = supervision.task_id
        self.attempt = supervision.attempt
        self.cancelled = False
        self.finished = False
        self._callbacks: list[Callable[[Any], object]] = []

    def cancel(self) -> bool:
        """As `asyncio.Task.cancel`: a parent that ended settles its child's spend first."""
        if self.finished:
            return False
        self.cancelled = True
        if not self.supervision.stop():
            self._end()  # let go: the child is left to its own lease
        return True

    def kill(self) -> None:
        """The process died: nothing more is reported, nothing is called back."""
        self.finished = True

    def done(self) -> bool:
        """Like `asyncio.Task.done`."""
        return self.finished

    def add_done_callback(self, callback: Callable[[Any], object]) -> None:
        """Like `asyncio.Task.add_done_callback`."""
        self._callbacks.append(callback)

    @property
    def live(self) -> bool:
        """Still watching its child for the current attempt."""
        return not (self.cancelled or self.finished)

    def step(self) -> None:
        """One look, as the asyncio host takes one per wake-up."""
        if not self.finished and self.supervision.step():
            self._end()

    def _end(self) -> None:
        self.finished = True
        self.supervision.close(self)
        for callback in self._callbacks:
            callback(self)


class ChildHosting:
    """The supervisions a simulated dispatcher hosts."""

    def __init__(self) -> None:
        self.handles: list[ChildHandle] = []

    def host(self, supervision: Supervision) -> ChildHandle:
        """Host one attempt's supervision; stepped from the next `step` on."""
        handle = ChildHandle(supervision)
        self.handles.append(handle)
        return handle

    def step(self) -> None:
        """Give every supervision one look, oldest first (a fixed order: determinism)."""
        if not self.handles:
            return
        for handle in list(self.handles):
            handle.step()
        self.handles = [h for h in self.handles if not h.finished]

    def kill_all(self) -> None:
        """The orchestrator died: its supervisions die with it."""
        for handle in self.handles:
            handle.kill()
        self.handles.clear()
