"""Every guarantee of `interlock.storage.base`, checked on every backend."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from interlock.core import events as ev
from interlock.errors import LeaseHeld, LeaseLost, RunNotFound, StorageError
from interlock.storage.base import AppendBatch, CacheEntry, Lease, NewEvent, RunSummary, Store
from interlock.storage.postgres import PostgresStore

T0 = 1000.0
TTL = 10.0


def make_run(
    store: Store, run_id: str, *, pipeline: str = "p", at: float = T0, definition: str = "{}"
) -> None:
    """Register a run pinned to a definition whose hash is derived from its text."""
    store.create_run(
        run_id=run_id,
        pipeline=pipeline,
        topic=f"topic of {run_id}",
        definition_hash=f"h-{definition}",
        definition=definition,
        source="wf.yaml",
        created_at=at,
    )


def notes(*messages: str) -> list[NewEvent]:
    """Simple events with recognisable contents."""
    return [NewEvent(event=ev.Warned(at=T0, message=m), rule="r", why="w") for m in messages]


def batch(
    lease: Lease,
    *messages: str,
    status: str = "running",
    consumed: tuple[int, ...] = (),
) -> AppendBatch:
    """An append of `messages` under `lease`."""
    summary = RunSummary(status=status, phase="x", cost_usd=0.5, tokens=7, warnings=1)
    return AppendBatch(lease=lease, events=notes(*messages), summary=summary, consumed=consumed)


def messages(store: Store, run_id: str) -> list[str]:
    """The messages of a run's events, in seq order."""
    return [s.data["message"] for s in store.events(run_id)]


class Broken(NewEvent):
    """An event that cannot be serialised, to make an append fail half-way."""

    def record(self) -> tuple[str, str]:
        raise ValueError("cannot serialise")

    def stamped(self) -> tuple[str, str, str]:
        raise ValueError("cannot serialise")


# -- runs and definitions ----------------------------------------------------------------------


def test_created_run_is_listed_with_its_identity_and_no_lease(store: Store) -> None:
    """A new run reads back as registered: running, no events, nobody driving it."""
    make_run(store, "r1")
    run = store.get_run("r1")
    assert (run.run_id, run.pipeline, run.topic, run.source) == (
        "r1",
        "p",
        "topic of r1",
        "wf.yaml",
    )
    assert (run.created_at, run.last_seq, run.summary.status) == (T0, 0, "running")
    assert run.lease_owner is None and store.events("r1") == []


def test_definitions_are_stored_once_per_hash(store: Store) -> None:
    """Two runs pinned to one hash share its body; a second body under that hash is ignored."""
    make_run(store, "r1", definition='{"a":1}')
    store.create_run(
        run_id="r2",
        pipeline="p",
        topic="t",
        definition_hash='h-{"a":1}',
        definition="other",
        source="",
        created_at=T0,
    )
    assert store.definition('h-{"a":1}') == '{"a":1}'
    assert store.get_run("r2").definition_hash == store.get_run("r1").definition_hash


def test_missing_definition_is_a_storage_error(store: Store) -> None:
    """Asking for a hash nobody stored raises StorageError."""
    with pytest.raises(StorageError):
        store.definition("nope")


def test_duplicate_run_id_is_refused(store: Store) -> None:
    """Registering a run id twice fails and leaves the first run untouched."""
    make_run(store, "r1")
    with pytest.raises(StorageError):
        make_run(store, "r1", pipeline="other")
    assert store.get_run("r1").pipeline == "p"


def test_unknown_run_is_reported(store: Store) -> None:
    """Reading, leasing or commanding an unknown run raises RunNotFound."""
    with pytest.raises(RunNotFound):
        store.get_run("ghost")
    with pytest.raises(RunNotFound):
        store.acquire_lease("ghost", "a", TTL, T0)
    with pytest.raises(RunNotFound):
        store.post_command("ghost", "approve", "", "me", T0)


# -- appends -----------------------------------------------------------------------------------


