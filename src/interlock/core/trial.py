"""Copies of a run's state for the explorer, at a cost that does not grow with its history.

`interlock check` forks a state for every way the world can answer, thousands of times per
pipeline. `RunState.copy()` copies everything, so in a pipeline of n phases each fork, each
scan of the tasks and each deduplication key cost O(n), and exploring cost O(n**2). A fork
made here keeps only what the decision table reads:

- the tasks of the current phase visit and the unfinished ones. A completed task of an earlier
  visit is never read again: a later visit has new task ids, and the explorer makes no edits
  at a review (the one thing that reads old tasks). What the future reads of them, each role's
  latest values and the visit counts, stays in `values` and `visits`;
- no records kept for people (`outputs`, `phase_status`, `warnings`, `edits`): the table
  reads none of them;
- `visits` and `values` shared with the parent until the trial writes to them (most trials
  do not: a failure, a timeout or a retry changes neither), as `Digested` dicts that keep a
  digest of their contents up to date, so the deduplication key costs O(1) in the history
  instead of hashing every visit count of every state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import operator
from collections.abc import Collection
from typing import Any

from interlock.core.state import TASK_COMPLETED, RunState, TaskState

_MASK = (1 << 128) - 1
_MISSING: Any = object()


class SharedWrite(Exception):
    """A trial wrote to a part of the history it shares with its parent (`name`)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"explored state: {name} is shared with the state it was forked from")
        self.name = name


def _entry(key: str, value: Any) -> int:
    """A 128-bit hash of one entry; a dict's digest is the sum of its entries' hashes."""
    return int.from_bytes(hashlib.blake2b(repr((key, value)).encode(), digest_size=16).digest())


class Digested(dict[str, Any]):
    """A dict with an order-independent digest of its keys (and values, if `with_values`).

    Equal contents give equal digests whatever the order of writes (the digest is a sum of
    per-entry hashes, as model checkers' incremental state hashing does); two different
    contents share one with probability about 2**-128, far below any other cause of error.
    A `frozen` one belongs to a state other states were forked from: writing to it raises
    `SharedWrite`. `written` lists the keys written since it was copied from its parent's.
    """

    __slots__ = ("digest", "frozen", "name", "with_values", "written")

    def __init__(
        self, name: str, source: dict[str, Any], with_values: bool, digest: int | None = None
    ) -> None:
        super().__init__(source)
        self.name, self.with_values, self.frozen = name, with_values, False
        self.written: list[str] = []
        if digest is None:
            digest = sum(self._hash(k, v) for k, v in source.items()) & _MASK
        self.digest = digest

    def _hash(self, key: str, value: Any) -> int:
        return _entry(key, value if self.with_values else None)

    def __setitem__(self, key: str, value: Any) -> None:
        if self.frozen:
            raise SharedWrite(self.name)
        self.written.append(key)
        old = self.get(key, _MISSING)
        if old is _MISSING:
            self.digest = (self.digest + self._hash(key, value)) & _MASK
        elif self.with_values and old != value:
            self.digest = (self.digest - self._hash(key, old) + self._hash(key, value)) & _MASK
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        if self.frozen:
            raise SharedWrite(self.name)
        self.digest = (self.digest - self._hash(key, self[key])) & _MASK
        super().__delitem__(key)

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        # Any other write would leave the digest stale: fail loudly rather than merge states
        # the engine tells apart (the explorer reports it as an engine failure).
        raise TypeError("explored state: only d[k] = v and del d[k] keep the digest")

    update = setdefault = pop = popitem = clear = __ior__ = _unsupported

    def copy_owned(self) -> Digested:
        """A copy (in C) to write to, carrying the digest along instead of computing it."""
        return Digested(self.name, self, self.with_values, self.digest)


def track(state: RunState) -> None:
    """Turn a state's `visits` and `values` into `Digested` dicts (once, at the start)."""
    state.visits = Digested("visits", state.visits, with_values=True)
    # Which roles have values, not the values: the explorer's are placeholders.
    state.values = Digested("values", state.values, with_values=False)


def fork(state: RunState, own: Collection[str] = ()) -> RunState:
    """A copy of a tracked state with only what the table reads (see the module docstring).

    `own` names the parts (`visits`, `values`) the copy gets for itself; the others are
    shared with `state` and raise `SharedWrite` when written. Completed tasks are shared (no
    event the explorer applies changes them), open ones copied field by field: a phase of
    10,000 tasks forks in milliseconds.
    """
    tasks, visits, values = state.tasks, state.visits, state.values
    assert isinstance(visits, Digested) and isinstance(values, Digested), "track() it first"
    records = state.outputs, state.phase_status, state.warnings, state.edits
    state.tasks, state.visits, state.values = {}, {}, {}  # not copied by copy(): done below
    state.outputs, state.phase_status, state.warnings, state.edits = {}, {}, [], []
    try:
        clone = state.copy()
    finally:
        state.tasks, state.visits, state.values = tasks, visits, values
        state.outputs, state.phase_status, state.warnings, state.edits = records
    visits.frozen = values.frozen = True  # `state` is settled: only its forks change
    clone.visits = visits.copy_owned() if "visits" in own else visits
    clone.values = values.copy_owned() if "values" in own else values
    current = set(state.current.task_ids) if state.current is not None else set()
    clone.tasks = {  # dispatch order kept
        k: t if t.status is TASK_COMPLETED else TaskState(*_TASK_FIELDS(t))
        for k, t in tasks.items()
        if k in current or t.status is not TASK_COMPLETED
    }
    # The deadline heaps keep entries of tasks that have left flight until a sweep: drop
    # those of tasks left out above (a heap stays one only when rebuilt).
    if any(task_id not in clone.tasks for _, _, task_id in clone.starts):
        clone.starts = [entry for entry in clone.starts if entry[2] in clone.tasks]
        heapq.heapify(clone.starts)
    if any(task_id not in clone.tasks for _, _, task_id in clone.queued):
        clone.queued = [entry for entry in clone.queued if entry[2] in clone.tasks]
        heapq.heapify(clone.queued)
    return clone


# Every field of a task, in the order its constructor takes them (~6x faster than replace()).
_TASK_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(TaskState)))
