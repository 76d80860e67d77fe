"""The PostgreSQL task queue on its own: idempotence, order, limits, fencing, hand-outs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from tests.storage.test_conformance import make_run

from interlock.distributed.queue import Q, TaskQueue
from interlock.storage.postgres import PostgresStore

ALL = ("command", "model", "call")


@pytest.fixture
def queue(pg_url: str) -> Iterator[TaskQueue]:
    """A queue on a fresh database."""
    store = PostgresStore(pg_url, pool_size=10)
    yield TaskQueue(store, max_deliveries=2)
    store.close()


def put(queue: TaskQueue, task: str, **fields: Any) -> int:
    """Enqueue attempt 1 of `task` in run r1 (pipeline p, kind call unless given)."""
    args: dict[str, Any] = {"kind": "call", "scopes": ["pipeline:p", "kind:call"], **fields}
    return queue.enqueue(run_id="r1", task_id=task, attempt=1, payload={"t": task}, **args)[0]


def take(queue: TaskQueue, name: str = "w", ttl: float = 30, **kw: Any) -> Any:
    """One claim with every kind and no tags unless given."""
    return queue.claim(name, kinds=kw.pop("kinds", ALL), tags=kw.pop("tags", ()), ttl=ttl, **kw)


def test_enqueue_is_idempotent_per_attempt(queue: TaskQueue) -> None:
    """Enqueueing the same attempt again returns the same entry and adds nothing."""
    first = put(queue, "a")
    assert put(queue, "a") == first
    assert take(queue).payload == {"t": "a"}
    assert take(queue) is None


def test_priority_then_age(queue: TaskQueue) -> None:
    """Higher priority is handed out first; equal priorities in enqueue order."""
    put(queue, "low", priority=0)
    put(queue, "high", priority=5)
    put(queue, "low2", priority=0)
    assert [take(queue).task_id for _ in range(3)] == ["high", "low", "low2"]


def test_kinds_and_tags_select_workers(queue: TaskQueue) -> None:
    """A worker only gets kinds it takes and tasks whose tags it offers."""
    put(queue, "gpu", tags=["gpu"])
    put(queue, "cmd", kind="command")
    assert take(queue, kinds=("call",)) is None
    assert take(queue, kinds=("call",), tags=("gpu", "big")).task_id == "gpu"
    assert take(queue, kinds=("command",)).task_id == "cmd"


def test_limit_holds_across_concurrent_claimers(queue: TaskQueue) -> None:
    """With `pipeline:p` capped at 2, racing claimers never hold more than 2 at once."""
    queue.set_limit("pipeline:p", 2)
    for i in range(10):
        put(queue, f"t{i}")
    put(queue, "other", scopes=["pipeline:q"])
    claims: list[Any] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        for _ in range(5):
            got = take(queue, f"w{n}")
            if got is not None:
                with lock:
                    claims.append(got)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    capped = [c for c in claims if c.task_id != "other"]
    assert len(capped) == 2 and "other" in {c.task_id for c in claims}
    assert take(queue) is None
    queue.finish(capped[0], {"ok": True}, None)
    assert take(queue) is not None and take(queue) is None
    queue.set_limit("pipeline:p", None)
    assert take(queue) is not None


def test_expired_hand_out_goes_to_another_worker_and_fences_the_first(queue: TaskQueue) -> None:
    """After expiry the entry is a new delivery; the first worker can neither renew nor finish."""
    put(queue, "a")
    first = take(queue, "slow", ttl=0.2)
    time.sleep(0.4)
    assert queue.sweep() == 1
    second = take(queue, "fast")
    assert (second.id, second.delivery) == (first.id, first.delivery + 1)
    assert not queue.heartbeat(first, 30)
    assert not queue.finish(first, {"ok": True}, None)
    assert queue.heartbeat(second, 30) and queue.finish(second, {"ok": True, "n": 2}, None)
    assert queue.get(first.id).result == {"ok": True, "n": 2}


def test_a_swept_hand_out_is_taken_back_by_its_holder_while_nobody_else_took_it(
    queue: TaskQueue,
) -> None:
    """A holder cut off past its lease (its heartbeats failed) renews the entry a sweep queued
    again, which then is nobody else's to claim; its result counts once."""
    put(queue, "a")
    held = take(queue, "cut-off", ttl=0.2)
    time.sleep(0.4)
    assert queue.sweep() == 1
    assert queue.heartbeat(held, 30, "cut-off")
    assert take(queue, "other") is None
    assert queue.get(held.id).state == "claimed" and queue.get(held.id).delivery == 1
    assert queue.finish(held, {"ok": True, "n": 1}, None, worker="cut-off")
    assert queue.get(held.id).result == {"ok": True, "n": 1}


