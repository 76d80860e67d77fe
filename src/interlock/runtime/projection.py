"""Read-only views derived from a run's state: `status.json` and the dispatch ledger.

Both are projections: they can be rebuilt from the history at any time, so they are written
atomically but without fsync, and never read back to make a decision.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from interlock.core.decide import given_up, still_running
from interlock.core.state import (
    ENDED,
    RUN_PAUSED,
    RUN_RUNNING,
    RunState,
    TaskStatus,
    listed_status,
)
from interlock.core.tolerance import allowed_failures
from interlock.core.tool_calls import waiting_calls
from interlock.core.workflow import Pipeline
from interlock.storage.base import RunRecord, Store, StoredEvent, fold_history


def iso(timestamp: float | None) -> str | None:
    """UTC ISO-8601 with a Z, or None.

    Every status.json refresh spells a few times: the whole seconds are spelled once per
    second (`_iso_second`), and the milliseconds are those `datetime` shows (its microseconds
    rounded half to even, then cut to milliseconds), several times cheaper than
    `datetime.isoformat` with a time zone.
    """
    if timestamp is None:
        return None
    if not 0 <= timestamp < _YEAR_10000:
        try:
            moment = dt.datetime.fromtimestamp(timestamp, dt.UTC)
        except (ValueError, OverflowError, OSError):  # a time `datetime` cannot hold
            return beyond_dates(timestamp)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    fraction, whole = math.modf(timestamp)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    return f"{_iso_second(int(whole))}.{micros // 1000:03d}Z"


_YEAR_10000 = 253402300800.0  # the first second `datetime` cannot show


def beyond_dates(timestamp: float) -> str:
    """A time no calendar date can show (a recorded delay of a billion days), in words: a
    view of such a run still answers, and so do lists that hold it."""
    if math.isnan(timestamp):
        return "not a time"
    return "after 9999-12-31T23:59:59Z" if timestamp > 0 else "before 0001-01-01T00:00:00Z"


def waits_of(
    store: Store, records: Sequence[RunRecord]
) -> tuple[dict[str, dict[str, Any] | None], dict[str, str]]:
    """What each waiting run of `records` waits for, folded from its history (a list shows
    few waiting runs), and the runs whose history cannot be read, each with why: one run's
    history never breaks a list of many. A store that does not answer is still an error."""
    from interlock.errors import DamagedHistory, InterlockError

    waits: dict[str, dict[str, Any] | None] = {}
    unreadable: dict[str, str] = {}
    for record in records:
        if record.summary.status != "waiting":
            continue
        try:
            waits[record.run_id] = waiting_view(fold_history(store.events(record.run_id)))
        except DamagedHistory as exc:
            unreadable[record.run_id] = exc.message
        except InterlockError:
            raise
        except Exception as exc:  # a value the views cannot take: that run alone is unreadable
            unreadable[record.run_id] = f"run {record.run_id}: {type(exc).__name__}: {exc}"
    return waits, unreadable


@functools.lru_cache(maxsize=256)
def _iso_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def status_view(
    pipeline: Pipeline,
    state: RunState,
    run_dir_name: str,
    spend_waits: dict[str, dict[str, Any]] | None = None,
    batch_waits: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The run as `status.json` shows it: phases, workers, retries, delivery.

    `spend_waits`: the running tasks whose model call waits on a spend cap (by task id, as
    `CapWait.to_json` has them): a wait of the running attempt, never recorded, that the
    runtime driving the run knows of. A running run with one, and no other wait, shows as
    `waiting` for it. `batch_waits`: likewise, the running tasks whose model call waits in
    a provider batch (as `BatchWait.to_json` has them); such a task is running, its
    worker's `provider_batch` says in which batch.
    """
    waits = live_spend_waits(state, spend_waits)
    batched = live_spend_waits(state, batch_waits)
    latest: dict[str, Any] = {}
    # What each worker spent over every visit, attempt and item, by visit: the rows add up
    # to the run's total, where the last visit alone would not.
    spent: dict[str, dict[int, float]] = {}
    estimated: set[str] = set()
    for task in state.tasks.values():  # insertion order: later visits overwrite earlier ones
        latest.setdefault(task.role, {})[task.item] = task
        by_visit = spent.setdefault(task.role, {})
        by_visit[task.visit] = by_visit.get(task.visit, 0.0) + task.cost_usd
        if task.estimated:
            estimated.add(task.role)
    phases = []
    outcomes = item_outcomes(pipeline, state)
    current_index = 0
    # What an ended run never started will not run: "skipped" (a branch not taken, or what
    # came after a failure), not "pending".
    unstarted = "skipped" if state.status in ENDED else "pending"
    for index, phase in enumerate(pipeline.phases):
        status = state.phase_status.get(phase.id, unstarted)
        if state.current is not None and state.current.phase == phase.id:
            current_index = index
            if state.status is RUN_PAUSED and state.current.completed:
                status = "paused"
            elif state.waiting is not None and state.waiting.phase == phase.id:
                status = "waiting"
        workers = {}
        for worker in phase.workers:
            tasks = latest.get(worker.role, {})
            entry: dict[str, Any] = {"status": unstarted, "session": ""}
            if tasks:
                ordered = [tasks[k] for k in sorted(tasks, key=lambda k: -1 if k is None else k)]
                last = ordered[-1]
                entry = {
                    "status": _worker_status(ordered),
                    "reused_from": last.reused_from,
                    "session": last.worker,
                    "attempt": last.attempt,
                    "visit": last.visit,
                    "model": last.model,
                    "output": last.artifact,
                    "error": last.error,
                    "cost_usd": round(sum(spent[worker.role].values()), 6),
                }
                if len(spent[worker.role]) > 1:
                    entry["visit_costs"] = {
                        str(v): round(c, 6) for v, c in sorted(spent[worker.role].items())
                    }
                if worker.role in estimated:
                    entry["estimated"] = True  # a call's tokens were estimated, not reported
                if last.task_id in waits:
                    entry["spend_wait"] = waits[last.task_id]["text"]
                if last.task_id in batched:
                    entry["provider_batch"] = batched[last.task_id]["text"]
                if any(t.unpriced for t in ordered):
                    entry["unpriced"] = True  # a call with no known price counted $0
                child = state.children.get(last.task_id)
                if child is not None and child.attempt == last.attempt:
                    entry["child"] = child.run
                if len(ordered) > 1 or last.item is not None:
                    entry["items"] = len(ordered)
                    entry["items_completed"] = sum(
                        t.status is TaskStatus.COMPLETED for t in ordered
                    )
                    failed = sum(t.status is TaskStatus.ITEM_FAILED for t in ordered)
                    if failed:
                        entry["items_failed"] = failed
            workers[worker.role] = entry
        shown: dict[str, Any] = {
            "id": phase.id,
            "status": status,
            "visits": state.visits.get(phase.id, 0),
            "workers": workers,
        }
        if phase.for_each is not None and phase.id in outcomes:
            shown["items"] = outcomes[phase.id]
        phases.append(shown)
    waiting = spend_waiting_view(waits) if waits and listed_status(state) == "running" else None
    return {
        "run_id": state.run_id,
        "pipeline": state.pipeline,
        "dir": run_dir_name,
        "topic": state.topic,
        "inputs": state.inputs,
        "status": "waiting" if waiting is not None else listed_status(state),
        "waiting": waiting if waiting is not None else waiting_view(state),
        "spend_waits": {
            task_id: {
                **wait,
                "until": iso(wait["until"]),
                "since": iso(wait["since"]),
                "phase": state.tasks[task_id].phase,
                "role": state.tasks[task_id].role,
            }
            for task_id, wait in waits.items()
        },
        "provider_batches": {
            task_id: {
                **wait,
                "submitted_at": iso(wait["submitted_at"]),
                "phase": state.tasks[task_id].phase,
                "role": state.tasks[task_id].role,
            }
            for task_id, wait in batched.items()
        },
        "failing": failing_view(pipeline, state),
        # Tasks of workers with a concurrency key: waiting for a slot before dispatch, or
        # holding one (see `Worker.concurrency`).
        "task_slots": {
            "waiting": {
                t: {"key": w.key, "limit": w.limit, "attempt": w.attempt, "since": iso(w.at)}
                for t, w in state.task_slot_waits.items()
            },
            "held": {t: {"key": h.key, "attempt": h.attempt} for t, h in state.task_slots.items()},
        },
        "signals": {
            "received": dict(state.signals),
            "pending": [s.name for s in state.inbox],
        },
        "current_phase": current_index,
        "retry_count": retry_count(state),
        # Tasks made again because an input they read was edited: no retries.
        "reruns": sum(t.reruns for t in state.tasks.values()),
        "phases": phases,
        "result_delivered": state.delivered is not None,
        "final": state.delivered,
        "archived": state.archived,
        "imported": state.imported,
        "trusted": state.imported and not state.inert,
        "warnings": state.warnings,
        "failure": state.failure,
        "cost_usd": round(state.cost_usd, 6),
        "unpriced_models": list(state.unpriced),
        "tokens": state.tokens,
        # Some calls' tokens (and so their cost) were estimated: the server reported none.
        "estimated": any(t.estimated for t in state.tasks.values()),
        "created_at": iso(state.created_at),
        "updated_at": iso(state.updated_at),
        "events": state.events,
        "definition_hash": state.definition_hash,
        "rerun_of": state.rerun_of,
        "rerun_from": state.rerun_from,
        "pause": pause_view(state),
        "parent": (
            None
            if state.parent_run is None
            else {"run": state.parent_run, "task": state.parent_task}
        ),
        "children": {
            task_id: {
                "run": c.run,
                "attempt": c.attempt,
                "status": c.status,
                "detail": c.detail,
                "cost_usd": round(c.cost_usd, 6),  # spent so far (its end's is the task's)
                "tokens": c.tokens,
            }
            for task_id, c in state.children.items()
        },
    }


