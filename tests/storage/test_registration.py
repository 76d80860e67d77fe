"""Batched lease renewal and runs registered with their first events, on every backend."""

from __future__ import annotations

from tests.storage.test_conformance import T0, TTL, batch, make_run, messages

from interlock.core import events as ev
from interlock.errors import LeaseLost
from interlock.storage.base import AppendBatch, Lease, NewEvent, RunRegistration, RunSummary, Store


def register(run_id: str, owner: str = "a") -> AppendBatch:
    """A batch creating `run_id` with one event, leased to `owner` with token 1."""
    lease = Lease(run_id=run_id, owner=owner, token=1, expires_at=T0 + TTL)
    registration = RunRegistration(
        run_id=run_id,
        pipeline="p",
        topic="t",
        definition_hash="h",
        definition="{}",
        source="",
        created_at=T0,
    )
    return AppendBatch(
        lease=lease,
        events=[NewEvent(event=ev.Warned(at=T0, message="first"))],
        summary=RunSummary(status="running", phase=None),
        register=registration,
    )


def test_run_registered_with_its_first_events(store: Store) -> None:
    """A registering batch creates the run, its lease and its history in one commit."""
    assert store.append_many([register("r1"), register("r2", owner="b")], T0) == [1, 1]
    run = store.get_run("r2")
    assert (run.lease_owner, run.last_seq, run.definition_hash) == ("b", 1, "h")
    assert messages(store, "r1") == ["first"] and store.definition("h") == "{}"
    lease = Lease(run_id="r1", owner="a", token=1, expires_at=T0 + TTL)
    assert store.append(batch(lease, "second"), T0 + 1) == 2


def test_renew_leases_reports_each_lost_lease(store: Store) -> None:
    """Renewing many leases at once extends the held ones and returns LeaseLost for the rest."""
    for name in ("r1", "r2", "r3"):
        make_run(store, name)
    leases = [store.acquire_lease(n, "a", TTL, T0) for n in ("r1", "r2", "r3")]
    store.acquire_lease("r2", "b", TTL, T0, take_over_from="a")
    results = store.renew_leases(leases, TTL, T0 + 5)
    assert isinstance(results[1], LeaseLost)
    kept = [r for r in results if isinstance(r, Lease)]
    assert [(r.run_id, r.expires_at) for r in kept] == [("r1", T0 + 5 + TTL), ("r3", T0 + 5 + TTL)]
    assert store.get_run("r2").lease_owner == "b"
