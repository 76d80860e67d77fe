"""Task concurrency keys with two orchestrator processes and two worker processes on one
PostgreSQL ledger: never more than `limit` attempts of a key run at once across all runs,
each keyed attempt is dispatched only after the slot it waited for was recorded, and a slot
held by an orchestrator killed with SIGKILL is neither lost nor doubled."""

from __future__ import annotations

import itertools
import signal

from tests.distributed.helpers import HERE, Processes, statuses, wait_until

from interlock.api import Interlock
from interlock.storage.postgres import PostgresStore

ACME, BETA, LIMIT = 5, 2, 2


def test_two_orchestrators_keep_each_task_key_under_its_limit(procs: Processes) -> None:
    """Five acme and two beta runs, each with one keyed task of half a second, on a fleet
    that could run eight at once: at any time at most two acme tasks run (spans from the
    recorded start and completion), every task took a slot before its dispatch, and a
    beta task starts before the last acme one (it does not queue behind acme's backlog)."""
    app = Interlock(procs.root / "submit", store=procs.url)
    try:
        run_ids = {
            f"{customer}-{n}": app.submit(
                HERE / "task_keyed.yaml", topic=f"{customer}-{n}", inputs={"customer": customer}
            )
            for customer, count in (("acme", ACME), ("beta", BETA))
            for n in range(count)
        }
    finally:
        app.close()
    for name in ("o1", "o2"):
        procs.orchestrator(name)
    for name in ("w1", "w2"):
        procs.worker(name, "--concurrency", "4")
    wait_until(
        lambda: statuses(procs.url).get("delivered", 0) == ACME + BETA, 120, "every run delivered"
    )
    store = PostgresStore(procs.url)
    spans: dict[str, tuple[float, float]] = {}
    try:
        for name, run_id in run_ids.items():
            events = store.events(run_id)
            kinds = [e.kind for e in events]
            assert kinds.index("task_slot_taken") < kinds.index("task_dispatched"), name
            started = next(e for e in events if e.kind == "task_started")
            done = next(e for e in events if e.kind == "task_completed")
            spans[name] = (started.at, done.at)
        with store.pool.connection() as db:
            left = db.execute("SELECT count(*) FROM task_slots").fetchone()
    finally:
        store.close()
    for customer in ("acme", "beta"):
        mine = [span for name, span in spans.items() if name.startswith(customer)]
        for start, _ in mine:
            running = sum(1 for s, e in mine if s <= start < e)
            assert running <= LIMIT, f"{running} {customer} tasks ran at once: {sorted(mine)}"
    acme_starts = sorted(spans[f"acme-{n}"][0] for n in range(ACME))
    assert min(spans[f"beta-{n}"][0] for n in range(BETA)) < acme_starts[-1]
    assert left == (0,), "slots left behind by ended runs"


def test_a_slot_survives_its_orchestrator_killed_and_frees_after_takeover(
    procs: Processes,
) -> None:
    """Three acme runs under `limit: 1` (in a copy of the workflow), one orchestrator: it is
    killed (SIGKILL) once a task holds the slot. A second orchestrator takes the runs over
    when their leases run out; every run delivers, the acme tasks never overlap (recorded
    start and completion), and no slot row is left behind."""
    flow = procs.root / "one.yaml"
    flow.write_text((HERE / "task_keyed.yaml").read_text().replace("limit: 2", "limit: 1"))
    app = Interlock(procs.root / "submit", store=procs.url)
    try:
        run_ids = [
            app.submit(flow, topic=f"acme-{n}", inputs={"customer": "acme"}) for n in range(3)
        ]
    finally:
        app.close()
    procs.worker("w1", "--concurrency", "4")
    first = procs.orchestrator("o1")

    def slot_taken() -> bool:
        store = PostgresStore(procs.url)
        try:
            return any(e.kind == "task_slot_taken" for r in run_ids for e in store.events(r))
        finally:
            store.close()

    wait_until(slot_taken, 60, "a task to take the slot")
    first.send_signal(signal.SIGKILL)
    first.wait()
    procs.orchestrator("o2")
    wait_until(lambda: statuses(procs.url).get("delivered", 0) == 3, 120, "every run delivered")
    store = PostgresStore(procs.url)
    try:
        spans = []
        for run_id in run_ids:
            events = store.events(run_id)
            started = [e.at for e in events if e.kind == "task_started"]
            done = next(e.at for e in events if e.kind == "task_completed")
            spans.append((min(started), done))
        with store.pool.connection() as db:
            left = db.execute("SELECT count(*) FROM task_slots").fetchone()
    finally:
        store.close()
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"two acme tasks ran at once: {spans}"
    assert left == (0,)
