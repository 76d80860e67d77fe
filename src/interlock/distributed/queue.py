"""The task queue in PostgreSQL: recorded attempts waiting for, or held by, remote workers.

An entry is one attempt of one task (unique on run, task, attempt), so enqueueing again after
a restart is harmless. A worker claims an entry with `FOR UPDATE SKIP LOCKED` and holds it
with a lease it renews; every hand-out increments `delivery`, and a worker's heartbeat and
result only count while `delivery` still matches (a worker presumed dead cannot overwrite
the result of the worker the entry was handed to next).

When a hand-out expires the entry is handed out again as a new delivery of the same attempt,
so an infrastructure failure does not use up the workflow's retry budget. After
`max_deliveries` hand-outs it is finished as a retryable failure instead, and the engine
decides about a new attempt as for any other failure.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from interlock.distributed.sql import by_keys, queue_queries
from interlock.storage import codec
from interlock.storage.base import StoredEvent
from interlock.storage.postgres import PostgresStore
from interlock.storage.rows import event_from_row

log = logging.getLogger("interlock.distributed")
Q = queue_queries()
# Notification payloads are "<entry id>:<state>[:<worker>]" (the worker once claimed).
CHANNEL = "interlock_tasks"  # entries queued (what workers listen for)
STATES = "interlock_task_states"  # entries claimed, done or cancelled (what waiters listen for)


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """An entry handed to one worker; `delivery` fences its heartbeats and result."""

    id: int
    run_id: str
    task_id: str
    attempt: int
    delivery: int
    payload: dict[str, Any]
    # What the ledger recorded for the run after seq `news_since`, read with the claim (None:
    # not read; the worker asks the ledger itself).
    news: tuple[StoredEvent, ...] | None = field(default=None, compare=False)
    news_since: int = 0
    kind: str = ""  # command, model or call (empty from a server before `015_kind_slots`)


@dataclass(frozen=True, kw_only=True, slots=True)
class Finished:
    """A result a worker reports: for `claim`, with its output's body (stored as an artifact
    of the queue's database by the statement that records the result) or None."""

    claim: Claim
    result: dict[str, Any]
    output: bytes | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """What one `finish_claim` round trip did: the finished entries it recorded (the others
    were no longer current) and the entries it handed to the worker."""

    recorded: frozenset[int]
    claims: list[Claim]


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """What the orchestrator side sees of an entry."""

    id: int
    state: str  # queued, claimed, done, cancelled
    worker: str | None
    delivery: int
    result: dict[str, Any] | None
    output_sha: str | None
    # When the hand-out's model call last went into a provider batch, and came back (the
    # database's clock; None: not parked, or not come back yet). See `TaskQueue.park`.
    parked_at: float | None = None
    unparked_at: float | None = None