def test_seq_is_gapless_across_appends(store: Store) -> None:
    """Events are numbered 1, 2, 3... across appends, and the run's last_seq follows."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    assert store.append(batch(lease, "a", "b", "c"), T0) == 3
    assert store.append(batch(lease, "d", "e"), T0) == 5
    assert [s.seq for s in store.events("r1")] == [1, 2, 3, 4, 5]
    assert store.get_run("r1").last_seq == 5


def test_events_since_and_limit(store: Store) -> None:
    """`events` returns seq > since, in order, at most `limit`, with typed events."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    store.append(batch(lease, "a", "b", "c", "d"), T0)
    assert [s.seq for s in store.events("r1", since=2)] == [3, 4]
    assert [s.seq for s in store.events("r1", since=1, limit=2)] == [2, 3]
    first = store.events("r1")[0]
    assert first.event == ev.Warned(at=T0, message="a")
    assert (first.kind, first.rule, first.why, first.run_id) == ("warned", "r", "w", "r1")


def test_seq_is_gapless_under_concurrent_appends(opener: Callable[[], Store]) -> None:
    """Appends racing from two handles on two runs keep each run's seq gapless."""
    stores = [opener(), opener()]
    for name in ("r1", "r2"):
        make_run(stores[0], name)
    leases = [stores[0].acquire_lease(name, "a", 600, T0) for name in ("r1", "r2")]

    def writer(index: int) -> None:
        for n in range(20):
            stores[index % 2].append(batch(leases[index % 2], f"{index}-{n}", "x"), T0)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("r1", "r2"):
        assert [s.seq for s in stores[1].events(name)] == list(range(1, 81))


def test_append_is_all_or_nothing(store: Store) -> None:
    """An append that fails half-way writes none of its events, summary or consumption."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    store.append(batch(lease, "kept"), T0)
    command = store.post_command("r1", "message", "hi", "me", T0)
    events = [*notes("lost"), Broken(event=ev.Warned(at=T0, message="x"))]
    summary = RunSummary(status="failed", phase="y")
    with pytest.raises(Exception):  # noqa: B017 - each backend reports the failure its own way
        store.append(
            AppendBatch(lease=lease, events=events, summary=summary, consumed=[command]), T0
        )
    assert messages(store, "r1") == ["kept"]
    assert store.get_run("r1").last_seq == 1
    assert store.get_run("r1").summary.status == "running"
    assert [c.id for c in store.pending_commands("r1")] == [command]


def test_summary_follows_every_append(store: Store) -> None:
    """The listing row carries the summary given with the last append."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    store.append(batch(lease, "a", status="paused"), T0)
    summary = store.get_run("r1").summary
    assert (summary.status, summary.phase, summary.cost_usd) == ("paused", "x", 0.5)
    assert (summary.tokens, summary.warnings) == (7, 1)
    assert summary.estimated is False


def test_an_estimated_cost_is_kept_in_the_listing_row(store: Store) -> None:
    """A summary whose tokens were estimated is listed so, by `get_run`, `list_runs` and
    `search_runs`, and stays so while later appends (same status and cost) say it again."""
    from interlock.storage.run_list import RunQuery

    make_run(store, "r1")
    make_run(store, "r2", at=T0 + 1)
    lease = store.acquire_lease("r1", "a", TTL, T0)
    guessed = RunSummary(status="running", phase="x", cost_usd=0.5, tokens=7, estimated=True)
    store.append(AppendBatch(lease=lease, events=notes("a"), summary=guessed), T0)
    store.append(AppendBatch(lease=lease, events=notes("b"), summary=guessed), T0)
    assert store.get_run("r1").summary.estimated is True
    assert store.get_run("r2").summary.estimated is False
    listed = {r.run_id: r.summary.estimated for r in store.list_runs()}
    assert listed == {"r1": True, "r2": False}
    found = {r.run_id: r.summary.estimated for r in store.search_runs(RunQuery(limit=10))}
    assert found == {"r1": True, "r2": False}
    if isinstance(store, PostgresStore):  # a fleet orchestrator takes runs with their rows
        taken = store.take_leases(["r1", "r2"], "b", TTL, T0 + TTL + 1)
        assert {record.run_id: record.summary.estimated for _, record, _ in taken} == listed


# -- leases and fencing ------------------------------------------------------------------------


