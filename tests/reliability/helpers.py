"""Shared checks for the reliability tests: a run's stored history must be sound."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

from interlock import Interlock
from interlock.core.loader import Definition, parse_workflow
from interlock.sim.invariants import HistoryChecker


def definition(yaml_text: str, name: str = "p") -> Definition:
    """A pipeline from YAML text."""
    return parse_workflow(textwrap.dedent(yaml_text)).get(name)


def history_problems(app: Interlock, run_id: str, pipeline_def: Definition) -> list[str]:
    """Legal transitions, no gaps or doubles in seq, each task completed at most once."""
    checker = HistoryChecker(pipeline_def.pipeline)
    stored = app.store.events(run_id)
    for record in stored:
        checker.feed(record.seq, record.event)
    done = Counter(s.data["task_id"] for s in stored if s.kind == "task_completed")
    doubles = [f"{task} completed {n} times" for task, n in done.items() if n > 1]
    return checker.problems + doubles


def kinds(app: Interlock, run_id: str) -> list[str]:
    """The kinds of a run's stored events, in order."""
    return [s.kind for s in app.store.events(run_id)]


def files_under(root: Path) -> set[Path]:
    """Every path below `root`."""
    return set(root.rglob("*"))
