"""Durable waits: a phase that waits for a signal, or until a time, before it starts or after
it ends.

A wait is a row of the decision table like any other. Entering a gated phase records
`WaitStarted` with the time the wait ends on its own (`until`), computed once from the clock
the engine is given: a restart reads it back, so it neither shortens nor lengthens the wait.
A signal is recorded as `SignalReceived` whenever it arrives (before the wait too: it is kept
in the run's inbox); the wait takes it and records `WaitEnded` with its data, which conditions
and task templates then read as `signals.NAME`. A timeout ends the wait with `signals.NAME`
null, and the phase's `next` rules decide as for any other outcome.

The gates of one phase visit, in order: `delay`/`not_before` ("delay"), `wait_for` with
`when: before` ("before"), then the phase's tasks, then `wait_for` with `when: after`
("after"), then `pause_after` and the `next` rules. When a "before" wait times out, the
phase's tasks do not run: it goes straight to its `next` rules. Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from typing import Any

from interlock.core import events as ev
from interlock.core import reads
from interlock.core.expressions import ExpressionError, compile_expression, shown
from interlock.core.state import RUN_RUNNING, RunState, Waiting
from interlock.core.timebounds import time_problem
from interlock.core.workflow import Phase, Pipeline

Row = tuple[str, ev.Event, str]  # (rule name, event, why): `decide` makes decisions of them
EXPLORED_DELAY = 1.0  # what `check` takes a `not_before` to be: some time later


def before_gates(phase: Phase) -> list[str]:
    """The waits before the phase's tasks start, in order."""
    gates = []
    if phase.delay is not None or phase.not_before is not None:
        gates.append("delay")
    if phase.wait_for is not None and phase.wait_for.when == "before":
        gates.append("before")
    return gates


def after_gate(phase: Phase) -> str | None:
    """The wait after the phase's tasks completed, if any."""
    if phase.wait_for is not None and phase.wait_for.when == "after":
        return "after"
    return None


def waited_signals(pipeline: Pipeline) -> dict[str, list[Phase]]:
    """Signal name -> the phases that wait for it, in file order."""
    names: dict[str, list[Phase]] = {}
    for phase in pipeline.phases:
        if phase.wait_for is not None:
            names.setdefault(phase.wait_for.signal, []).append(phase)
    return names


def decide_wait(
    pipeline: Pipeline,
    state: RunState,
    now: float,
    context: Callable[[], Mapping[str, Any]],
    *,
    exploring: bool = False,
) -> list[Row] | None:
    """The wait rows for this instant: None when no wait concerns the run now, [] while it
    waits, else the rows that start or end a wait."""
    current = state.current
    if state.status is not RUN_RUNNING or current is None:
        return None
    phase = pipeline.phase(current.phase)
    if state.waiting is not None:
        return _end(pipeline, phase, state, state.waiting, now)
    if not current.completed:
        if current.task_ids:
            return None  # its tasks started: every wait before them ended
        gates = before_gates(phase)
    else:
        gate = after_gate(phase)
        gates = [gate] if gate is not None else []
    for gate in gates:
        if gate not in current.gates:
            return [_start(phase, current.visit, gate, now, context, exploring)]
    return None


def _start(
    phase: Phase,
    visit: int,
    gate: str,
    now: float,
    context: Callable[[], Mapping[str, Any]],
    exploring: bool,
) -> Row:
    if gate == "delay":
        if phase.delay is not None:
            until, said = now + phase.delay, f"delay {phase.delay:g}s"
        else:
            assert phase.not_before is not None
            if exploring:
                until = now + EXPLORED_DELAY
            else:
                try:
                    until = start_time(phase.not_before, context())
                except ExpressionError as exc:
                    reason = f"phase {phase.id!r}, not_before: {exc}"
                    return ("branch_error", ev.RunFailed(at=now, reason=reason), reason)
            said = f"not_before {phase.not_before}"
        refused = _out_of_range(phase, until, "delay" if phase.delay is not None else None, now)
        if refused is not None:
            return refused
        event = ev.WaitStarted(at=now, phase=phase.id, visit=visit, gate=gate, until=until)
        return ("wait", event, f"phase {phase.id!r} waits ({said}) before it starts")
    wait = phase.wait_for
    assert wait is not None
    deadline: float | None = None if wait.timeout is None else now + wait.timeout
    refused = _out_of_range(phase, deadline, "wait_for timeout", now)
    if refused is not None:
        return refused
    event = ev.WaitStarted(
        at=now, phase=phase.id, visit=visit, gate=gate, signal=wait.signal, until=deadline
    )
    where = "before it starts" if gate == "before" else "after it ended"
    limit = "" if wait.timeout is None else f" (timeout {wait.timeout:g}s)"
    return ("wait", event, f"phase {phase.id!r} waits for signal {wait.signal!r}{limit} {where}")


def _out_of_range(phase: Phase, until: float | None, what: str | None, now: float) -> Row | None:
    """A failed run instead of a wait whose end is no date (a definition pinned before
    durations were bounded): recorded, it would break every command that shows the run."""
    if until is None or what is None:
        return None
    problem = time_problem(until, f"the end of phase {phase.id!r}'s {what}")
    if problem is None:
        return None
    reason = f"phase {phase.id!r}: {problem}"
    return ("branch_error", ev.RunFailed(at=now, reason=reason), reason)