def test_one_heartbeat_renews_every_hand_out_held_and_names_those_lost(
    queue: TaskQueue,
) -> None:
    """`heartbeat_many` renews the worker's hand-outs in one statement (also one a sweep
    queued again while nobody took it) and leaves out one that went to another worker."""
    for task in ("a", "b", "c"):
        put(queue, task)
    held = [take(queue, "w", ttl=0.2) for _ in range(3)]
    time.sleep(0.4)
    assert queue.sweep() == 3
    stolen = take(queue, "other")
    assert stolen.id == held[0].id
    assert queue.heartbeat_many(held, 30, "w") == {held[1].id, held[2].id}
    assert [queue.get(c.id).state for c in held] == ["claimed"] * 3
    assert queue.sweep() == 0  # renewed for 30 s


def test_a_hand_out_says_when_its_call_went_into_a_provider_batch_and_came_back(
    queue: TaskQueue,
) -> None:
    """`park` writes the wait on the current hand-out by the database's clock (and its end,
    keeping its start); a hand-out no longer current writes nothing."""
    put(queue, "a")
    first = take(queue)
    assert queue.park(first, "w", parked=True)
    entry = queue.get(first.id)
    assert entry.parked_at is not None and entry.unparked_at is None
    assert queue.park(first, "w", parked=False)
    back = queue.get(first.id)
    assert back.parked_at == entry.parked_at and (back.unparked_at or 0) >= entry.parked_at
    stale = replace(first, delivery=first.delivery + 1)
    assert not queue.park(stale, "w", parked=True)
    assert queue.watched([first.id]) == {
        first.id: ("claimed", 1, entry.parked_at, back.unparked_at)
    }


def test_too_many_lost_hand_outs_fail_the_attempt(queue: TaskQueue) -> None:
    """After `max_deliveries` expired hand-outs the entry ends as a retryable failure."""
    put(queue, "a")
    for _ in range(2):
        take(queue, ttl=0.1)
        time.sleep(0.2)
        queue.sweep()
    entry = queue.get(put(queue, "a"))
    assert entry.state == "done" and entry.result is not None
    assert entry.result["ok"] is False and entry.result["retryable"] is True


def test_cancel_stops_the_holder_and_enqueue_revives(queue: TaskQueue) -> None:
    """A cancelled entry fails its holder's heartbeat; enqueueing it again queues it anew."""
    entry = put(queue, "a")
    held = take(queue)
    assert queue.cancel("r1", "a", 1)
    assert not queue.heartbeat(held, 30) and queue.get(entry).state == "cancelled"
    assert put(queue, "a") == entry and queue.get(entry).state == "queued"
    assert take(queue).delivery == 2


def test_hand_back_makes_the_entry_claimable_again(queue: TaskQueue) -> None:
    """A worker shutting down hands its entry back for the next claimer."""
    put(queue, "a")
    held = take(queue, "leaving")
    queue.hand_back(held)
    assert take(queue, "staying").task_id == "a"


