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


def item_outcomes(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Each fan-out visit of the run, item by item: which items completed (every task of
    the lane), which failed for good within `tolerate` (with the error), which did neither
    (the run ended first). Read from the history's records alone, without folding it."""
    visits: dict[tuple[str, int], dict[str, Any]] = {}
    lanes: dict[str, tuple[str, int, int]] = {}  # task id -> (phase, visit, item)
    completed: dict[tuple[str, int], dict[int, set[str]]] = {}
    for stored in store.events(run_id):
        data = stored.data
        if stored.kind == "phase_started" and data.get("items") is not None:
            key = (data["phase"], data["visit"])
            visits[key] = {"count": len(data["items"]), "failed": {}, "tasks": {}}
        elif stored.kind == "task_dispatched" and data.get("item") is not None:
            lane = (data["phase"], data["visit"], data["item"])
            lanes[data["task_id"]] = lane
            visit = visits.get(lane[:2])
            if visit is not None:
                visit["tasks"].setdefault(lane[2], set()).add(data["task_id"])
        elif stored.kind in ("task_completed", "task_reused") and data["task_id"] in lanes:
            phase, number, item = lanes[data["task_id"]]
            completed.setdefault((phase, number), {}).setdefault(item, set()).add(data["task_id"])
        elif stored.kind == "item_failed":
            visit = visits.get((data["phase"], data["visit"]))
            if visit is not None:
                visit["failed"].setdefault(data["item"], data.get("error", ""))
    found = []
    for (phase, number), visit in visits.items():
        done = completed.get((phase, number), {})
        ok = sorted(
            item
            for item, tasks in visit["tasks"].items()
            if item not in visit["failed"] and done.get(item, set()) >= tasks
        )
        found.append(
            {
                "phase": phase,
                "visit": number,
                "count": visit["count"],
                "completed": ok,
                "failed": {item: visit["failed"][item] for item in sorted(visit["failed"])},
            }
        )
    return found


def outcome_lines(outcomes: list[dict[str, Any]]) -> list[str]:
    """`explain`'s closing lines: each fan-out visit's items by outcome."""
    lines = []
    for o in outcomes:
        rest = o["count"] - len(o["completed"]) - len(o["failed"])
        text = (
            f"items of {o['phase']!r} visit {o['visit']}: {len(o['completed'])} of "
            f"{o['count']} completed ({_spans(o['completed'])}), {len(o['failed'])} failed"
        )
        if o["failed"]:
            text += f" ({_spans(list(o['failed']))})"
        if rest:
            text += f", {rest} neither"
        lines.append(text)
        lines += [f"  item {item} failed: {error}" for item, error in o["failed"].items()]
    return lines


def _spans(items: list[int]) -> str:
    """0-3, 5, 7-9: item numbers as ranges."""
    if not items:
        return "none"
    spans, start, last = [], items[0], items[0]
    for item in [*items[1:], None]:
        if item is not None and item == last + 1:
            last = item
            continue
        spans.append(str(start) if start == last else f"{start}-{last}")
        if item is not None:
            start = last = item
    return ", ".join(spans)


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
