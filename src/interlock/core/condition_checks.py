"""Warnings for `next:` conditions that read a worker of their own phase when that phase may
run no task: a fan-out over an empty list, or a phase passed over because its `before` wait
for a signal timed out. The condition is then evaluated with no value for the worker, and
the run fails there ("expression 'b.ok' reads b, which has no value yet"), though the
workflow was accepted. Only a warning: the phase usually does run its tasks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from interlock.core.expressions import ExpressionError, compile_expression
from interlock.core.workflow import Phase, Pipeline


def condition_warnings(
    name: str, pipeline: Pipeline, line_of: Callable[[Sequence[Any]], int | None]
) -> list[str]:
    """Each such condition, after "line N: " when its line is known, with the fix."""
    warnings = []
    for p, phase in enumerate(pipeline.phases):
        why = _runs_no_task(phase)
        if why is None:
            continue
        own = {worker.role for worker in phase.workers}
        for r, rule in enumerate(phase.next):
            if rule.if_ is None:
                continue
            try:
                names = compile_expression(rule.if_).names
            except ExpressionError:
                continue  # refused by validation with its own message
            for role in sorted(names & own):
                line = line_of([name, "phases", p, "next", r, "if"])
                where = f"line {line}: " if line is not None else ""
                warnings.append(
                    f"{where}pipeline {name!r}, phase {phase.id!r}, next rule {r + 1}: "
                    f"expression {rule.if_!r} reads {role!r}, a worker of this phase, which "
                    f"{why}; the run then fails here ({role} has no value yet). Read it "
                    f'only when it is there: \'"{role}" in roles && <the condition on '
                    f"roles.{role}>'"
                )
    return warnings


def _runs_no_task(phase: Phase) -> str | None:
    """How the phase may end without running a task (None: it always runs them)."""
    wait = phase.wait_for
    if wait is not None and wait.when == "before" and wait.timeout is not None:
        return f"runs no task when signal {wait.signal!r} does not arrive before its wait times out"
    if phase.for_each is not None:
        return f"runs no task when the list of for_each ({phase.for_each.items}) is empty"
    return None
