"""Pruning on every backend: what goes (whole ended runs and what hangs off them), what stays
(other runs, their chains and the outputs they share), and the receipt a pruned run leaves."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from interlock import Interlock, register
from interlock.errors import RunNotFound
from interlock.runtime.executors import TaskContext
from interlock.runtime.prune import Retention, prune
from interlock.storage import chain
from interlock.storage.base import ENDED_STATUSES, CacheEntry, OutboxItem, Store

WORKFLOW = """
pruned:
  phases:
    - id: only
      workers:
        - {role: own, call: prune_own}
        - {role: common, call: prune_common, final: true}
"""


async def own(ctx: TaskContext) -> str:
    return f"only {ctx.spec.run_id} wrote this"


async def common(ctx: TaskContext) -> str:
    return "every run wrote this"


register("prune_own", own)
register("prune_common", common)


def delivered(app: Interlock, workflow: Path, topic: str) -> str:
    """A run driven to its end; its id."""
    run_id = app.start(str(workflow), "pruned", topic=topic)
    assert app.drive(run_id).status.value == "delivered"
    return run_id


def outputs(store: Store, run_id: str) -> dict[str, str]:
    """Role -> sha256 of the run's completed outputs."""
    return {
        str(e.data["task_id"]).split("@")[0]: str(e.data["sha256"])
        for e in store.events(run_id)
        if e.kind == "task_completed"
    }


@pytest.fixture
def history(store: Store, tmp_path: Path) -> tuple[Interlock, str, str, str]:
    """Two delivered runs (old, kept) and one submitted, never driven (running)."""
    workflow = tmp_path / "pruned.yaml"
    workflow.write_text(WORKFLOW)
    app = Interlock(tmp_path / "home", store=store)
    old, kept = delivered(app, workflow, "old"), delivered(app, workflow, "kept")
    running = app.submit(str(workflow), "pruned", topic="still running")
    now = time.time()
    store.post_command(old, "message", "a note", "tester", now)
    item = OutboxItem(key=f"{old}/done", sink="hook", run_id=old, payload={"x": 1})
    store.outbox_enqueue("feed", 1, [item], now)
    sha = outputs(store, old)["own"]
    entry = CacheEntry(
        fingerprint="f", run_id=old, task_id="own@1", artifact="own.md", sha256=sha, size=1
    )
    store.cache_put([entry])
    return app, old, kept, running


def test_prune_removes_a_run_whole_and_leaves_a_receipt(
    store: Store, history: tuple[Interlock, str, str, str]
) -> None:
    """A pruned run's events, commands, notifications and cache entries are gone, its receipt
    holds its last seq and last hash, and the output only it named is deleted."""
    _, old, kept, _ = history
    last = store.events(old)[-1]
    own_sha = outputs(store, old)["own"]
    assert store.artifact(own_sha) is not None
    receipts, shared = store.prune_runs([old], time.time())
    assert [r.run_id for r in receipts] == [old]
    assert (receipts[0].last_seq, receipts[0].chain_head) == (last.seq, last.hash)
    assert store.pruned_run(old) == receipts[0]
    assert own_sha in shared
    with pytest.raises(RunNotFound):
        store.get_run(old)
    assert store.events(old) == []
    assert store.pending_commands(old) == []
    assert store.outbox_items(old) == []
    assert [e for e in store.cache_list() if e.run_id == old] == []
    assert all(e.run_id != old for e in store.all_events(0, 10_000))
    assert store.drop_artifacts(shared) == 1  # its own output; the common one is still named
    assert store.artifact(own_sha) is None
    assert store.artifact(outputs(store, kept)["common"]) is not None


def test_prune_keeps_other_runs_and_their_chains(
    store: Store, history: tuple[Interlock, str, str, str]
) -> None:
    """After a prune every remaining run's chain verifies from its first event, and runs
    that have not ended are neither offered nor removed."""
    app, old, kept, running = history
    now = time.time()
    offered = store.prunable_runs(now + 1, ENDED_STATUSES, now, 100)
    assert old in offered and kept in offered and running not in offered
    assert store.prune_runs([running], now) == ([], set())
    assert store.get_run(running).summary.status == "running"
    report = prune(store, app.home, Retention(older_than=0.0), now + 1)
    assert {r.run_id for r in report.runs} == {old, kept}
    remaining = store.events(running)
    assert remaining and chain.verify_events(remaining).ok
    assert store.count_runs() == {"running": 1}


def test_prune_leaves_runs_a_lease_still_holds(store: Store, tmp_path: Path) -> None:
    """An ended run whose lease is held (not yet fully acted on) is kept."""
    workflow = tmp_path / "pruned.yaml"
    workflow.write_text(WORKFLOW)
    app = Interlock(tmp_path / "home", store=store)
    run_id = delivered(app, workflow, "held")
    now = time.time()
    store.acquire_lease(run_id, "someone", 60, now)
    assert store.prunable_runs(now + 1, ENDED_STATUSES, now, 10) == []
    assert store.prune_runs([run_id], now) == ([], set())
    assert store.get_run(run_id).summary.status == "delivered"


def test_prune_by_status_and_age(store: Store, history: tuple[Interlock, str, str, str]) -> None:
    """Only runs that ended before the cutoff, in the statuses asked for, are pruned; a dry
    run removes nothing."""
    app, old, kept, _ = history
    now = time.time()
    assert prune(store, app.home, Retention(older_than=3600.0), now).runs == []
    failed_only = Retention(older_than=0.0, statuses=("failed",))
    assert prune(store, app.home, failed_only, now + 1).runs == []
    dry = prune(store, app.home, Retention(older_than=0.0), now + 1, dry_run=True)
    assert set(dry.would) == {old, kept} and store.get_run(old).run_id == old
