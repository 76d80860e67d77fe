"""`interlock diff`: how two runs differ, task by task and decision by decision.

Read-only: both histories are folded; outputs are read from the ledger or the runs' folders
only when their text is asked for.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from interlock.core import events as ev
from interlock.core.state import TASK_COMPLETED, RunState, TaskState, apply, fold
from interlock.runtime.home import Home
from interlock.storage.base import Store


@dataclass(frozen=True, kw_only=True)
class TaskDiff:
    """One task id as each run has it."""

    task_id: str
    a: str  # ran, reused, failed, ... or "-" when the run has no such task
    b: str
    output: str  # same, changed, or "-" when either has no output
    values: dict[str, list[Any]] = field(default_factory=dict)  # name -> [in A, in B]
    cost: list[float] = field(default_factory=list)  # [A, B]
    tokens: list[int] = field(default_factory=list)
    text_diff: str = ""

    def as_dict(self) -> dict[str, Any]:
        """For `--json`."""
        data = {k: getattr(self, k) for k in ("task_id", "a", "b", "output", "values", "cost")}
        data["tokens"] = self.tokens
        if self.text_diff:
            data["text_diff"] = self.text_diff
        return data


@dataclass(frozen=True, kw_only=True)
class RunDiff:
    """Two runs compared."""

    a: str
    b: str
    header: dict[str, list[Any]]  # what differs about the runs themselves: name -> [A, B]
    tasks: list[TaskDiff]
    decisions: list[str]

    def as_dict(self) -> dict[str, Any]:
        """For `--json`."""
        return {
            "a": self.a,
            "b": self.b,
            "runs": self.header,
            "tasks": [t.as_dict() for t in self.tasks],
            "decisions": self.decisions,
        }


def how(task: TaskState | None) -> str:
    """A task's fate in a word."""
    if task is None:
        return "-"
    if task.reused_from is not None:
        return "reused"
    return "ran" if task.status is TASK_COMPLETED else task.status.value


def compare(store: Store, home: Home, a: str, b: str, *, outputs: bool = False) -> RunDiff:
    """Compare runs `a` and `b` (full ids)."""
    events_a = [s.event for s in store.events(a)]
    events_b = [s.event for s in store.events(b)]
    state_a, state_b = fold(events_a), fold(events_b)
    header: dict[str, list[Any]] = {}
    for name in ("pipeline", "definition_hash", "topic", "inputs", "status", "rerun_of"):
        va, vb = getattr(state_a, name), getattr(state_b, name)
        if va != vb:
            header[name] = [_plain(va), _plain(vb)]
    header["cost_usd"] = [round(state_a.cost_usd, 6), round(state_b.cost_usd, 6)]
    header["tokens"] = [state_a.tokens, state_b.tokens]
    order = list(dict.fromkeys([*state_a.tasks, *state_b.tasks]))
    tasks = []
    for task_id in order:
        ta, tb = state_a.tasks.get(task_id), state_b.tasks.get(task_id)
        output = "-"
        text_diff = ""
        if ta is not None and tb is not None and ta.sha256 and tb.sha256:
            output = "same" if ta.sha256 == tb.sha256 else "changed"
            if outputs and output == "changed":
                text_diff = _text_diff(store, home, a, ta, b, tb)
        names = sorted(set(ta.values if ta else {}) | set(tb.values if tb else {}))
        values = {
            n: [(ta.values if ta else {}).get(n), (tb.values if tb else {}).get(n)] for n in names
        }
        tasks.append(
            TaskDiff(
                task_id=task_id,
                a=how(ta),
                b=how(tb),
                output=output,
                values={n: v for n, v in values.items() if v[0] != v[1]},
                cost=[round(ta.cost_usd if ta else 0.0, 6), round(tb.cost_usd if tb else 0.0, 6)],
                tokens=[ta.tokens if ta else 0, tb.tokens if tb else 0],
                text_diff=text_diff,
            )
        )
    return RunDiff(
        a=a,
        b=b,
        header=header,
        tasks=tasks,
        decisions=_decisions(events_a, events_b, state_a, state_b),
    )


