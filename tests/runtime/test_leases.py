"""Leases under load: a busy loop keeps them, and one that ran out while nobody took it is
taken back; one that somebody else held in the meantime is not."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from interlock import Interlock, register
from interlock.core.state import RunStatus
from interlock.errors import LeaseHeld, LeaseLost
from interlock.runtime.executors import TaskContext
from interlock.runtime.leases import LeaseKeeper
from interlock.runtime.orchestrator import Settings
from interlock.storage.base import Lease
from interlock.storage.sqlite import SQLiteStore

from .conftest import WriteWorkflow

TTL = 0.6
FLOW = """
    p:
      phases:
        - id: a
          workers: [{role: w, call: hog, final: true}]
"""


def hog_the_loop(seconds: float) -> None:
    """CPU work on the event loop's own thread: nothing else of the loop runs meanwhile."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        pass


def actions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "action", "") for r in caplog.records]


@dataclass
class Held:
    """A run holding a lease, as a driver does."""

    run_id: str
    lease: Lease


def held_runs(store: SQLiteStore, count: int, lease_ttl: float, at: float) -> dict[str, Held]:
    """`count` runs r0, r1, ... recorded in `store`, each holding a lease taken at `at`."""
    holders: dict[str, Held] = {}
    for n in range(count):
        run_id = f"r{n}"
        store.create_run(
            run_id=run_id, pipeline="p", topic="t", definition_hash="h", definition="{}",
            source="", created_at=at,
        )  # fmt: skip
        holders[run_id] = Held(run_id, store.acquire_lease(run_id, "me", lease_ttl, at))
    return holders


def test_a_loop_blocked_longer_than_the_lease_keeps_it(
    tmp_path: Path, write_workflow: WriteWorkflow, caplog: pytest.LogCaptureFixture
) -> None:
    """While a worker holds the event loop for three lease times, the run's lease stays
    renewed (another orchestrator cannot take it), and the run ends delivered."""
    caplog.set_level(logging.INFO)
    home = tmp_path / "home"
    app = Interlock(home, settings=Settings(heartbeat=0.05, lease_ttl=TTL))
    intruder = Interlock(home)
    refused: list[bool] = []

    async def hog(ctx: TaskContext) -> str:
        hog_the_loop(3 * TTL)
        try:
            intruder.store.acquire_lease(ctx.spec.run_id, "intruder", TTL, time.time())
        except LeaseHeld:
            refused.append(True)
        return "done"

    register("hog", hog)
    run_id = app.start(write_workflow(FLOW), topic="t")
    assert app.drive(run_id).status is RunStatus.DELIVERED
    assert refused == [True]
    assert "lease_lost" not in actions(caplog)
    intruder.close()
    app.close()


def test_a_lease_that_ran_out_while_nobody_took_it_is_taken_back(
    tmp_path: Path, write_workflow: WriteWorkflow, caplog: pytest.LogCaptureFixture
) -> None:
    """When renewal stopped (the loop stalled past `stall_limit`) and the lease ran out, but
    no other orchestrator took the run, the orchestrator takes the lease back once its loop
    turns again and delivers the run, its worker having run once."""
    caplog.set_level(logging.INFO)
    settings = Settings(heartbeat=0.05, lease_ttl=TTL, stall_limit=0.1)
    app = Interlock(tmp_path / "home", settings=settings)
    calls: list[str] = []

    async def hog(ctx: TaskContext) -> str:
        calls.append(ctx.spec.task_id)
        hog_the_loop(3 * TTL)  # renewal stops after 0.1 s of it; the lease runs out
        return "done"

    register("hog", hog)
    run_id = app.start(write_workflow(FLOW), topic="t")
    assert app.drive(run_id).status is RunStatus.DELIVERED
    assert calls == ["w@1"]
    assert "lease_taken_back" in actions(caplog) and "lease_lost" not in actions(caplog)
    app.close()


