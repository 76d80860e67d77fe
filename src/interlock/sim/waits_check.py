"""The invariants of waits and signals, judged from the stored history alone.

A wait starts once per gate of a visit and its due time is never recorded again; nothing is
dispatched while the run waits; a delay never ends before its due time; a signal ends only a
wait for it, once, and only if it was sent in time; a wait times out only when no signal sent
in time was waiting; an idempotency key is recorded once. (The people who send the signals
are `sim.signals`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from interlock.core import events as ev


@dataclass
class WaitChecker:
    """The invariants of waits and signals, fed the stored history in order."""

    started: set[tuple[str, int, str]] = field(default_factory=set)
    waiting: ev.WaitStarted | None = None
    inbox: list[ev.SignalReceived] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)

    def problem(self, event: ev.Event) -> str | None:
        """What `event` breaks, if anything (and fold it in)."""
        if isinstance(event, ev.WaitStarted):
            gate = (event.phase, event.visit, event.gate)
            if self.waiting is not None:
                return f"a wait started while {self.waiting.phase!r} was still waiting"
            if gate in self.started:
                return f"phase {event.phase!r} visit {event.visit}: its {event.gate} wait again"
            self.started.add(gate)
            self.waiting = event
            return None
        if isinstance(event, ev.SignalReceived):
            if event.key is not None:
                if event.key in self.keys:
                    return f"signal key {event.key!r} recorded twice"
                self.keys.add(event.key)
            self.inbox.append(event)
            return None
        if isinstance(event, ev.WaitEnded):
            return self._ended(event)
        if isinstance(event, ev.TaskDispatched) and self.waiting is not None:
            return f"{event.task_id} dispatched while the run waits"
        if isinstance(event, (ev.RunFailed, ev.RunCancelled, ev.PhaseStarted)):
            self.waiting = None  # a wait belongs to one phase visit of a live run
        return None

    def _ended(self, event: ev.WaitEnded) -> str | None:
        wait, self.waiting = self.waiting, None
        if wait is None or (wait.phase, wait.visit, wait.gate) != (
            event.phase,
            event.visit,
            event.gate,
        ):
            return "a wait ended that had not started"
        until = wait.until

        def in_time(s: ev.SignalReceived) -> bool:
            sent = s.at if s.sent_at is None else s.sent_at
            return until is None or sent <= until

        waiting_for = [s for s in self.inbox if s.name == wait.signal and in_time(s)]
        if event.outcome == "due":
            if until is None or event.at < until:
                return f"a delay ended at {event.at}, before its due time {until}"
            return None
        if event.outcome == "timeout":
            if until is None or event.at < until:
                return "a signal wait timed out before its timeout"
            if waiting_for:
                return f"signal {wait.signal!r} sent in time was lost to a timeout"
            return None
        taken = next((s for s in waiting_for if s.key == event.key), None)
        if taken is None:
            return f"signal {event.signal!r} taken but none was sent in time"
        self.inbox.remove(taken)
        return None