def test_prune_drops_only_finished_entries_of_ended_runs(queue: TaskQueue) -> None:
    """Finished entries of an ended run go once old enough; a live run's entries and
    unfinished ones stay, whatever their age."""
    store = queue.store
    for run_id in ("ended", "live"):
        make_run(store, run_id, at=time.time())
    store.single(
        lambda db: db.execute("UPDATE runs SET status = 'delivered' WHERE run_id = 'ended'")
    )

    def entry(run_id: str, task: str) -> int:
        return queue.enqueue(run_id=run_id, task_id=task, attempt=1, kind="call", payload={})[0]

    def finish(entry_id: int) -> None:
        held = take(queue, only=entry_id)
        assert held is not None and queue.finish(held, {"ok": True}, output=b"x")

    done, waiting, live = entry("ended", "a"), entry("ended", "b"), entry("live", "a")
    cancelled = entry("ended", "c")
    finish(done)
    finish(live)
    assert queue.cancel("ended", "c", 1)
    assert queue.prune(keep=3600) == 0  # all too recent
    time.sleep(0.05)
    assert queue.prune(keep=0) == 2
    left = queue.states([done, waiting, live, cancelled])
    assert set(left) == {waiting, live}
    assert queue.prune(keep=0) == 0


def test_several_entries_are_claimed_at_once_in_order(queue: TaskQueue) -> None:
    """A worker with free slots takes the best entries together; one under a limit is taken
    by counting under the limit's lock, and the limit still holds."""
    for task in ("a", "b", "c"):
        put(queue, task, scopes=["pipeline:p"])
    put(queue, "capped", scopes=["pipeline:capped"], priority=5)
    queue.set_limit("pipeline:capped", 0)
    got = queue.claim_many("w", kinds=ALL, tags=(), ttl=30, limit=2)
    assert [c.task_id for c in got] == ["a", "b"] and {c.delivery for c in got} == {1}
    queue.set_limit("pipeline:capped", 1)
    got = queue.claim_many("w", kinds=ALL, tags=(), ttl=30, limit=5)
    assert sorted(c.task_id for c in got) == ["c", "capped"]
    put(queue, "capped2", scopes=["pipeline:capped"])
    assert queue.claim_many("w", kinds=ALL, tags=(), ttl=30, limit=5) == []


def test_enqueue_many_queues_in_one_round_trip_and_is_idempotent(queue: TaskQueue) -> None:
    """Pipelined enqueueing returns each attempt's entry, queued once, in the order given;
    sending the same attempts again returns the same entries (one now held as claimed)."""
    entries = [
        {"run_id": "r1", "task_id": t, "attempt": 1, "kind": "call", "payload": {"t": t}}
        for t in ("a", "b", "c")
    ]
    first = queue.enqueue_many(entries)
    assert [state for _, state in first] == ["queued"] * 3
    assert len({entry_id for entry_id, _ in first}) == 3
    held = take(queue)
    assert held.task_id == "a"
    again = queue.enqueue_many(entries)
    assert [entry_id for entry_id, _ in again] == [entry_id for entry_id, _ in first]
    assert [state for _, state in again] == ["claimed", "queued", "queued"]
    assert queue.enqueue_many([]) == []


def test_enqueue_many_waits_for_no_lock_a_worker_holds(queue: TaskQueue) -> None:
    """Enqueueing again attempts whose entries a worker's turn has locked (a run taken over
    while its worker finishes) returns at once: the batch locks only the rows it adds, so
    it can close no lock cycle with that turn. It keeps each attempt's tags, scopes,
    priority and payload, and queues again an attempt cancelled since."""
    entries = [
        {
            "run_id": "r1",
            "task_id": t,
            "attempt": 1,
            "kind": "call",
            "tags": ["gpu"] if t == "b" else [],
            "scopes": ["pipeline:p", f"task:{t}"],
            "priority": 3 if t == "c" else 0,
            "payload": {"t": t, "n": [1, 2.5, None]},
        }
        for t in ("a", "b", "c")
    ]
    first = queue.enqueue_many(entries[:2])
    rows = queue.store.single(
        lambda db: db.execute(
            "SELECT task_id, tags, scopes, priority, payload FROM task_queue ORDER BY id"
        ).fetchall()
    )
    assert rows == [
        (e["task_id"], e["tags"], e["scopes"], e["priority"], e["payload"]) for e in entries[:2]
    ]
    done = threading.Event()
    found: list[Any] = []

    def enqueue() -> None:
        found.extend(queue.enqueue_many(entries))
        done.set()

    with queue.store.transaction() as db:
        db.execute("SELECT 1 FROM task_queue WHERE task_id = 'a' FOR UPDATE")
        threading.Thread(target=enqueue, daemon=True).start()
        returned = done.wait(5)
    done.wait(30)
    assert returned, "the batch waited for the row a worker's turn held"
    assert found[:2] == first and found[2][1] == "queued"
    assert queue.cancel("r1", "b", 1)
    assert queue.enqueue_many(entries[1:2]) == [(first[1][0], "queued")]
    assert take(queue, tags=("gpu",)).task_id == "c"