def retry_count(state: RunState) -> int:
    """Attempts after a task's first that were retries: not the re-runs an edit caused."""
    return sum(max(0, t.attempt - 1 - t.reruns - t.held) for t in state.tasks.values())


def live_spend_waits(
    state: RunState, spend_waits: dict[str, dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """The waits of `spend_waits` of tasks still in flight in a running run, by task id."""
    if not spend_waits or state.status is not RUN_RUNNING:
        return {}
    return {
        task_id: wait
        for task_id, wait in sorted(spend_waits.items())
        if task_id in state.tasks and state.tasks[task_id].status.in_flight
    }


def spend_waiting_view(waits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The `waiting` of a run whose tasks' calls wait on spend caps: the longest wait."""
    task_id, wait = min(waits.items(), key=lambda tw: (tw[1]["since"], tw[0]))
    return {
        "for": "spend_cap",
        "task": task_id,
        "cap": wait["cap"],
        "amount_usd": wait["amount_usd"],
        "until": iso(wait["until"]),
        "since": iso(wait["since"]),
        "text": wait["text"],
        "tasks": len(waits),
    }


def failing_view(pipeline: Pipeline, state: RunState) -> dict[str, Any] | None:
    """A running run that fails once its running attempts end (a task failed for good)."""
    if state.status is not RUN_RUNNING:
        return None
    lost = given_up(pipeline, state)
    if lost is None:
        return None
    waits = [t.task_id for t in still_running(pipeline, state, lost)]
    return {"task": lost.task_id, "error": lost.error, "waiting_for": waits}


def failing_text(run_id: str, failing: dict[str, Any]) -> str:
    """The line that says why a failing run is still running."""
    running = failing["waiting_for"]
    waits = f"{', '.join(running)} {'has' if len(running) == 1 else 'have'}" if running else "all"
    return (
        f"failing: task {failing['task']} failed for good; the run fails once {waits} "
        f"ended, so that what was paid for is kept for a rerun "
        f"('interlock cancel {run_id}' stops it now)"
    )


def pause_view(state: RunState) -> dict[str, Any] | None:
    """Why a paused run is paused, and the child run that paused it, if one did."""
    if state.status is not RUN_PAUSED:
        return None
    child = state.held_by_child("paused") if state.pause_reason == "child" else None
    view: dict[str, Any] = {
        "reason": state.pause_reason,
        "child": None if child is None else {"run": child.run, "detail": child.detail},
    }
    if state.tool_waits:  # the tool calls that wait for a decision (`approve` tools)
        view["tool_calls"] = [
            {**call, "since": iso(call["since"]) if call["since"] is not None else None}
            for call in waiting_calls(state)
        ]
    return view


def waiting_view(state: RunState) -> dict[str, Any] | None:
    """What a waiting run waits for, and until when (None: it is not waiting)."""
    waiting = state.waiting
    awaited = state.slot_awaited
    if awaited is not None and not state.status.ended:
        return {"for": "slot", "key": awaited.key, "limit": awaited.limit, "since": iso(awaited.at)}
    if state.status.ended:
        return None
    if waiting is None and state.task_slot_waits and not state.flight:
        oldest = min(state.task_slot_waits.values(), key=lambda w: (w.at, w.task_id))
        return {
            "for": "task_slot",
            "task": oldest.task_id,
            "key": oldest.key,
            "limit": oldest.limit,
            "since": iso(oldest.at),
            "tasks": len(state.task_slot_waits),
        }
    if waiting is None:
        child = state.held_by_child("waiting")
        if child is None:
            return None
        return {"for": "child", "child": child.run, "detail": child.detail}
    return {
        "phase": waiting.phase,
        "visit": waiting.visit,
        "for": "time" if waiting.signal is None else "signal",
        "when": waiting.gate,
        "signal": waiting.signal,
        "until": iso(waiting.until),
        "since": iso(waiting.since),
    }


def overdue(waiting: dict[str, Any] | None, now: float | None = None) -> bool:
    """Whether the wait of `waiting` has ended (its time passed): a run still waiting then
    needs an orchestrator now, as an undriven running run does."""
    until = str((waiting or {}).get("until") or "")
    if not until:
        return False
    if until.startswith(("after ", "before ", "not ")):  # beyond_dates's words
        return bool(until.startswith("before "))
    ended = dt.datetime.fromisoformat(until.replace("Z", "+00:00")).timestamp()
    return ended <= (time.time() if now is None else now)


def waiting_text(waiting: dict[str, Any] | None) -> str:
    """`waiting for signal 'payment' until 2026-...Z` (empty when not waiting)."""
    if not waiting:
        return ""
    if waiting.get("for") == "slot":
        return f"waiting for a slot of {waiting['key']!r} ({waiting['limit']} at once)"
    if waiting.get("for") == "task_slot":
        more = f" and {waiting['tasks'] - 1} more task(s)" if waiting["tasks"] > 1 else ""
        return (
            f"waiting for a slot of {waiting['key']!r} ({waiting['limit']} at once) for task "
            f"{waiting['task']}{more}"
        )
    if waiting.get("for") == "spend_cap":
        more = f" ({waiting['tasks']} tasks)" if waiting["tasks"] > 1 else ""
        return f"{waiting['text']}{more}"
    if waiting.get("for") == "child":
        return f"waiting for child run {waiting['child']} ({waiting['detail']})"
    until = f" until {waiting['until']}" if waiting.get("until") else ""
    if waiting.get("signal"):
        return f"waiting for signal {waiting['signal']!r}{until}"
    return f"waiting{until}"


def item_outcomes(pipeline: Pipeline, state: RunState) -> dict[str, dict[str, Any]]:
    """Each fan-out phase's latest visit, item by item: how many items it has and how many
    completed (every worker of the item's lane), failed for good within `tolerate`, or are
    still under way, and the failed ones with their errors (`status`, the dashboard)."""
    lanes: dict[str, dict[int, list[TaskStatus]]] = {}
    for task in state.tasks.values():
        if task.item is not None and state.visits.get(task.phase) == task.visit:
            lanes.setdefault(task.phase, {}).setdefault(task.item, []).append(task.status)
    found = {}
    for phase in pipeline.phases:
        if phase.for_each is None or phase.id not in state.visits:
            continue
        current = state.current
        by_item = lanes.get(phase.id, {})
        if current is not None and current.phase == phase.id and current.items is not None:
            count = len(current.items)
        else:
            count = len(by_item)  # an earlier visit: the lanes it started
        width = len(phase.workers)
        failed = state.failed_items.get(phase.id, (0, {}))[1]
        completed = sum(
            1
            for item, statuses in by_item.items()
            if item not in failed
            and len(statuses) == width
            and all(s is TaskStatus.COMPLETED for s in statuses)
        )
        tolerate = phase.for_each.tolerate
        found[phase.id] = {
            "count": count,
            "completed": completed,
            "failed": len(failed),
            "other": count - completed - len(failed),  # running, pending, or never run
            "tolerate": tolerate,
            "allowed": allowed_failures(tolerate, count) if tolerate is not None else None,
            "failed_items": [failed[i] for i in sorted(failed)],
        }
    return found


_SETTLED = frozenset((TaskStatus.COMPLETED, TaskStatus.ITEM_FAILED))


def _worker_status(tasks: list[Any]) -> str:
    statuses = {t.status for t in tasks}
    if TaskStatus.ITEM_FAILED in statuses and statuses <= _SETTLED:
        # Failed items its fan-out tolerates: the worker is done with the others (the row
        # and the phase's `items` say how many failed).
        return "completed" if TaskStatus.COMPLETED in statuses else "failed"
    if statuses == {TaskStatus.COMPLETED}:
        # Carried over from an earlier run, not run: say so (a mix of both counts as run).
        return "reused" if all(t.reused_from for t in tasks) else "completed"
    for status in (TaskStatus.RUNNING, TaskStatus.DISPATCHED, TaskStatus.RETRY_WAIT):
        if status in statuses:
            return "running" if status is not TaskStatus.RETRY_WAIT else "retrying"
    return str(next(iter(statuses)).value)


LEDGER_STATUS = {
    TaskStatus.DISPATCHED: "PENDING",
    TaskStatus.RUNNING: "IN_PROGRESS",
    TaskStatus.RETRY_WAIT: "PENDING",
    TaskStatus.COMPLETED: "COMPLETE",
    TaskStatus.FAILED: "FAILED",
    TaskStatus.TIMED_OUT: "FAILED",
    TaskStatus.ABANDONED: "ABANDONED",
    TaskStatus.ITEM_FAILED: "FAILED",
}


def ledger_view(run: RunRecord, state: RunState, events: list[StoredEvent]) -> dict[str, Any]:
    """The dispatch ledger: every task, recorded as dispatched before it started."""
    first_dispatch: dict[str, float] = {}
    starts: dict[str, list[dict[str, Any]]] = {}  # every start, a restart after a crash too
    for stored in events:
        if stored.kind == "task_dispatched":
            first_dispatch.setdefault(stored.data["task_id"], stored.at)
        elif stored.kind == "task_started":
            starts.setdefault(stored.data["task_id"], []).append(
                {
                    "attempt": stored.data["attempt"],
                    "started_at": iso(stored.at),
                    "by": stored.data.get("worker", ""),
                }
            )
    tasks = [
        {
            "task_id": t.task_id,
            "status": "REUSED" if t.reused_from else LEDGER_STATUS[t.status],
            "reused_from": t.reused_from,
            "dispatched_at": iso(first_dispatch.get(t.task_id, t.dispatched_at)),
            "completed_at": iso(t.completed_at),
            "output_path": t.artifact,
            "attempt": t.attempt,
            "starts": starts.get(t.task_id, []),
            "role": t.role,
            "phase": t.phase,
        }
        for t in state.tasks.values()
    ]
    return {
        "pipeline_id": run.run_id,
        "pipeline": run.pipeline,
        "coordinator_started": iso(run.lease_acquired_at or run.created_at),
        "last_coordinator_heartbeat": iso(run.lease_renewed_at or state.updated_at),
        "status": state.status.value,
        "tasks": tasks,
    }


def unpriced_note(aliases: list[str]) -> str:
    """What a cost leaves out when models without a known price were called."""
    names = ", ".join(repr(a) for a in aliases)
    models = "model" if len(aliases) == 1 else "models"
    return (
        f"the cost leaves out the calls to {models} {names}: no price is known for "
        f"{'it' if len(aliases) == 1 else 'them'}, so they count $0 (and budgets do not see "
        f"them); set input_price_per_mtok and output_price_per_mtok in [models.{aliases[0]}] "
        "of interlock.toml (0 for a free model)"
    )


def live_spend_wait(run_dir: Path, owner: str | None) -> dict[str, Any] | None:
    """What a running run's tasks wait on, when they wait on spend caps, as the status.json
    of `owner` (the live orchestrator holding its lease) says: ``{"waiting": ..., "spend_waits":
    ...}``, or None. A file of an orchestrator no longer driving it is not believed: a wait
    ended with its process."""
    view = _live_status(run_dir, owner)
    if view is None:
        return None
    waiting = view.get("waiting")
    if not isinstance(waiting, dict) or waiting.get("for") != "spend_cap":
        return None
    return {"waiting": waiting, "spend_waits": view.get("spend_waits") or {}}


def _live_status(run_dir: Path, owner: str | None) -> dict[str, Any] | None:
    """The run's status.json, if `owner` (the live orchestrator holding its lease) wrote it."""
    if owner is None:
        return None
    try:
        view = json.loads((run_dir / "status.json").read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(view, dict) or view.get("orchestrator") != owner:
        return None
    return view


def live_batch_waits(
    run_dir_of: Callable[[str], Path], record: RunRecord, now: float
) -> dict[str, dict[str, Any]]:
    """What the tasks of a running run whose lease is held wait on in provider batches, as
    its orchestrator's status.json says (`provider_batches`), by task id."""
    if record.summary.status != "running" or (record.lease_expires or 0) <= now:
        return {}
    view = _live_status(run_dir_of(record.run_id), record.lease_owner)
    found = (view or {}).get("provider_batches")
    return found if isinstance(found, dict) else {}


def with_batch_waits(view: dict[str, Any], waits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A status view folded from the history (`view`, left as it is) with the provider-batch
    waits of its running tasks (`waits`, from `live_batch_waits`), as status.json has them:
    `provider_batches`, and each waiting worker's `provider_batch`."""
    if not waits or view.get("status") not in ("running", "waiting"):
        return view
    texts = {(w.get("phase"), w.get("role")): w.get("text") for w in waits.values()}
    phases = [
        {
            **phase,
            "workers": {
                role: {**entry, "provider_batch": texts[phase["id"], role]}
                if (phase["id"], role) in texts
                else entry
                for role, entry in phase["workers"].items()
            },
        }
        for phase in view["phases"]
    ]
    return {**view, "provider_batches": waits, "phases": phases}


def capped_waits(
    run_dir_of: Callable[[str], Path], records: Sequence[RunRecord], now: float
) -> dict[str, dict[str, Any]]:
    """`live_spend_wait` of each running run of `records` whose lease is held (`run_dir_of`:
    a run's live folder), by run id: what a list of runs shows them waiting on."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.summary.status != "running" or (record.lease_expires or 0) <= now:
            continue
        wait = live_spend_wait(run_dir_of(record.run_id), record.lease_owner)
        if wait is not None:
            found[record.run_id] = wait
    return found


def with_spend_wait(view: dict[str, Any], found: dict[str, Any] | None) -> dict[str, Any]:
    """A status view folded from the history (`view`, left as it is) with the spend-cap wait
    its orchestrator's status.json shows (`found`, from `live_spend_wait`), as status.json
    itself has it: the run `waiting`, each waiting worker's `spend_wait`."""
    if found is None or view.get("status") != "running":
        return view
    waits = found["spend_waits"]
    texts = {(w.get("phase"), w.get("role")): w.get("text") for w in waits.values()}
    phases = [
        {
            **phase,
            "workers": {
                role: {**entry, "spend_wait": texts[phase["id"], role]}
                if (phase["id"], role) in texts
                else entry
                for role, entry in phase["workers"].items()
            },
        }
        for phase in view["phases"]
    ]
    return {
        **view,
        "status": "waiting",
        "waiting": found["waiting"],
        "spend_waits": waits,
        "phases": phases,
    }