def test_lease_is_exclusive_until_it_expires(store: Store) -> None:
    """A held lease refuses other owners; once expired, another owner takes it over."""
    make_run(store, "r1")
    first = store.acquire_lease("r1", "a", TTL, T0)
    assert (first.owner, first.token, first.expires_at) == ("a", 1, T0 + TTL)
    run = store.get_run("r1")
    assert (run.lease_owner, run.lease_expires) == ("a", T0 + TTL)
    with pytest.raises(LeaseHeld):
        store.acquire_lease("r1", "b", TTL, T0 + 1)
    second = store.acquire_lease("r1", "b", TTL, T0 + TTL)
    assert second.owner == "b" and second.token > first.token


def test_renew_extends_and_release_frees(store: Store) -> None:
    """Renewal moves the expiry on; after release another owner gets the lease at once."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    renewed = store.renew_lease(lease, TTL, T0 + 5)
    assert renewed.expires_at == T0 + 5 + TTL and renewed.token == lease.token
    with pytest.raises(LeaseHeld):
        store.acquire_lease("r1", "b", TTL, T0 + TTL + 1)
    store.release_lease(renewed)
    assert store.get_run("r1").lease_owner is None
    assert store.acquire_lease("r1", "b", TTL, T0 + 6).token > lease.token


def test_expired_lease_cannot_be_renewed_or_used(store: Store) -> None:
    """Past its expiry a lease can neither be renewed nor append, even if nobody took over."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    with pytest.raises(LeaseLost):
        store.renew_lease(lease, TTL, T0 + TTL)
    with pytest.raises(LeaseLost):
        store.append(batch(lease, "late"), T0 + TTL + 1)
    assert store.events("r1") == []


def test_take_over_from_a_named_holder(store: Store) -> None:
    """`take_over_from` lets a new owner take an unexpired lease from that holder only."""
    make_run(store, "r1")
    store.acquire_lease("r1", "dead", TTL, T0)
    with pytest.raises(LeaseHeld):
        store.acquire_lease("r1", "b", TTL, T0, take_over_from="someone-else")
    lease = store.acquire_lease("r1", "b", TTL, T0, take_over_from="dead")
    assert store.get_run("r1").lease_owner == "b" and lease.token == 2


def test_fencing_tokens_only_grow(store: Store) -> None:
    """Across re-acquisitions, releases and take-overs every new token is larger."""
    make_run(store, "r1")
    tokens = [store.acquire_lease("r1", "a", TTL, T0).token]
    tokens.append(store.acquire_lease("r1", "a", TTL, T0 + 1).token)
    store.release_lease(Lease(run_id="r1", owner="a", token=tokens[-1], expires_at=0))
    tokens.append(store.acquire_lease("r1", "b", TTL, T0 + 2).token)
    tokens.append(store.acquire_lease("r1", "c", TTL, T0 + 100).token)
    assert tokens == sorted(set(tokens)) and len(tokens) == 4


def test_stale_holder_gets_lease_lost_and_writes_nothing(opener: Callable[[], Store]) -> None:
    """After a take-over the old holder's append fails whole: no events, summary or commands."""
    old_side, new_side = opener(), opener()
    make_run(old_side, "r1")
    stale = old_side.acquire_lease("r1", "a", TTL, T0)
    old_side.append(batch(stale, "before"), T0)
    command = new_side.post_command("r1", "approve", "", "me", T0)
    current = new_side.acquire_lease("r1", "b", TTL, T0 + TTL)
    with pytest.raises(LeaseLost):
        old_side.append(batch(stale, "stale", status="failed", consumed=(command,)), T0 + 1)
    with pytest.raises(LeaseLost):
        old_side.renew_lease(stale, TTL, T0 + 1)
    assert messages(new_side, "r1") == ["before"]
    assert new_side.get_run("r1").summary.status == "running"
    assert [c.id for c in new_side.pending_commands("r1")] == [command]
    assert new_side.append(batch(current, "after"), T0 + TTL) == 2


def test_stale_release_does_not_free_the_new_holders_lease(store: Store) -> None:
    """Releasing a superseded lease leaves the current holder's lease in place."""
    make_run(store, "r1")
    stale = store.acquire_lease("r1", "a", TTL, T0)
    store.acquire_lease("r1", "b", TTL, T0 + TTL)
    store.release_lease(stale)
    assert store.get_run("r1").lease_owner == "b"


