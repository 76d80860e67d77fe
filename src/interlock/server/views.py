"""How runs look to the API's clients (the REST routes and the MCP tools): a run as listed,
its tasks, and the full view of one run. Plain functions over the store: no web framework."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from interlock.core.state import RunState
from interlock.runtime.family import current_children, family_view
from interlock.runtime.projection import (
    capped_waits,
    iso,
    live_batch_waits,
    status_view,
    unpriced_note,
    with_batch_waits,
    with_spend_wait,
)
from interlock.runtime.run_config import config_view, recorded_config, with_states
from interlock.server.messages import progress
from interlock.storage.base import RunRecord

if TYPE_CHECKING:
    from interlock.api import Interlock


def run_row(
    record: RunRecord,
    parent: tuple[str, str | None] | None = None,
    waiting: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A run as listed (`parent`: the parent run and task of a child run; `waiting`: what a
    waiting run waits for, as `status.json` says it)."""
    s = record.summary
    return {
        "run_id": record.run_id,
        "pipeline": record.pipeline,
        "topic": record.topic,
        # A running run whose calls wait on a spend cap is listed waiting, as status.json says.
        "status": "waiting" if waiting and waiting.get("for") == "spend_cap" else s.status,
        "phase": s.phase,
        "cost_usd": round(s.cost_usd, 6),
        "tokens": s.tokens,
        "estimated": s.estimated,  # some call's tokens, so the cost, were estimated
        "warnings": s.warnings,
        "events": record.last_seq,
        "created_at": iso(record.created_at),
        "updated_at": iso(s.updated_at),
        "driven_by": record.lease_owner,
        "parent_run": parent[0] if parent else None,
        "parent_task": parent[1] if parent else None,
        "waiting": waiting,
    }


def task_rows(state: RunState) -> list[dict[str, Any]]:
    """Every task with its attempts and timing (for the dashboard's worker table)."""
    rows = []
    for t in state.tasks.values():
        end = t.completed_at or (state.updated_at if t.status.in_flight else None)
        duration = round(end - t.started_at, 3) if end and t.started_at else None
        rows.append(
            {
                "task_id": t.task_id,
                "phase": t.phase,
                "role": t.role,
                "visit": t.visit,
                "item": t.item,
                "attempt": t.attempt,
                "status": t.status.value,
                "model": t.model,
                "dispatched_at": iso(t.dispatched_at),
                "started_at": iso(t.started_at),
                "completed_at": iso(t.completed_at),
                "duration_s": duration,
                "output": t.artifact,
                "error": t.error,
                "cost_usd": round(t.cost_usd, 6),
                "tokens": t.tokens,
            }
        )
    return rows


def run_detail(
    api: Interlock,
    run_id: str,
    *,
    state: RunState | None = None,
    record: RunRecord | None = None,
) -> dict[str, Any]:
    """A run's state: phases, workers, tasks, costs, warnings, progress, why it is paused
    (from `state` and `record` when the caller has them folded already)."""
    record = api.store.get_run(run_id) if record is None else record
    state = api.state(run_id) if state is None else state
    return with_family(api, detail_of_state(api, run_id, state, record), state, record)


def detail_of_state(
    api: Interlock, run_id: str, state: RunState, record: RunRecord
) -> dict[str, Any]:
    """The part of `run_detail` that only the run's own history decides (what a reader may
    keep until the run records more)."""
    pipeline = api.definition_of(record.pipeline, record.definition_hash).pipeline
    view = status_view(pipeline, state, run_id)
    view["tasks"] = task_rows(state)
    view["progress"] = progress(pipeline, state)
    view["phase"] = state.current.phase if state.current else None
    view["last_seq"] = record.last_seq
    view["pause_reason"] = state.pause_reason
    # The interlock.toml files its models were resolved from when it was created (paths and
    # hashes only: `config_view`); each file's state now is added by `with_family`.
    view["config"] = config_view(recorded_config(api.store, run_id))
    if state.unpriced:  # what the cost shown leaves out, and the fix
        view["unpriced_note"] = unpriced_note(list(state.unpriced))
    return view


def with_family(
    api: Interlock, base: dict[str, Any], state: RunState, record: RunRecord
) -> dict[str, Any]:
    """`base` (left as it is) with what other runs and the lease say now: who drives the run,
    its child runs of `pipeline` workers with their own state and cost, and for a child its
    parent (what the run page draws its links and "paused in child" note from)."""
    view = dict(base)
    view["driven_by"] = record.lease_owner
    if base.get("config") is not None:
        view["config"] = with_states(base["config"])
    # A wait of the running attempts is no event: the driving orchestrator's status.json
    # has it.
    at = time.time()
    found = capped_waits(api.home.live_dir, [record], at).get(record.run_id)
    view = with_spend_wait(view, found)
    view = with_batch_waits(view, live_batch_waits(api.home.live_dir, record, at))
    texts = {t: w.get("text") for t, w in (view.get("spend_waits") or {}).items()}
    batched = {t: w.get("text") for t, w in (view.get("provider_batches") or {}).items()}
    view.update(family_view(api.store, view))
    now = current_children(state)
    current = {c["task_id"]: c for c in view["child_runs"] if c["task_id"] in now}
    view["tasks"] = [
        {
            **task,
            "child": current.get(task["task_id"]),
            "spend_wait": texts.get(task["task_id"]),
            "provider_batch": batched.get(task["task_id"]),
        }
        for task in base["tasks"]
    ]
    return view
