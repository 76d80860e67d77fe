"""`interlock explain`: each decision with its rule, why, and the values its conditions read.

The values are those the engine saw: the history is folded up to each branch and the
conditions' paths are looked up in the same context the engine evaluated them on, so "why
did it polish?" is answered by `reviewer.score = 5` without opening a file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock.cli.base import escape, when
from interlock.core import events as ev
from interlock.core.decide import expression_context
from interlock.core.expressions import ExpressionError, evaluate, read_values
from interlock.core.loader import Definition
from interlock.core.state import RunState, apply

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.workflow import Pipeline


def explain_lines(app: Interlock, run_id: str) -> list[str]:
    """The lines of `interlock explain` (rich markup, values escaped)."""
    record = app.store.get_run(run_id)
    canonical = app.store.definition(record.definition_hash)
    pipeline = Definition.from_canonical(record.pipeline, canonical).pipeline
    state = RunState()
    lines = []
    for stored in app.store.events(run_id):
        event = stored.event
        head = f"{stored.seq:>4} {when(stored.at)}"
        if stored.rule:
            lines.append(
                f"{head} [bold]{stored.rule:<12}[/] {stored.kind:<16} {escape(stored.why or '')}"
            )
        elif stored.why:
            lines.append(f"{head} [dim]{'observed':<12}[/] {stored.kind:<16} {escape(stored.why)}")
        else:
            lines.append(f"{head} [dim]{'observed':<12} {stored.kind:<16}[/]")
        if isinstance(event, ev.BranchTaken):
            lines += [f"{' ' * 26}{escape(line)}" for line in branch_reads(pipeline, state, event)]
        apply(state, event)
    return lines


def branch_reads(pipeline: Pipeline, state: RunState, event: ev.BranchTaken) -> list[str]:
    """What each condition tried for this branch read: the rules that did not hold, then the
    one that was taken."""
    try:
        phase = pipeline.phase(event.phase)
    except (KeyError, ValueError):
        return []
    context = expression_context(state, pipeline)
    lines = []
    for number, rule in enumerate(phase.next, start=1):
        if rule.if_ is None or (event.rule is not None and number > event.rule):
            continue
        try:
            values = read_values(rule.if_, context)
            holds = evaluate(rule.if_, context)
        except ExpressionError:
            continue
        if number == event.rule:
            verdict = "held"
        else:
            verdict = "held, but its max_visits was reached" if holds else "did not hold"
        lines.append(f"rule {number} ({rule.if_}) {verdict}: {'; '.join(values) or 'no values'}")
    return lines