def test_release_leases_frees_only_the_current_holders(store: Store) -> None:
    """A batch release frees the leases still held and leaves superseded ones' runs alone."""
    make_run(store, "r1")
    make_run(store, "r2")
    held = store.acquire_lease("r1", "a", TTL, T0)
    stale = store.acquire_lease("r2", "a", TTL, T0)
    store.acquire_lease("r2", "b", TTL, T0 + TTL)
    store.release_leases([held, stale])
    assert store.get_run("r1").lease_owner is None
    assert store.get_run("r2").lease_owner == "b"


def test_group_commit_with_one_lost_lease(store: Store) -> None:
    """In a group commit the run whose lease was lost gets LeaseLost; the others commit."""
    for name in ("r1", "r2", "r3", "r4"):
        make_run(store, name)
    leases = [store.acquire_lease(n, "a", TTL, T0) for n in ("r1", "r2", "r3", "r4")]
    store.acquire_lease("r3", "b", TTL, T0 + TTL, take_over_from="a")
    batches = [batch(lease, f"{lease.run_id}-1", f"{lease.run_id}-2") for lease in leases]
    results = store.append_many(batches, T0 + 1)
    assert results[:2] == [2, 2] and results[3] == 2
    assert isinstance(results[2], LeaseLost)
    assert messages(store, "r1") == ["r1-1", "r1-2"] and messages(store, "r3") == []
    assert store.get_run("r3").last_seq == 0


def test_a_lost_lease_keeps_its_commands_and_outputs_out_of_the_commit(store: Store) -> None:
    """A batch refused by its fence consumes no command and stores no output; the leases
    released with the commit are freed with it, a superseded one is left to its holder."""
    for name in ("r1", "r2", "done", "moved"):
        make_run(store, name)
    ok = store.acquire_lease("r1", "a", TTL, T0)
    lost = store.acquire_lease("r2", "a", TTL, T0)
    done = store.acquire_lease("done", "a", TTL, T0)
    moved = store.acquire_lease("moved", "a", TTL, T0)
    store.acquire_lease("r2", "b", TTL, T0 + TTL, take_over_from="a")
    store.acquire_lease("moved", "b", TTL, T0 + TTL, take_over_from="a")
    command = store.post_command("r2", "approve", "", "ann", T0)
    refused = AppendBatch(
        lease=lost,
        events=notes("never"),
        summary=RunSummary(status="running", phase=None),
        consumed=(command,),
        artifacts=[("f" * 64, b"never stored")],
    )
    kept = AppendBatch(
        lease=ok,
        events=notes("kept"),
        summary=RunSummary(status="running", phase=None),
        artifacts=[("e" * 64, b"stored")],
    )
    results = store.append_many([refused, kept], T0 + 1, releases=[done, moved])
    assert isinstance(results[0], LeaseLost) and results[1] == 1
    assert [c.id for c in store.pending_commands("r2")] == [command]
    assert store.artifact("f" * 64) is None and store.artifact("e" * 64) == b"stored"
    assert store.get_run("done").lease_owner is None
    assert store.get_run("moved").lease_owner == "b"


def test_outputs_and_commands_of_any_bytes_go_in_with_the_append(store: Store) -> None:
    """Outputs whose bytes a text array would quote or escape (backslashes, quotes, braces,
    commas, NUL, nothing at all) are stored exactly, and several commands are consumed."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    commands = [store.post_command("r1", "message", f"m{n}", "ann", T0) for n in range(3)]
    bodies = [b'\\x00 "quoted", {braced}\n', bytes(range(256)), b"", b"NULL"]
    stored = [(f"{n:064x}", body) for n, body in enumerate(bodies)]
    batch = AppendBatch(
        lease=lease,
        events=notes("kept"),
        summary=RunSummary(status="running", phase=None),
        consumed=tuple(commands),
        artifacts=stored,
    )
    assert store.append_many([batch], T0 + 1) == [1]
    assert [store.artifact(sha) for sha, _ in stored] == bodies
    assert store.pending_commands("r1") == []


# -- commands ----------------------------------------------------------------------------------


def test_commands_are_consumed_exactly_once_with_the_append(store: Store) -> None:
    """A command stays pending until an append consumes it, then never shows again."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    first = store.post_command("r1", "approve", "ok", "ann", T0)
    second = store.post_command("r1", "message", "hi", "bob", T0 + 1)
    pending = store.pending_commands("r1")
    assert [(c.id, c.kind, c.message, c.by) for c in pending] == [
        (first, "approve", "ok", "ann"),
        (second, "message", "hi", "bob"),
    ]
    store.append(batch(lease, "approved", consumed=(first,)), T0 + 2)
    assert [c.id for c in store.pending_commands("r1")] == [second]
    store.append(batch(lease, "again", consumed=(first, second)), T0 + 3)
    assert store.pending_commands("r1") == [] and store.pending_commands() == []