def test_a_lease_somebody_else_held_meanwhile_is_not_taken_back(
    tmp_path: Path, write_workflow: WriteWorkflow, caplog: pytest.LogCaptureFixture
) -> None:
    """When another orchestrator took the expired lease and gave it up again, the first one
    does not take it back (what it holds in memory may be behind): it lets the run go."""
    caplog.set_level(logging.INFO)
    home = tmp_path / "home"
    settings = Settings(heartbeat=0.05, lease_ttl=TTL, stall_limit=0.1)
    app = Interlock(home, settings=settings)
    intruder = Interlock(home)

    async def hog(ctx: TaskContext) -> str:
        hog_the_loop(3 * TTL)
        lease = intruder.store.acquire_lease(ctx.spec.run_id, "intruder", TTL, time.time())
        intruder.store.release_lease(lease)
        return "done"

    register("hog", hog)
    run_id = app.start(write_workflow(FLOW), topic="t")
    assert app.drive(run_id).status is RunStatus.RUNNING
    assert "lease_lost" in actions(caplog) and "lease_taken_back" not in actions(caplog)
    assert app.store.get_run(run_id).lease_owner is None  # free for whoever resumes it
    intruder.close()
    app.close()


def test_leases_taken_back_together_are_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Leases of many runs that ran out together are taken back in one look and said in one
    line with their count, not a line per run (thousands may run out at once); a lone one
    is named."""
    caplog.set_level(logging.INFO)
    store = SQLiteStore(tmp_path / "ledger.db")
    now = time.time()
    holders = held_runs(store, 6, 1.0, now - 5)
    keeper = LeaseKeeper(
        store, holders, ttl=10.0, interval=1.0, clock=time.time,
        on_lost=lambda *_: pytest.fail("no lease was lost"), stall_limit=60.0,
    )  # fmt: skip
    keeper.renew_due()
    taken = [r for r in caplog.records if getattr(r, "action", "") == "lease_taken_back"]
    assert len(taken) == 1 and taken[0].getMessage().startswith("6 runs (r")
    assert all(h.lease.token == 2 and h.lease.expires_at > now + 5 for h in holders.values())
    holders["r0"].lease = store.acquire_lease("r0", "me", 1.0, now - 5 + 0.001)
    for run_id in list(holders)[1:]:
        del holders[run_id]
    keeper.renew_due()
    taken = [r for r in caplog.records if getattr(r, "action", "") == "lease_taken_back"]
    assert taken[-1].getMessage().startswith("run r0: its lease had run out")
    store.close()


def test_runs_driven_one_after_another_share_one_keeper_thread(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """The keeper's thread outlives a drive for a few seconds: runs driven one after another
    (a script calling `run` in a loop) start it once, not once per run; closing ends it."""
    import threading

    async def quick(ctx: TaskContext) -> str:
        return "done"

    register("hog", quick)
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05))
    flow = write_workflow(FLOW)

    def keepers() -> list[int | None]:
        return [
            t.ident
            for t in threading.enumerate()
            if t.name == "interlock-leases" and t.ident not in others
        ]

    others: set[int | None] = set()
    others = set(keepers())  # an earlier test's keeper, in its last seconds

    seen = []
    for _ in range(3):
        assert app.drive(app.start(flow, topic="t")).status is RunStatus.DELIVERED
        seen.append(keepers())
    assert len(seen[0]) == 1 and seen == [seen[0]] * 3
    assert not app.orchestrator.leases.running  # idle between drives: nothing to renew
    app.close()
    assert keepers() == []


def test_a_lease_released_while_its_renewal_waited_is_not_taken_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal waits for the ledger while the loop commits; if the loop let a run go and
    released its lease meanwhile (the run ended, or was handed back), the renewal finds the
    lease gone. That is not a lease run out: it is not taken back (the run would stay held
    by an orchestrator that no longer drives it) nor reported lost."""
    caplog.set_level(logging.INFO)
    store = SQLiteStore(tmp_path / "ledger.db")
    now = time.time()
    holders = held_runs(store, 4, 3.0, now)
    renew = store.renew_leases

    def loop_commits_first(
        leases: Sequence[Lease], ttl: float, now: float
    ) -> list[Lease | LeaseLost]:
        for run_id in ("r1", "r2"):  # the loop stops driving them, then releases them
            store.release_lease(holders.pop(run_id).lease)
        return renew(leases, ttl, now)

    store.renew_leases = loop_commits_first  # type: ignore[method-assign]
    lost: list[str] = []
    keeper = LeaseKeeper(
        store, holders, ttl=10.0, interval=1.0, clock=time.time,
        on_lost=lambda holder, _: lost.append(holder.run_id), stall_limit=60.0,
    )  # fmt: skip
    keeper.renew_due()
    assert lost == [] and "lease_taken_back" not in actions(caplog)
    assert store.get_run("r1").lease_owner is None and store.get_run("r2").lease_owner is None
    assert all(h.lease.expires_at > now + 5 for h in holders.values())  # r0, r3 renewed
    store.close()
