"""A worker's turn in one statement: results recorded, next entries claimed, their runs' news
read, all or nothing, and a stale worker's result refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tests.distributed.helpers import PG_ADMIN
from tests.storage.test_conformance import make_run

from interlock.core import events as ev
from interlock.distributed.artifacts import PostgresArtifacts, RecentBodies
from interlock.distributed.queue import Claim, Finished, Q, TaskQueue
from interlock.distributed.worker import RemoteWorker
from interlock.storage.base import AppendBatch, NewEvent, RunSummary
from interlock.storage.postgres import PostgresStore

ALL = ("command", "model", "call")


@pytest.fixture
def queue(pg_url: str) -> Iterator[TaskQueue]:
    """A queue on a fresh database."""
    store = PostgresStore(pg_url, pool_size=4)
    yield TaskQueue(store, max_deliveries=3)
    store.close()


def put(queue: TaskQueue, task: str, run_id: str = "r1") -> int:
    """Enqueue attempt 1 of `task`."""
    return queue.enqueue(run_id=run_id, task_id=task, attempt=1, kind="call", payload={})[0]


def turn(queue: TaskQueue, finished: list[Finished], limit: int, **kw: Any) -> Any:
    """One `finish_claim` of worker `w` (every kind, no tags) unless told otherwise."""
    name = kw.pop("worker", "w")
    return queue.finish_claim(
        name, finished, kinds=ALL, tags=(), ttl=kw.pop("ttl", 30), limit=limit, **kw
    )


def test_finishing_and_claiming_are_one_statement(queue: TaskQueue) -> None:
    """The result (with its output stored as an artifact) and the next claims come back from
    one statement; the claims are the best queued entries, handed out for the first time."""
    a, b, c = put(queue, "a"), put(queue, "b"), put(queue, "c")
    held = turn(queue, [], 1).claims
    assert [claim.id for claim in held] == [a]
    result = {"ok": True, "usage": None}
    done = turn(queue, [Finished(claim=held[0], result=result, output=b"out a")], 2)
    assert done.recorded == {a}
    assert [(claim.id, claim.delivery) for claim in done.claims] == [(b, 1), (c, 1)]
    entry, body = queue.finished_many([a])[a]
    assert entry.state == "done" and entry.result == result and body == b"out a"
    assert queue.states([b, c]) == {b: ("claimed", 1), c: ("claimed", 1)}
    # Finishing with nothing more to take claims nothing and still records.
    last = turn(queue, [Finished(claim=claim, result=result) for claim in done.claims], 4)
    assert last.recorded == {b, c} and last.claims == []


def test_outputs_and_results_of_any_bytes_travel_intact(queue: TaskQueue) -> None:
    """What a text array would quote or escape (backslashes, quotes, braces, commas, NUL, an
    empty output) is recorded exactly, with results whose strings hold the same."""
    bodies = [b'\\x00 "quoted", {braced}\n', bytes(range(256)), b""]
    ids = [put(queue, f"t{n}") for n in range(len(bodies))]
    held = turn(queue, [], len(ids)).claims
    results = [{"ok": True, "note": f'say "{n}", {{ \\ }}'} for n in range(len(ids))]
    finished = [
        Finished(claim=claim, result=result, output=body)
        for claim, result, body in zip(held, results, bodies, strict=True)
    ]
    assert turn(queue, finished, 0).recorded == set(ids)
    found = queue.finished_many(ids)
    assert [found[i][1] for i in ids] == bodies
    assert [found[i][0].result for i in ids] == results


def test_a_stale_workers_result_is_refused(queue: TaskQueue) -> None:
    """A worker whose hand-out expired and went to another worker cannot record its result,
    even in the statement that claims its next entry: the current holder's result stands."""
    a = put(queue, "a")
    (first,) = turn(queue, [], 1, worker="slow", ttl=0.2).claims
    time.sleep(0.4)
    assert queue.sweep() == 1
    (second,) = turn(queue, [], 1, worker="fast").claims
    assert (second.id, second.delivery) == (a, 2)
    b = put(queue, "b")
    late = turn(
        queue, [Finished(claim=first, result={"ok": True}, output=b"late")], 1, worker="slow"
    )
    assert late.recorded == set() and [claim.id for claim in late.claims] == [b]
    assert queue.get(a).state == "claimed" and queue.get(a).result is None
    kept = turn(queue, [Finished(claim=second, result={"ok": True, "n": 2}, output=b"on time")], 0)
    assert kept.recorded == {a}
    entry, body = queue.finished_many([a])[a]
    assert entry.result == {"ok": True, "n": 2} and body == b"on time"


