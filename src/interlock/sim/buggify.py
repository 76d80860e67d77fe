"""Fault points in the style of FoundationDB's BUGGIFY.

Each seed switches every fault point on or off once; a point that is on then fires with its own
small probability each time it is reached. Seeds that leave most points off still exercise the
happy paths, and seeds that turn a point on hit it many times.
"""

from __future__ import annotations

import random
from collections import Counter

FAULT_POINTS = (
    "commit_failed",  # the group commit fails: nothing was written
    "commit_ambiguous",  # the commit was written, but the caller sees an error
    "store_busy",  # the database is locked past the busy timeout (lease renewal, command poll)
    "crash",  # the orchestrator dies at a named crash point and is rebuilt from the store
    "duplicate_report",  # a worker's report arrives again
    "stale_report",  # a report of a superseded attempt arrives after the next one started
    "late_completion",  # a worker completes after the engine timed it out
    "hang",  # a worker never answers
    "worker_fail",  # a worker fails (retryable)
    "worker_fail_permanent",  # a worker fails for good (not retryable with the same model)
    "bad_output",  # a worker's output fails extraction
    "double_approval",  # two people approve the same pause at once
    "approval_across_crash",  # an approval is posted, the orchestrator dies, it is posted again
    "cancel",  # a person cancels the run
    "leave_paused",  # nobody approves: the run ends the simulation paused
)


class Buggify:
    """Decides, from the seed, whether each fault fires; counts what fired."""

    def __init__(self, rng: random.Random, *, faults: bool = True) -> None:
        self.rng = rng
        self.enabled = {point: faults and rng.random() < 0.5 for point in FAULT_POINTS}
        self.fired: Counter[str] = Counter()

    def __call__(self, point: str, probability: float) -> bool:
        """True when `point` is on for this seed and fires this time."""
        if not self.enabled[point] or self.rng.random() >= probability:
            return False
        self.fired[point] += 1
        return True