def test_a_turn_walks_the_ready_index_instead_of_sorting_the_backlog(
    queue: TaskQueue, pg_url: str
) -> None:
    """With many entries queued on a table the planner has no statistics for, a worker's
    turn takes the first entries of `task_queue_ready` in order, rather than fetching and
    sorting every queued entry (what it did: work per claim grew with the backlog). The
    plans are those PostgreSQL ran, as `auto_explain` reports them to this session."""
    queue.enqueue_many(
        [
            {"run_id": f"r{i}", "task_id": "t", "attempt": 1, "kind": "call", "payload": {}}
            for i in range(1000)
        ]
    )
    for _ in range(20):  # claimed entries leave dead index entries behind, as in a real queue
        queue.claim_many("w", kinds=ALL, tags=(), ttl=30, limit=1)
    args = {
        "kinds": list(ALL),
        "tags": [],
        "only": None,
        "older": None,
        "worker": "w",
        "ttl": 30,
        "n": 1,
        "out_shas": [],
        "out_bodies": [],
        "fin_ids": [],
        "fin_deliveries": [],
        "fin_results": [],
        "fin_shas": [],
        "known": "{}",
        "news": True,
        "limits": None,
        "holding": [],
    }
    for limits in (None, [0, 0, 1]):  # all kinds together, or claims by kind
        plans: list[str] = []
        with psycopg.connect(pg_url, autocommit=True) as db:

            def note(notice: psycopg.errors.Diagnostic, plans: list[str] = plans) -> None:
                plans.append(notice.message_primary or "")

            db.add_notice_handler(note)
            db.execute("LOAD 'auto_explain'")
            db.execute("SET auto_explain.log_min_duration = 0")
            db.execute("SET auto_explain.log_nested_statements = on")
            db.execute("SET client_min_messages = log")
            claimed = db.execute(Q["finish_claim"], {**args, "limits": limits}).fetchall()
        ran = "\n".join(plans)
        assert [row[0] for row in claimed] == ["claim"]
        assert "Index Scan using task_queue_ready" in ran
        assert "Sort Key: q.priority DESC, q.id" not in ran


def test_the_journals_a_hand_out_kept_go_to_the_next_and_back_with_a_give_up(
    queue: TaskQueue,
) -> None:
    """Journals kept by the current hand-out are in the payload of the next one; a stale
    holder's are refused; once the entry is given up (its workers kept dying) they come back
    with the failure, a journal of the payload left out by the worker kept as it was."""
    queue.enqueue(
        run_id="r1", task_id="a", attempt=1, kind="call", scopes=[],
        payload={"t": "a", "journals": {"a.jsonl": "sent\n"}},
    )  # fmt: skip
    first = take(queue, "first", ttl=0.2)
    assert queue.keep_journals(first, {"a.calls.jsonl": "call 1\n"}, "first")
    time.sleep(0.4)
    assert queue.sweep() == 1
    second = take(queue, "second", ttl=0.2)
    assert second.payload["journals"] == {"a.jsonl": "sent\n", "a.calls.jsonl": "call 1\n"}
    assert not queue.keep_journals(first, {"a.calls.jsonl": "stale\n"}, "first")
    assert queue.keep_journals(second, {"a.calls.jsonl": "call 1\ncall 2\n"}, "second")
    time.sleep(0.4)
    assert queue.sweep() == 1  # the second delivery of two: given up
    result = queue.get(second.id).result
    assert result is not None and result["ok"] is False
    assert result["journals"] == {"a.jsonl": "sent\n", "a.calls.jsonl": "call 1\ncall 2\n"}
