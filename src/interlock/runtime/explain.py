"""Each decision of a run with its rule, why, and the values its conditions read.

The values are those the engine saw: the history is folded up to each branch and the
conditions' paths are looked up in the same context the engine evaluated them on, so "why
did it polish?" is answered by `reviewer.score = 5` without opening a file. The CLI prints
these records (`interlock explain`); the MCP server returns them as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.errors import UsageError

if TYPE_CHECKING:
    from interlock.core import events as ev
    from interlock.core.state import RunState
    from interlock.core.workflow import Pipeline
    from interlock.storage import Store


def decisions(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Every event of the run: `rule` is the rule that decided it (None: observed), `why`
    the engine's reason, and `reads` what each condition tried at a branch read."""
    record = store.get_run(run_id)
    canonical = store.definition(record.definition_hash)
    found = []
    # The history is folded only for what conditions read: a pipeline without any (a wide
    # fan-out, say) is listed without loading the engine, validating its definition or
    # building each event. A condition is an "if" key of the canonical JSON; text that merely
    # holds one is escaped.
    conditional = '"if":' in canonical
    if conditional:
        from interlock.core import events as ev
        from interlock.core.loader import Definition
        from interlock.core.state import RunState, apply

        pipeline = Definition.from_canonical(record.pipeline, canonical).pipeline
        state = RunState()
    for stored in store.events(run_id):
        reads: list[str] = []
        if conditional:
            event = stored.event
            if isinstance(event, ev.BranchTaken):
                reads = branch_reads(pipeline, state, event)
            apply(state, event)
        found.append(
            {
                "seq": stored.seq,
                "at": stored.at,
                "kind": stored.kind,
                "rule": stored.rule,
                "why": stored.why,
                "reads": reads,
            }
        )
    return found


def branch_reads(pipeline: Pipeline, state: RunState, event: ev.BranchTaken) -> list[str]:
    """What each condition tried for this branch read: the rules that did not hold, then the
    one that was taken."""
    from interlock.core.decide import expression_context
    from interlock.core.expressions import ExpressionError, evaluate, read_values

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


def prompts(run_dir: Path, task: str) -> list[tuple[str, str]]:
    """The exact prompts task `task` was sent, one per attempt: (task.attempt, text)."""
    folder = run_dir / "prompts"
    found = sorted(folder.glob(f"{task}*.md")) if folder.is_dir() else []
    if not found:
        raise UsageError(f"no prompt was recorded for {task!r} (only model tasks have one)")
    return [(path.stem, path.read_text(encoding="utf-8")) for path in found]