def _plain(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value


def _decisions(
    events_a: list[ev.Event], events_b: list[ev.Event], state_a: RunState, state_b: RunState
) -> list[str]:
    """The branches that went differently, and how each run ended when that differs."""
    branches_a, branches_b = _branches(events_a), _branches(events_b)
    lines = []
    for key in list(dict.fromkeys([*branches_a, *branches_b])):
        x, y = branches_a.get(key), branches_b.get(key)
        if x is not None and y is not None and (x[0].goto, x[0].rule) == (y[0].goto, y[0].rule):
            continue
        where = f"after phase {key[0]!r} (visit {key[1]})"
        conditions = [t[0].condition for t in (x, y) if t is not None]
        lines.append(f"{where}: A {_branch(x, conditions)}; B {_branch(y, conditions)}")
    bounds_a, bounds_b = _loop_bounds(events_a), _loop_bounds(events_b)
    for message in bounds_a:
        if message not in bounds_b:
            lines.append(f"only A: {message}")
    for message in bounds_b:
        if message not in bounds_a:
            lines.append(f"only B: {message}")
    if (state_a.status, state_a.failure) != (state_b.status, state_b.failure):
        lines.append(
            f"A ended {state_a.status.value}{_reason(state_a)}; "
            f"B ended {state_b.status.value}{_reason(state_b)}"
        )
    return lines


Taken = tuple[ev.BranchTaken, dict[str, dict[str, Any]]]


def _branches(events: list[ev.Event]) -> dict[tuple[str, int], Taken]:
    """(phase, visit) -> the branch taken and the extracted values at that moment."""
    state = RunState()
    found = {}
    for event in events:
        if isinstance(event, ev.BranchTaken):
            snapshot = {role: dict(values) for role, values in state.values.items()}
            found[(event.phase, event.visit)] = (event, snapshot)
        apply(state, event)
    return found


def _read_values(conditions: list[str | None], values: dict[str, dict[str, Any]]) -> str:
    """`role.value=...` for each extracted value the conditions name."""
    shown = []
    references = [r for c in conditions if c for r in _REFERENCE.findall(c)]
    for role, name in dict.fromkeys(references):
        if name in values.get(role, {}):
            shown.append(f"{role}.{name}={values[role][name]!r}")
    return ", ".join(shown)


_REFERENCE = re.compile(r"\b([A-Za-z0-9][\w-]*)\.([A-Za-z_]\w*)")


def _loop_bounds(events: list[ev.Event]) -> list[str]:
    """The loop-bound warnings (a rule that was skipped because it reached max_visits)."""
    return [e.message for e in events if isinstance(e, ev.Warned) and "max_visits" in e.message]


def _branch(taken: Taken | None, conditions: list[str | None]) -> str:
    if taken is None:
        return "never got there"
    event, snapshot = taken
    values = _read_values(conditions, snapshot)
    read = f"; {values}" if values else ""
    if event.rule is None:
        return f"went on to {event.goto!r} (no rule applied{read})"
    return f"went to {event.goto!r} by rule {event.rule} ({event.condition or 'always'}{read})"


def _reason(state: RunState) -> str:
    # A run cancelled without a reason records its status as its failure: said once.
    same = state.failure == state.status.value
    return f" ({state.failure})" if state.failure and not same else ""


def _text_diff(store: Store, home: Home, a: str, ta: TaskState, b: str, tb: TaskState) -> str:
    text_a, text_b = _text(store, home, a, ta), _text(store, home, b, tb)
    if text_a is None or text_b is None:
        return "(an output is no longer available)"
    lines = difflib.unified_diff(
        text_a.splitlines(keepends=True),
        text_b.splitlines(keepends=True),
        fromfile=f"A/{ta.artifact}",
        tofile=f"B/{tb.artifact}",
    )
    return "".join(lines)


def _text(store: Store, home: Home, run_id: str, task: TaskState) -> str | None:
    body = store.artifact(task.sha256) if task.sha256 else None
    if body is None and task.artifact:
        try:
            body = (home.run_dir(run_id) / task.artifact).read_bytes()
        except OSError:
            return None
    if body is None:
        return None
    return body.decode("utf-8", errors="replace")