def test_pending_commands_of_all_runs_oldest_first(store: Store) -> None:
    """Without a run id, pending commands of every run come back in posting order."""
    make_run(store, "r1")
    make_run(store, "r2")
    ids = [
        store.post_command("r2", "message", "1", "x", T0),
        store.post_command("r1", "message", "2", "x", T0),
        store.post_command("r2", "cancel", "3", "x", T0),
    ]
    assert ids == sorted(ids)
    assert [(c.id, c.run_id) for c in store.pending_commands()] == list(
        zip(ids, ["r2", "r1", "r2"], strict=True)
    )


# -- finding and listing -----------------------------------------------------------------------


def test_find_runs_by_prefix(store: Store) -> None:
    """`find_runs` returns ids starting with the prefix, sorted, at most ten."""
    for name in ["abc-1", "abc-2", "abd-1", "ab", *[f"zz-{i:02}" for i in range(12)]]:
        make_run(store, name)
    assert store.find_runs("abc") == ["abc-1", "abc-2"]
    assert store.find_runs("ab") == ["ab", "abc-1", "abc-2", "abd-1"]
    assert store.find_runs("abc-1") == ["abc-1"]
    assert store.find_runs("q") == []
    assert store.find_runs("zz") == [f"zz-{i:02}" for i in range(10)]


def test_list_runs_filters_and_orders_newest_first(store: Store) -> None:
    """Listings filter by status and pipeline, newest first (ties by id), up to `limit`."""
    make_run(store, "a", pipeline="p1", at=T0)
    make_run(store, "b", pipeline="p2", at=T0 + 2)
    make_run(store, "c", pipeline="p1", at=T0 + 1)
    make_run(store, "d", pipeline="p1", at=T0 + 2)
    lease = store.acquire_lease("c", "o", TTL, T0)
    store.append(batch(lease, "x", status="delivered"), T0)
    assert [r.run_id for r in store.list_runs()] == ["d", "b", "c", "a"]
    assert [r.run_id for r in store.list_runs(limit=2)] == ["d", "b"]
    assert [r.run_id for r in store.list_runs(pipeline="p1")] == ["d", "c", "a"]
    assert [r.run_id for r in store.list_runs(status="running")] == ["d", "b", "a"]
    assert [r.run_id for r in store.list_runs(status="delivered", pipeline="p1")] == ["c"]
    assert store.list_runs(status="delivered", pipeline="p2") == []
    listed = store.list_runs(pipeline="p1")[1]
    assert listed.lease_owner == "o" and listed.summary.status == "delivered"


def test_all_events_in_commit_order(opener: Callable[[], Store]) -> None:
    """`all_events` pages through every run's events by id, in the order they committed."""
    one, two = opener(), opener()
    make_run(one, "r1")
    make_run(one, "r2")
    l1 = one.acquire_lease("r1", "a", TTL, T0)
    l2 = two.acquire_lease("r2", "b", TTL, T0)
    one.append(batch(l1, "1", "2"), T0)
    two.append(batch(l2, "3"), T0)
    one.append(batch(l1, "4"), T0)
    every = two.all_events()
    assert [e.data["message"] for e in every] == ["1", "2", "3", "4"]
    assert [(e.run_id, e.seq) for e in every] == [("r1", 1), ("r1", 2), ("r2", 1), ("r1", 3)]
    ids = [e.id for e in every]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [e.data["message"] for e in two.all_events(after_id=ids[1], limit=1)] == ["3"]
    assert two.all_events(after_id=ids[-1]) == []


