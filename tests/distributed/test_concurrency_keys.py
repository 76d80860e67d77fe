"""Concurrency keys with two orchestrator processes and two worker processes on one
PostgreSQL ledger: never more than `limit` runs of a key at once, and a key with a backlog
does not hold back another key's runs."""

from __future__ import annotations

from tests.distributed.helpers import HERE, Processes, statuses, wait_until

from interlock.api import Interlock
from interlock.storage.postgres import PostgresStore

ACME, BETA = 4, 2


def test_two_orchestrators_keep_each_key_under_its_limit(procs: Processes) -> None:
    """Four acme and two beta runs, submitted acme first: at most two acme runs hold a slot
    at any time, and both beta runs start before the last acme runs."""
    app = Interlock(procs.root / "submit", store=procs.url)
    try:
        run_ids = {
            f"{customer}-{n}": app.submit(
                HERE / "keyed.yaml", topic=f"{customer}-{n}", inputs={"customer": customer}
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
            slot = next(e for e in events if e.kind == "slot_taken")
            done = next(e for e in events if e.kind == "delivered")
            spans[name] = (slot.at, done.at)
    finally:
        store.close()
    for customer in ("acme", "beta"):
        mine = [span for name, span in spans.items() if name.startswith(customer)]
        for start, _ in mine:
            held = sum(1 for s, e in mine if s <= start < e)
            assert held <= 2, f"{held} {customer} runs held a slot at once"
    acme_starts = sorted(spans[f"acme-{n}"][0] for n in range(ACME))
    assert max(spans[f"beta-{n}"][0] for n in range(BETA)) < acme_starts[-1]