def test_a_worker_cut_off_past_its_lease_records_its_result_if_nobody_took_over(
    queue: TaskQueue,
) -> None:
    """A worker that could not reach the database for longer than its lease (an outage) finds
    its entry queued again by a sweep; with nobody having taken it since, its result is
    recorded by its next turn, which claims other entries but never that one again: the
    attempt runs once, not twice."""
    a, b, c = put(queue, "a"), put(queue, "b"), put(queue, "c")
    (held,) = turn(queue, [], 1, worker="cut-off", ttl=0.2).claims
    time.sleep(0.4)
    assert queue.sweep() == 1 and queue.states([a]) == {a: ("queued", 1)}
    # Woken by the sweep's announcement, the worker claims for its free slots while it still
    # holds `a`'s result: never `a` itself, whose delivery would then outgrow the result's.
    more = turn(queue, [], 1, worker="cut-off", holding=[a])
    assert [(claim.id, claim.delivery) for claim in more.claims] == [(b, 1)]
    back = turn(
        queue,
        [Finished(claim=held, result={"ok": True}, output=b"once")],
        2,
        worker="cut-off",
        holding=[a, b],
    )
    assert back.recorded == {a}
    assert [(claim.id, claim.delivery) for claim in back.claims] == [(c, 1)]
    entry, body = queue.finished_many([a])[a]
    assert entry.state == "done" and entry.delivery == 1 and body == b"once"
    assert turn(queue, [], 3, worker="other").claims == []


def test_only_the_holder_takes_a_swept_hand_out_back(queue: TaskQueue) -> None:
    """The name a sweep leaves on the entry is the holder's: another worker's result for the
    same delivery (a bug, or a forged claim) is refused, and so is the holder's once it handed
    the entry back or the run cancelled and queued the attempt again."""
    a = put(queue, "a")
    (held,) = turn(queue, [], 1, worker="w1", ttl=0.2).claims
    time.sleep(0.4)
    queue.sweep()
    assert turn(queue, [Finished(claim=held, result={"ok": True})], 0, worker="w2").recorded == (
        set()
    )
    assert not queue.heartbeat(held, 30, "w2") and queue.states([a]) == {a: ("queued", 1)}
    (again,) = turn(queue, [], 1, worker="w1").claims  # a new hand-out, to w1 itself
    queue.hand_back(again)
    assert not queue.finish(again, {"ok": True}, worker="w1")
    assert not queue.heartbeat(again, 30, "w1")
    (third,) = turn(queue, [], 1, worker="w1").claims
    assert queue.cancel("r1", "a", 1) and put(queue, "a") == a  # queued again, no holder
    assert not queue.finish(third, {"ok": True}, worker="w1")
    assert queue.states([a]) == {a: ("queued", third.delivery)}


