"""A run's relatives as the dashboard and `status` show them: the child runs its `pipeline`
workers started (each with its own state and cost, read from the store, since the parent's
history only records what a child was doing while the task was in flight) and, for a child,
the parent run and the task it works for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interlock.core.subpipelines import CHILD_ID
from interlock.errors import RunNotFound

if TYPE_CHECKING:  # `runs` and `status` use this module without loading the engine
    from interlock.core.state import RunState
    from interlock.storage.base import Store


def child_row(store: Store, task_id: str, child: dict[str, Any]) -> dict[str, Any]:
    """One child as the `children` of `status.json` has it (`run`, `attempt`, `detail`), with
    its own state as listed (running, waiting, paused, delivered, failed, cancelled; "missing"
    once pruned), pipeline and cost."""
    row: dict[str, Any] = {
        "task_id": task_id,
        "run_id": child["run"],
        "attempt": child["attempt"],
        "status": "missing",
        "detail": "",
        "pipeline": None,
        "cost_usd": 0.0,
        "tokens": 0,
    }
    try:
        record = store.get_run(child["run"])
    except RunNotFound:
        return row
    summary = record.summary
    row.update(
        status=summary.status,
        pipeline=record.pipeline,
        cost_usd=round(summary.cost_usd, 6),
        tokens=summary.tokens,
    )
    if summary.status in ("paused", "waiting"):
        # What it waited for once is old news after; the detail's "run ID" is the row's own.
        row["detail"] = str(child["detail"]).removeprefix(f"run {child['run']} ")
    return row


def parent_row(store: Store, parent: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `parent` of `status.json` (`run`, `task`) with its pipeline and state."""
    if not parent:
        return None
    row: dict[str, Any] = {
        "run_id": parent["run"],
        "task_id": parent["task"],
        "pipeline": None,
        "status": "missing",
    }
    try:
        record = store.get_run(parent["run"])
    except RunNotFound:
        return row
    row.update(pipeline=record.pipeline, status=record.summary.status)
    return row


def family_view(store: Store, view: dict[str, Any]) -> dict[str, Any]:
    """`parent_run` and `child_runs` of a run's status view (`runtime.projection`)."""
    children = view.get("children") or {}
    return {
        "parent_run": parent_row(store, view.get("parent")),
        "child_runs": [child_row(store, task, c) for task, c in children.items()],
    }


def parents_of(store: Store, run_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """(parent run, task) of each run among `run_ids` that is a child run.

    Only ids of a child's shape (`core.subpipelines.CHILD_ID`) are looked at, each through its
    first event alone (which names the parent), so a page of the runs list costs one small read
    per child on it, none per top-level run.
    """
    found: dict[str, tuple[str, str | None]] = {}
    for run_id in run_ids:
        if not CHILD_ID.search(run_id):
            continue
        # Only a page with a child run on it loads the event types (most of a tenth of a
        # second): a list of top-level runs reads their summaries alone.
        from interlock.core import events as ev

        first = store.events(run_id, 0, 1)
        created = first[0].event if first else None
        if isinstance(created, ev.RunCreated) and created.parent_run is not None:
            found[run_id] = (created.parent_run, created.parent_task)
    return found


def current_children(state: RunState) -> set[str]:
    """Task ids whose current attempt is the one that started their latest child."""
    return {
        task_id
        for task_id, child in state.children.items()
        if task_id in state.tasks and state.tasks[task_id].attempt == child.attempt
    }
