"""Each decision of a run with its rule, why, and the values its conditions read.

The values are those the engine saw: the history is folded up to each branch and the
conditions' paths are looked up in the same context the engine evaluated them on, so "why
did it polish?" is answered by `reviewer.score = 5` without opening a file. The CLI prints
these records (`interlock explain`); the MCP server returns them as they are.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.state import task_id_for
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


# `prompts/<task id>.<attempt>.md`, and `.tools.md` beside it for a tool loop's calls; a task
# id is `role@visit` or `role@visit.item`.
_PROMPT_FILE = re.compile(
    r"^(?P<role>.+)@(?P<visit>\d+)(?:\.(?P<item>\d+))?\.(?P<attempt>\d+)(?P<tools>\.tools)?\.md$"
)


def prompts(run_dir: Path, task: str) -> list[tuple[str, str]]:
    """The exact prompts sent for `task`, a role (every visit, item and attempt) or a task
    id (`role@2`, `role@1.3` in a fan-out: its attempts), in the order they were sent:
    (task.attempt, text), a tool loop's transcript after its prompt."""
    folder = run_dir / "prompts"
    found, recorded = [], set()
    for path in folder.iterdir() if folder.is_dir() else []:
        parts = _PROMPT_FILE.match(path.name)
        if parts is None:
            continue
        item = None if parts["item"] is None else int(parts["item"])
        task_id = task_id_for(parts["role"], int(parts["visit"]), item)
        lane = -1 if item is None else item
        order = (int(parts["visit"]), lane, int(parts["attempt"]), bool(parts["tools"]))
        recorded.add((parts["role"], order[:2], task_id))
        if task in (parts["role"], task_id):
            found.append((order, path.name.removesuffix(".md"), path))
    if not found:
        tasks = [task_id for _, _, task_id in sorted(recorded)]
        shown = ", ".join(tasks[:12]) + (f" and {len(tasks) - 12} more" if len(tasks) > 12 else "")
        there = f"; prompts were recorded for {shown}" if tasks else " in this run"
        raise UsageError(
            f"no prompt was recorded for {task!r}{there} (give a role or a task id such as "
            "'writer@2'; only model workers' tasks have prompts)"
        )
    return [(label, path.read_text(encoding="utf-8")) for _, label, path in sorted(found)]


def prompt_heading(name: str) -> str:
    """`writer@2.1` as a person reads it: `writer@2, attempt 1` (`: tool calls` for a tool
    loop's transcript)."""
    parts = _PROMPT_FILE.match(name + ".md")
    if parts is None:
        return name
    task_id = name.removesuffix(".tools").rpartition(".")[0]
    heading = f"{task_id}, attempt {parts['attempt']}"
    return heading + ": tool calls" if parts["tools"] else heading