def test_a_crash_during_the_turn_loses_nothing(queue: TaskQueue, pg_url: str) -> None:
    """A worker that dies with its turn uncommitted (its server process ended mid-transaction)
    leaves its entry claimed and the next one queued, as if the turn never happened: the
    entry is handed out again when its lease expires, and nothing is recorded twice."""
    a, b = put(queue, "a"), put(queue, "b")
    (held,) = turn(queue, [], 1, worker="dying", ttl=0.3).claims
    args = {
        "kinds": list(ALL),
        "tags": [],
        "only": None,
        "older": None,
        "worker": "dying",
        "ttl": 30,
        "n": 1,
        "out_shas": [],
        "out_bodies": [],
        "fin_ids": [held.id],
        "fin_deliveries": [held.delivery],
        "fin_results": [psycopg.types.json.Jsonb({"ok": True})],
        "fin_shas": [None],
        "known": "{}",
        "news": False,
        "limits": None,
        "holding": [],
    }
    db = psycopg.connect(pg_url)
    assert len(db.execute(Q["finish_claim"], args).fetchall()) == 2  # done a, claimed b
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (db.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        db.commit()
    db.close()
    assert queue.states([a, b]) == {a: ("claimed", 1), b: ("queued", 0)}
    time.sleep(0.5)
    assert queue.sweep() == 1
    again = turn(queue, [], 2, worker="next").claims
    assert sorted((claim.id, claim.delivery) for claim in again) == [(a, 2), (b, 1)]


def test_a_crash_after_the_turn_hands_the_claims_out_again(queue: TaskQueue) -> None:
    """A worker killed right after a turn committed (its result recorded, the next entry
    claimed, never started): the result counts once; the claimed entry goes to another
    worker as a new delivery of the same attempt once its lease expires."""
    a, b = put(queue, "a"), put(queue, "b")
    (held,) = turn(queue, [], 1, worker="dying").claims
    done = turn(queue, [Finished(claim=held, result={"ok": True})], 1, worker="dying", ttl=0.2)
    assert done.recorded == {a} and [claim.id for claim in done.claims] == [b]
    time.sleep(0.4)
    assert queue.sweep() == 1
    (again,) = turn(queue, [], 1, worker="next").claims
    assert (again.id, again.delivery) == (b, 2)
    assert queue.get(a).state == "done" and queue.get(a).delivery == 1


def test_claims_bring_their_runs_news(pg_url: str) -> None:
    """A claim carries the run's events after the seq the worker knows (all of them for a run
    it does not know), and the worker decides from them whether the attempt is wanted
    without reading the ledger again."""
    store = PostgresStore(pg_url)
    try:
        now = time.time()
        store.create_run(
            run_id="r",
            pipeline="p",
            topic="t",
            definition_hash="h",
            definition="{}",
            source="",
            created_at=now,
        )
        lease = store.acquire_lease("r", "orchestrator", 60, now)

        def append(*events: ev.Event) -> None:
            summary = RunSummary(status="running", phase="one")
            batch = AppendBatch(
                lease=lease, events=[NewEvent(event=e) for e in events], summary=summary
            )
            store.append(batch, time.time())

        def dispatched(task: str, attempt: int) -> ev.TaskDispatched:
            return ev.TaskDispatched(
                at=now, task_id=task, role="a", phase="one", visit=1, item=None, attempt=attempt
            )

        append(
            ev.RunCreated(at=now, run_id="r", pipeline="p", definition_hash="h", topic="t"),
            ev.PhaseStarted(at=now, phase="one", visit=1),
            dispatched("a@1", 1),
        )
        queue = TaskQueue(store)
        put(queue, "a@1", run_id="r")
        worker = RemoteWorker(store, name="w")
        read: list[str] = []
        events = store.events

        def counting(run_id: str, since: int = 0, limit: int | None = None) -> list:  # type: ignore[type-arg]
            read.append(run_id)
            return events(run_id, since, limit)

        store.events = counting  # type: ignore[method-assign]
        (first,) = turn(queue, [], 1, known=worker.known()).claims
        assert first.news_since == 0 and [e.seq for e in first.news or ()] == [1, 2, 3]
        assert worker._current(first) and read == []
        assert worker.known() == {"r": 3}
        append(
            ev.TaskTimedOut(at=now, task_id="a@1", attempt=1, detail="late"),
            dispatched("a@1", 2),
        )
        queue.enqueue(run_id="r", task_id="a@1", attempt=2, kind="call", payload={})
        queue.enqueue(run_id="r", task_id="a@1", attempt=1, kind="call", payload={})
        put(queue, "b@1", run_id="r")  # never dispatched by the run: not wanted
        claims = turn(queue, [], 2, known=worker.known()).claims
        assert [(c.task_id, c.attempt) for c in claims] == [("a@1", 2), ("b@1", 1)]
        assert all(c.news_since == 3 and [e.seq for e in c.news or ()] == [4, 5] for c in claims)
        assert worker._current(claims[0]) and not worker._current(claims[1])
        assert not worker._current(first) and read == []  # superseded by attempt 2
        # A claim whose news the worker cannot place (it forgot the run) reads the ledger.
        worker._states.clear()
        assert worker._current(claims[0]) and read == ["r"]
        unread = Claim(id=9, run_id="r", task_id="a@1", attempt=2, delivery=1, payload={})
        assert worker._current(unread) and read == ["r", "r"]
    finally:
        store.close()


def _scans(pg_url: str, store: PostgresStore) -> dict[str, int]:
    """Whole-table scans of the queue, the ledger and the artifacts so far, the store's own
    included: a backend hands its counters over at most once a second unless told to."""
    store.single(lambda db: db.execute("SELECT pg_stat_force_next_flush()"))
    with psycopg.connect(pg_url, autocommit=True) as db:
        rows = db.execute(
            "SELECT relname, seq_scan FROM pg_stat_user_tables"
            " WHERE relname IN ('task_queue', 'events', 'artifacts')"
        ).fetchall()
    return dict(rows)


def _grow(pg_url: str, more: str) -> None:
    """5,000 finished queue entries of run r, and what `more` adds, without analysing."""
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO task_queue (run_id, task_id, attempt, kind, payload, state,"
            " created_at, finished_at) SELECT 'r', 'old' || n, 1, 'call', '{}', 'done', 0, 0"
            " FROM generate_series(1, 5000) n"
        )
        db.execute(more)


def test_a_turn_scans_no_whole_table_however_small_it_was_when_planned(pg_url: str) -> None:
    """A worker's turn finds entries by id and news by (run, seq) even when its plan was made
    while the tables were nearly empty (a fresh database) and they have grown since: a plan
    that scanned the whole queue and ledger cost milliseconds per turn, growing with the
    history."""
    store = PostgresStore(pg_url, pool_size=1)
    try:
        queue = TaskQueue(store)
        make_run(store, "r")
        held: list[Claim] = []
        for n in range(8):  # the statement is prepared and its plan cached while tiny
            put(queue, f"warm{n}", run_id="r")
            done = [Finished(claim=claim, result={"ok": True}, output=b"x") for claim in held]
            held = turn(queue, done, 1, known={"r": 0}).claims
        _grow(
            pg_url,
            "INSERT INTO events (run_id, seq, at, kind, data)"
            " SELECT 'r', n, 0, 'note', '{}' FROM generate_series(1, 5000) n",
        )
        fresh = [put(queue, f"new{n}", run_id="r") for n in range(6)]
        before = _scans(pg_url, store)
        for _ in range(6):
            done = [Finished(claim=claim, result={"ok": True}, output=b"y") for claim in held]
            outcome = turn(queue, done, 1, known={"r": 4990})
            assert outcome.recorded == {claim.id for claim in held}
            held = outcome.claims
            assert [len(claim.news or ()) for claim in held] == [10]
        assert {claim.id for claim in held} <= set(fresh)
        assert _scans(pg_url, store) == before
    finally:
        store.close()


def test_lookups_by_keys_scan_no_whole_table_once_it_has_grown(pg_url: str) -> None:
    """A run's inputs, a burst's results and the safety net's states are looked up by id or
    digest: used first on nearly empty tables, they still read only their rows once the
    tables hold thousands (a plan kept from the first uses read the whole table)."""
    store = PostgresStore(pg_url, pool_size=1)
    try:
        queue, artifacts = TaskQueue(store), PostgresArtifacts(store)
        digests = [artifacts.put(f"body {n}".encode()) for n in range(3)]
        artifacts.recent = RecentBodies(budget=0)  # every lookup goes to the database
        ids = [put(queue, f"t{n}") for n in range(3)]

        def look() -> None:
            assert set(artifacts.get_many(digests)) == set(digests)
            assert artifacts.missing(digests) == set()
            assert set(queue.finished_many(ids)) == set(ids)
            assert set(queue.states(ids)) == set(ids)

        for _ in range(15):  # prepared, then planned for good (after five custom plans)
            look()
        _grow(
            pg_url,
            "INSERT INTO artifacts (sha256, size, body, created_at)"
            " SELECT md5(n::text), 1, 'x', 0 FROM generate_series(1, 5000) n",
        )
        before = _scans(pg_url, store)
        for _ in range(4):
            look()
        assert _scans(pg_url, store) == before
    finally:
        store.close()