class TaskQueue:
    """Queue operations over the ledger's connection pool (the same database)."""

    def __init__(self, store: PostgresStore, *, max_deliveries: int = 3) -> None:
        self.store = store
        self.max_deliveries = max_deliveries

    # -- the orchestrator side ----------------------------------------------------------------

    def enqueue(
        self,
        *,
        run_id: str,
        task_id: str,
        attempt: int,
        kind: str,
        payload: dict[str, Any],
        tags: Sequence[str] = (),
        scopes: Sequence[str] = (),
        priority: int = 0,
    ) -> tuple[int, str]:
        """Add the attempt (once; a cancelled entry is queued again); returns (id, state):
        `queued` unless the attempt was enqueued before and is held (`claimed`) or finished
        (`done`) already."""
        args = {
            "run_id": run_id,
            "task_id": task_id,
            "attempt": attempt,
            "kind": kind,
            "tags": list(tags),
            "scopes": list(scopes),
            "priority": priority,
            "payload": Jsonb(payload),
        }

        def enqueue(db: psycopg.Connection[Any]) -> tuple[int, str]:
            row = db.execute(Q["enqueue"], args).fetchone()
            assert row is not None
            return int(row[0]), str(row[1])

        return self.store.single(enqueue)

    def enqueue_many(self, entries: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
        """`enqueue` for many attempts (keyword arguments of `enqueue` each) in one statement
        and one commit: a tick's dispatches cost the server one transaction, not one each.

        The statement adds only attempts not enqueued before and locks nothing else (see
        `enqueue_many` in `queue.sql`), so it waits for no worker and no other batch; the
        rare attempt it cannot settle (cancelled, to be queued again, or enqueued by
        someone else meanwhile) goes through `enqueue` on its own. Atomic and idempotent:
        sending it again after a broken connection is harmless."""
        if not entries:
            return []
        rows = [
            {
                "run_id": entry["run_id"],
                "task_id": entry["task_id"],
                "attempt": entry["attempt"],
                "kind": entry["kind"],
                "tags": list(entry.get("tags", ())),
                "scopes": list(entry.get("scopes", ())),
                "priority": entry.get("priority", 0),
                "payload": entry["payload"],
            }
            for entry in entries
        ]
        query, args = Q["enqueue_many"], {"entries": Jsonb(rows)}
        found = self.store.single(lambda db: db.execute(query, args).fetchall())
        settled: list[tuple[int, str]] = []
        for (_, entry_id, state), entry in zip(found, entries, strict=True):
            if entry_id is None or state == "cancelled":
                settled.append(self.enqueue(**entry))
            else:
                settled.append((int(entry_id), str(state)))
        return settled

    def get(self, entry_id: int) -> Entry:
        """One entry as it stands."""
        rows = self.store.single(lambda db: db.execute(Q["get"], (entry_id,)).fetchall())
        return _entry(rows[0])

    def finished_many(self, ids: Sequence[int]) -> dict[int, tuple[Entry, bytes | None]]:
        """`finished` for many entries in one query (those that exist)."""
        query = Q["get_many_with_output"]
        rows = self.store.single(lambda db: by_keys(db, query, ids))
        found = {}
        for *entry, body in rows:
            found[int(entry[0])] = (_entry(entry), None if body is None else bytes(body))
        return found

    def states(self, ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """(state, delivery) of many entries in one query."""
        rows = self.store.single(lambda db: by_keys(db, Q["states"], ids))
        return {int(r[0]): (str(r[1]), int(r[2])) for r in rows}

    def watched(self, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """(state, delivery, parked_at, unparked_at) of many entries in one query (the
        safety-net poll of orchestrators waiting on them)."""
        rows = self.store.single(lambda db: by_keys(db, Q["watched"], ids))
        return {int(r[0]): tuple(r[1:]) for r in rows}

    def cancel(self, run_id: str, task_id: str, attempt: int) -> bool:
        """Withdraw an attempt nobody wants any more; a worker running it stops."""

        def cancel(db: psycopg.Connection[Any]) -> bool:
            row = db.execute(Q["cancel"], (run_id, task_id, attempt)).fetchone()
            if row is not None:
                db.execute(Q["notify"], (STATES, f"{row[0]}:cancelled"))
            return row is not None

        return self.store.retrying(cancel)

    def set_limit(self, scope: str, max_running: int | None) -> None:
        """Cap entries of `scope` (pipeline:x, kind:y, model:z) held at once by all workers."""
        if max_running is None:
            self.store.retrying(lambda db: db.execute(Q["drop_limit"], (scope,)))
        else:
            self.store.retrying(lambda db: db.execute(Q["set_limit"], (scope, max_running)))

    # -- the worker side ----------------------------------------------------------------------

    def claim(
        self,
        worker: str,
        *,
        kinds: Sequence[str],
        tags: Sequence[str],
        ttl: float,
        only: int | None = None,
        holding: Collection[int] = (),
    ) -> Claim | None:
        """Take the best queued entry this worker can run (or entry `only`), honouring the
        concurrency limits; None when there is nothing to take now. Entries in `holding`
        (those the worker is running or has results for) are never handed to it again."""
        got = self.claim_many(
            worker, kinds=kinds, tags=tags, ttl=ttl, limit=1, only=only, holding=holding
        )
        return got[0] if got else None

    def claim_many(
        self,
        worker: str,
        *,
        kinds: Sequence[str],
        tags: Sequence[str],
        ttl: float,
        limit: int = 0,
        only: int | None = None,
        older: float | None = None,
        per_kind: Mapping[str, int] | None = None,
        holding: Collection[int] = (),
    ) -> list[Claim]:
        """Take up to `limit` of the best queued entries this worker can run, honouring the
        concurrency limits (fewer, or none, when there are fewer to take now).

        Entries whose scopes have no limit (the usual case) are claimed by one statement; if
        some of the best are under a limit, one more is claimed by a transaction that counts
        under the limit's lock. With `older`, only entries that have waited that many
        seconds since they were queued or last handed out (stragglers) are taken. With
        `per_kind` (kind -> count), up to so many of each kind instead (`kinds` and `limit`
        are then its own)."""
        turn = self.finish_claim(
            worker,
            (),
            kinds=kinds,
            tags=tags,
            ttl=ttl,
            limit=limit,
            only=only,
            older=older,
            per_kind=per_kind,
            holding=holding,
        )
        return turn.claims

    def finish_claim(
        self,
        worker: str,
        finished: Sequence[Finished],
        *,
        kinds: Sequence[str],
        tags: Sequence[str],
        ttl: float,
        limit: int = 0,
        known: Mapping[str, int] | None = None,
        only: int | None = None,
        older: float | None = None,
        per_kind: Mapping[str, int] | None = None,
        holding: Collection[int] = (),
    ) -> Turn:
        """Record `finished` results and claim up to `limit` entries (0: only finish), or up
        to `per_kind[k]` of each kind k, in one statement as a rule: a worker's whole turn
        costs one round trip.

        Each result counts only while its hand-out is current (`delivery`); the others are
        left out of `recorded`. With `known` (run id -> the last seq the caller has read of
        it), each claim carries the run's events after that seq (`Claim.news`, all of them
        for a run not named), so the caller can tell whether the attempt is still wanted
        without asking the ledger again. Concurrency limits are honoured as in `claim_many`:
        an entry under a limit is claimed by a transaction of its own after the statement.
        Entries in `holding` (the worker's, being run or with results still to record) are
        not claimed again: one a sweep queued again is taken back by its result or heartbeat
        (see `heartbeat`)."""
        outputs: dict[str, bytes] = {}
        shas: list[str | None] = []
        for item in finished:
            if item.output is None:
                shas.append(None)
            else:
                sha = hashlib.sha256(item.output).hexdigest()
                outputs[sha] = item.output
                shas.append(sha)
        runs = dict(known or {})
        limits = None
        if per_kind is not None:
            kinds = [kind for kind, count in per_kind.items() if count > 0]
            limits = [per_kind[kind] for kind in kinds]
            limit = sum(limits)
        args = {
            "kinds": list(kinds),
            "limits": limits,
            "tags": list(tags),
            "only": only,
            "older": older,
            "worker": worker,
            "ttl": ttl,
            "n": max(0, limit),
            "out_shas": list(outputs),
            "out_bodies": list(outputs.values()),
            "fin_ids": [item.claim.id for item in finished],
            "fin_deliveries": [item.claim.delivery for item in finished],
            "fin_results": [Jsonb(item.result) for item in finished],
            "fin_shas": shas,
            # One JSON text, not two arrays: it costs the worker a fraction of the encoding.
            "known": codec.dumps(runs) if known is not None else "{}",
            "news": known is not None,
            "holding": list(holding),
        }
        rows = self.store.single(lambda db: db.execute(Q["finish_claim"], args).fetchall())
        recorded = frozenset(int(row[1]) for row in rows if row[0] == "done")
        news: dict[str, list[StoredEvent]] = {}
        for row in rows:
            if row[0] == "event":
                event = event_from_row((row[1], row[3], *row[8:]), row[11])
                news.setdefault(event.run_id, []).append(event)
        claims: list[Claim] = []
        limited = 0
        for row in rows:
            if row[0] != "claim":
                continue
            if row[2]:
                limited += 1
                continue
            claim = _claim(row[1], (*row[3:8], row[10]))
            if known is not None:
                seen = sorted(news.get(claim.run_id, ()), key=lambda e: e.seq)
                claim = replace(claim, news=tuple(seen), news_since=runs.get(claim.run_id, 0))
            claims.append(claim)
        if per_kind is not None:  # the extra entry only of a kind with room left
            taken = Counter(claim.kind for claim in claims)
            kinds = [kind for kind in kinds if per_kind[kind] > taken[kind]]
        if not limited or len(claims) >= limit or not kinds:
            return Turn(recorded=recorded, claims=claims)
        extra = self._claim_limited(
            worker, kinds=kinds, tags=tags, ttl=ttl, only=only, older=older, holding=holding
        )
        return Turn(recorded=recorded, claims=claims if extra is None else [*claims, extra])

    def _claim_limited(
        self,
        worker: str,
        *,
        kinds: Sequence[str],
        tags: Sequence[str],
        ttl: float,
        only: int | None,
        older: float | None,
        holding: Collection[int],
    ) -> Claim | None:
        """One entry under a concurrency limit, counted under the limit's lock."""
        args = {
            "kinds": list(kinds),
            "tags": list(tags),
            "only": only,
            "older": older,
            "holding": list(holding),
        }

        def claim(db: psycopg.Connection[Any]) -> Claim | None:
            row = db.execute(Q["candidates"], args).fetchone()
            if row is None:
                return None
            entry_id, scopes = row
            # Claimers of a limited scope queue up on its limit row, then count again: the
            # count in the candidate query may predate a claim that just committed.
            for scope, max_running in db.execute(Q["lock_limits"], (scopes,)).fetchall():
                running = db.execute(Q["running_in_scope"], (scope,)).fetchone()
                if running is not None and running[0] >= max_running:
                    return None
            got = db.execute(Q["claim"], (worker, ttl, entry_id)).fetchone()
            assert got is not None
            db.execute(Q["notify"], (STATES, f"{entry_id}:claimed:{worker}"))
            return _claim(entry_id, got[1:])

        return self.store.retrying(claim)

    def heartbeat(self, claim: Claim, ttl: float, worker: str | None = None) -> bool:
        """Extend the hand-out; False when it was lost (expired and handed on, or cancelled).

        A hand-out that expired while `worker` (its holder) could not reach the database, and
        that a sweep queued again, is taken back as long as nobody else has claimed it."""
        args = (ttl, claim.id, claim.delivery, worker)
        return bool(self.store.single(lambda db: db.execute(Q["heartbeat"], args).rowcount))

    def keep_journals(self, claim: Claim, journals: dict[str, str], worker: str) -> bool:
        """Keep `journals` (by file name) in the entry's payload while `claim` is its
        current hand-out, so that its next hand-out (its worker died) replays what this
        one was answered; False when the hand-out is no longer current (`worker`, its
        holder, still counts as current after a sweep: see `heartbeat`)."""
        args = (Jsonb(journals), claim.id, claim.delivery, worker)
        return bool(self.store.single(lambda db: db.execute(Q["keep_journals"], args).rowcount))

    def heartbeat_many(self, claims: Sequence[Claim], ttl: float, worker: str) -> set[int]:
        """`heartbeat` for all of `claims` in one statement; the ids of those still held (the
        others were lost)."""
        if not claims:
            return set()
        args = {
            "ids": [claim.id for claim in claims],
            "deliveries": [claim.delivery for claim in claims],
            "ttl": ttl,
            "worker": worker,
        }
        rows = self.store.single(lambda db: db.execute(Q["heartbeat_many"], args).fetchall())
        return {int(row[0]) for row in rows}

    def park(self, claim: Claim, worker: str, *, parked: bool) -> bool:
        """Record on the current hand-out that its model call went into a provider batch
        (`parked`) or came back, and announce it to the orchestrators waiting on the entry;
        False when the hand-out is no longer current."""
        args = {"id": claim.id, "delivery": claim.delivery, "worker": worker, "parked": parked}
        return self.store.single(lambda db: db.execute(Q["park"], args).fetchone() is not None)

    def finish(
        self,
        claim: Claim,
        result: dict[str, Any],
        output_sha: str | None = None,
        *,
        output: bytes | None = None,
        worker: str | None = None,
    ) -> bool:
        """Record the result; False (nothing written) if this hand-out is no longer current
        (still `worker`'s after a sweep queued it again counts as current: see `heartbeat`).

        `output_sha` names an output already stored; `output` is stored as an artifact of
        this database by the same statement."""
        if output is not None:
            output_sha = hashlib.sha256(output).hexdigest()
            query = Q["finish_with_output"]
            args: tuple[Any, ...] = (
                output_sha,
                len(output),
                output,
                Jsonb(result),
                output_sha,
                claim.id,
                claim.delivery,
                worker,
            )
        else:
            query = Q["finish"]
            args = (Jsonb(result), output_sha, claim.id, claim.delivery, worker)
        return self.store.single(lambda db: db.execute(query, args).fetchone() is not None)

    def hand_back(self, claim: Claim) -> None:
        """Return an entry unfinished (a worker shutting down), for another worker to take."""

        def hand_back(db: psycopg.Connection[Any]) -> None:
            if db.execute(Q["requeue"], (claim.id, claim.delivery)).rowcount:
                db.execute(Q["notify"], (CHANNEL, f"{claim.id}:queued"))

        self.store.retrying(hand_back)

    def sweep(self) -> int:
        """Hand out again entries whose worker stopped renewing (give up after
        `max_deliveries`); returns how many were touched. Any worker may run it."""

        def sweep(db: psycopg.Connection[Any]) -> int:
            touched = 0
            for entry_id, delivery in db.execute(Q["expired"]).fetchall():
                if delivery >= self.max_deliveries:
                    error = f"lost its worker {delivery} times (worker processes died or hung)"
                    result = Jsonb({"ok": False, "error": error, "retryable": True})
                    db.execute(Q["give_up"], (result, entry_id, delivery))
                    db.execute(Q["notify"], (STATES, f"{entry_id}:done"))
                else:  # its holder may still take it back while nobody else has
                    db.execute(Q["requeue_expired"], (entry_id, delivery))
                    db.execute(Q["notify"], (CHANNEL, f"{entry_id}:queued"))
                touched += 1
            if touched:
                log.info("handed out again %d expired task(s)", touched)
            return touched

        return self.store.retrying(sweep)

    def queued_ids(self, limit: int = 100_000) -> list[int]:
        """Ids of the entries waiting for a worker, best first."""
        rows = self.store.single(lambda db: db.execute(Q["queued_ids"], (limit,)).fetchall())
        return [int(r[0]) for r in rows]

    def withdraw_ended(self) -> int:
        """Cancel entries still queued for runs that have ended; returns how many."""
        return self.store.single(lambda db: db.execute(Q["withdraw_ended"]).rowcount)

    def prune(self, keep: float, *, limit: int = 10_000) -> int:
        """Delete up to `limit` entries of ended runs finished more than `keep` seconds ago
        (transport state only: what they reported is in the ledger); returns how many."""
        args = {"keep": keep, "limit": limit}
        return self.store.single(lambda db: db.execute(Q["prune"], args).rowcount)


def _entry(row: Sequence[Any]) -> Entry:
    i, state, worker, delivery, result, sha, *parks = row
    parked_at, unparked_at = parks if parks else (None, None)
    return Entry(
        id=i,
        state=state,
        worker=worker,
        delivery=delivery,
        result=result,
        output_sha=sha,
        parked_at=parked_at,
        unparked_at=unparked_at,
    )


def _claim(entry_id: int, row: Sequence[Any]) -> Claim:
    run_id, task_id, attempt, delivery, payload, kind = row
    return Claim(
        id=entry_id,
        run_id=run_id,
        task_id=task_id,
        attempt=attempt,
        delivery=delivery,
        payload=payload,
        kind=kind or "",
    )


def parse_notification(payload: str) -> tuple[int, str, str] | None:
    """(entry id, state, worker) of a queue notification ("<id>:<state>[:<worker>]"; the
    worker is named when the state is `claimed`)."""
    entry, _, rest = payload.partition(":")
    state, _, worker = rest.partition(":")
    return (int(entry), state, worker) if entry.isdigit() else None
