"""Task concurrency keys with two orchestrator processes and two worker processes on one
PostgreSQL ledger: never more than `limit` attempts of a key run at once across all runs,
and each keyed attempt is dispatched only after the slot it waited for was recorded."""

from __future__ import annotations

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