def test_all_events_never_skips_under_concurrent_commits(opener: Callable[[], Store]) -> None:
    """A reader following `all_events` while others append sees every event exactly once."""
    writers = [opener() for _ in range(3)]
    reader = opener()
    runs = [f"r{i}" for i in range(3)]
    for name in runs:
        make_run(writers[0], name)
    leases = [writers[i].acquire_lease(runs[i], "o", 600, T0) for i in range(3)]
    done = threading.Event()

    def write(index: int) -> None:
        for n in range(30):
            writers[index].append(batch(leases[index], str(n)), T0)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    seen: list[tuple[str, int]] = []
    last = 0
    while not done.is_set():
        if not any(t.is_alive() for t in threads):
            done.set()
        for event in reader.all_events(after_id=last, limit=7):
            seen.append((event.run_id, event.seq))
            last = event.id
    seen += [(e.run_id, e.seq) for e in reader.all_events(after_id=last)]
    assert sorted(seen) == sorted((r, s) for r in runs for s in range(1, 31))


def test_appends_are_hash_chained(store: Store) -> None:
    """Every append links its events to the run's previous one (`interlock.storage.chain`)."""
    from interlock.storage.chain import verify_events

    make_run(store, "r1")
    lease = store.acquire_lease("r1", "me", TTL, T0)
    store.append(batch(lease, "a", "b"), T0)
    store.append(batch(lease, "c"), T0)
    report = verify_events(store.events("r1"))
    assert report.ok and report.unchained == 0 and all(e.hash for e in store.events("r1"))


def cache_entry(fingerprint: str, run_id: str, completed_at: float, **values: Any) -> CacheEntry:
    """An index entry for task a@1 of `run_id`."""
    return CacheEntry(
        fingerprint=fingerprint,
        run_id=run_id,
        task_id="a@1",
        artifact="a.md",
        sha256="5" * 64,
        size=3,
        values=dict(values),
        completed_at=completed_at,
    )


def test_cache_index_finds_by_fingerprint_newest_first_within_the_age(store: Store) -> None:
    """Entries are found by fingerprint, newest first, not older than `since`; values survive."""
    store.cache_put(
        [
            cache_entry("f1", "r1", 10.0, score=1),
            cache_entry("f1", "r2", 20.0, score=2, items=["x", "y"]),
            cache_entry("f2", "r3", 30.0),
        ]
    )
    found = store.cache_find("f1", 0.0)
    assert [e.run_id for e in found] == ["r2", "r1"]
    assert found[0].values == {"score": 2, "items": ["x", "y"]}
    assert found[0].sha256 == "5" * 64 and found[0].size == 3 and found[0].artifact == "a.md"
    assert [e.run_id for e in store.cache_find("f1", 15.0)] == ["r2"]
    assert store.cache_find("f9", 0.0) == []
    assert [e.run_id for e in store.cache_list()] == ["r3", "r2", "r1"]


def test_cache_index_keeps_the_first_entry_and_clears_by_age(store: Store) -> None:
    """Putting an entry twice keeps one; clearing forgets only what is older than asked."""
    store.cache_put([cache_entry("f1", "r1", 10.0)])
    store.cache_put([cache_entry("f1", "r1", 99.0), cache_entry("f1", "r2", 20.0)])
    assert [e.completed_at for e in store.cache_find("f1", 0.0)] == [20.0, 10.0]
    assert store.cache_clear(before=15.0) == 1
    assert [e.run_id for e in store.cache_list()] == ["r2"]
    assert store.cache_clear() == 1 and store.cache_list() == []


def test_cache_entries_are_indexed_with_their_append_and_only_under_the_lease(
    store: Store,
) -> None:
    """An append's cache entries are found once it commits; a fenced-off append indexes none."""
    from dataclasses import replace

    make_run(store, "r1")
    lease = store.acquire_lease("r1", "a", TTL, T0)
    entry = cache_entry("f1", "r1", 10.0, score=4)
    store.append(replace(batch(lease, "done"), cache=[entry]), T0)
    assert store.cache_find("f1", 0.0) == [entry]
    stale = replace(lease, token=lease.token + 7)
    refused = store.append_many(
        [replace(batch(stale, "x"), cache=[cache_entry("f2", "r1", 1.0)])], T0
    )
    assert isinstance(refused[0], LeaseLost)
    assert store.cache_find("f2", 0.0) == []