def _end(
    pipeline: Pipeline, phase: Phase, state: RunState, waiting: Waiting, now: float
) -> list[Row]:
    until = waiting.until

    def ended(outcome: str, signal: str | None = None, data: Any = None, key: Any = None) -> Any:
        return ev.WaitEnded(
            at=now,
            phase=waiting.phase,
            visit=waiting.visit,
            gate=waiting.gate,
            outcome=outcome,
            signal=signal,
            data=data,
            key=key,
        )

    if waiting.signal is None:
        if until is not None and now >= until:
            event = ended("due")
            return [("wait_due", event, f"phase {waiting.phase!r}: the wait is over")]
        return []
    name = waiting.signal
    # A signal sent after the timeout does not end this wait, even when it is recorded late
    # (no orchestrator was running): it stays in the inbox for a later wait.
    arrived = next(
        (s for s in state.inbox if s.name == name and (until is None or s.at <= until)), None
    )
    if arrived is not None:
        event = ended("signal", name, arrived.data, arrived.key)
        return [("signal", event, f"signal {name!r} arrived")]
    if until is None or now < until:
        return []
    rows: list[Row] = [("wait_timeout", ended("timeout", name), f"signal {name!r} did not arrive")]
    if waiting.gate == "before":
        # The phase was waiting to start: it does not run, and its `next` rules decide where
        # the run goes (`signals.NAME == null`), as they do after any other outcome.
        if phase is pipeline.phases[-1]:
            reason = (
                f"phase {phase.id!r}: signal {name!r} did not arrive within its timeout, and "
                "the last phase cannot be skipped"
            )
            rows.append(("wait_timeout", ev.RunFailed(at=now, reason=reason), reason))
        else:
            skipped = ev.PhaseCompleted(at=now, phase=phase.id, visit=waiting.visit)
            rows.append(("wait_timeout", skipped, "its tasks do not run; its next rules decide"))
    return rows


def wake_time(state: RunState) -> float | None:
    """When the wait in progress ends on its own (None: no wait, or only a signal ends it)."""
    if state.status is not RUN_RUNNING or state.waiting is None:
        return None
    return state.waiting.until


def signal_values(pipeline: Pipeline | None, state: RunState) -> dict[str, Any]:
    """`signals` for conditions and templates: every signal the pipeline waits for (null
    until a wait took it), then the data of those taken."""
    values: dict[str, Any] = {}
    if pipeline is not None:
        values = dict.fromkeys(waited_signals(pipeline))
    values.update(state.signals)
    return values


def start_time(source: str, context: Mapping[str, Any]) -> float:
    """The epoch seconds a `not_before` expression gives (a timestamp, RFC 3339 text with a
    time zone, or a number of epoch seconds)."""
    from celpy.adapter import json_to_cel  # loaded with CEL by the expression's compilation
    from celpy.evaluation import CELEvalError

    compiled = compile_expression(source)
    missing = {n for n in compiled.names if n not in context}
    if missing:
        raise ExpressionError(
            f"expression {source!r} reads {', '.join(sorted(missing))}, which has no value"
        )
    try:
        activation = {k: json_to_cel(context[k]) for k in compiled.names if k in context}
        value = compiled.program.evaluate(activation)
    except Exception as exc:  # CEL raises its own error types; all mean "cannot evaluate"
        value, detail = None, exc.args[0] if exc.args else ""
    else:
        detail = value.args[0] if isinstance(value, CELEvalError) and value.args else ""
    if isinstance(value, CELEvalError) or value is None:
        # CEL's own error is a tuple of internals: say in words what is missing or misfits.
        why = reads.why_not(compiled.tree, compiled.names, context, detail)
        raise ExpressionError(f"expression {source!r} cannot be evaluated: {why}")
    epoch = _epoch_of(value)
    if epoch is not None:
        problem = time_problem(epoch, f"expression {source!r} gave a time that")
        if problem is not None:
            raise ExpressionError(problem)
        return epoch
    raise ExpressionError(
        f"expression {source!r} gave {shown(value)}: give a timestamp, RFC 3339 text with a time "
        "zone (2026-01-31T09:00:00Z) or epoch seconds"
    )


def _epoch_of(value: Any) -> float | None:
    """Epoch seconds of a CEL timestamp, a number or RFC 3339 text with a zone, else None."""
    from celpy import celtypes

    if isinstance(value, dt.datetime):  # CEL's timestamp type is a datetime
        return value.timestamp()
    number = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType, int, float)
    if isinstance(value, number) and not isinstance(value, (bool, celtypes.BoolType)):
        try:
            return float(value)
        except OverflowError:  # an integer past any float
            return math.inf
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(str(value))
        except ValueError:
            return None
        if parsed.tzinfo is not None:
            return parsed.timestamp()
    return None


def not_before_problems(where: str, pipeline: Pipeline) -> list[str]:
    """A `not_before` that reads only inputs and gives a time outside what interlock keeps
    with the inputs' defaults (a constant, most often): found by `check`, not by the run."""
    defaults = {
        name: spec.default for name, spec in pipeline.inputs.items() if spec.default is not None
    }
    return [
        f"{where}, {problem}"
        for problem in start_time_problems(pipeline, "", defaults, every=False)
    ]


def start_time_problems(
    pipeline: Pipeline, topic: str, inputs: Mapping[str, Any], *, every: bool = True
) -> list[str]:
    """Each `not_before` that reads only the topic and inputs and gives, with these, no time
    interlock keeps (not a time, or outside 1970-9999): a run given such inputs is refused
    before it is recorded. With `every` false (`check`, with the inputs' defaults, where an
    input without one has no value), only a time outside the range is a problem."""
    context = {"topic": topic, "inputs": dict(inputs)}
    problems = []
    for phase in pipeline.phases:
        if phase.not_before is None:
            continue
        try:
            if not compile_expression(phase.not_before).names <= context.keys():
                continue  # it reads what only a run has: the run checks it
            start_time(phase.not_before, context)
        except ExpressionError as exc:
            if every or "outside the times interlock keeps" in str(exc):
                problems.append(f"phase {phase.id!r}, not_before: {exc}")
    return problems
