"""Simulated time: it only moves when the simulation moves it."""

from __future__ import annotations


class SimClock:
    """A clock for `Orchestrator(clock=...)`; starts at a fixed, realistic epoch."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance_to(self, when: float) -> None:
        """Move forward to `when` (never backwards)."""
        self.now = max(self.now, when)
