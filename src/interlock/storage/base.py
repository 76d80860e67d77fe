"""The storage contract: what the runtime needs from a ledger, whatever holds it.

Every backend (SQLite, PostgreSQL, in-memory) implements `Store` and passes the same
conformance suite (`tests/storage/`). Dialect differences stay inside each backend.

Guarantees every backend gives:
- Events of a run are numbered 1, 2, 3... without gaps; an append is all-or-nothing.
- Only the holder of a run's current lease may append, checked in the same transaction as the
  append: a holder whose lease expired or was taken over gets `LeaseLost` and nothing is written.
- Fencing tokens only grow, so a stale holder can never be confused with the current one.
- A person's command is consumed in the same transaction as the event it led to, so a crash
  never records it twice or loses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from interlock.errors import DamagedHistory, LeaseLost
from interlock.storage import chain, codec
from interlock.storage.run_list import RunQuery

if TYPE_CHECKING:
    # The event types are imported where events are encoded or decoded: listing runs needs
    # none of them, and defining them costs a good part of a command's start.
    from interlock.core.events import Event
    from interlock.core.state import RunState


# `interlock.core.events.to_record`, imported at the first event encoded rather than in each
# call: an import statement in a function costs about 7,000 instructions each time it runs,
# even of a module already loaded, and every event appended is encoded here (the event types
# are not imported with this module: see above).
_to_record: Callable[[Event], tuple[str, dict[str, Any]]] | None = None


def _record_of(event: Event) -> tuple[str, dict[str, Any]]:
    global _to_record
    if _to_record is None:
        from interlock.core.events import to_record

        _to_record = to_record
    return _to_record(event)


@dataclass(frozen=True, kw_only=True, slots=True)
class NewEvent:
    """An event to append, with the rule that decided it (None for observations)."""

    event: Event
    rule: str | None = None
    why: str | None = None

    def record(self) -> tuple[str, str]:
        """(kind, JSON data) as stored."""
        kind, data = _record_of(self.event)
        return kind, codec.dumps(data)

    def stamped(self) -> tuple[str, str, str]:
        """(kind, JSON data, content digest): the record and what its chain link covers."""
        kind, data = _record_of(self.event)
        text = codec.dumps(data)
        # Digested as it reads back (not as built), so that what is hashed is what is stored:
        # `digest_record` proves the two the same before it takes the values as built.
        content = chain.digest_record(self.event.at, kind, data, text, self.rule, self.why)
        return kind, text, content


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredEvent:
    """An event as read back, with its place in the run (`seq`) and in the store (`id`)."""

    id: int
    run_id: str
    seq: int
    at: float
    kind: str
    data: dict[str, Any]
    rule: str | None = None
    why: str | None = None
    hash: str | None = None  # the chain link (None: recorded before the chain existed)

    @property
    def event(self) -> Event:
        """The typed event.

        Raises:
            DamagedHistory: the record cannot be decoded (a damaged or changed ledger, or
                one written by a newer interlock), naming the run and the event.
        """
        from interlock.core.events import from_record

        try:
            return from_record(self.kind, self.data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise damaged_history(self.run_id, self.seq, str(self.kind), str(exc)) from None


def damaged_history(run_id: str, seq: int | None, kind: str, why: str) -> DamagedHistory:
    """The error for event `seq` of `run_id` that cannot be read, with what to do."""
    at = f" at event {seq}" if seq is not None else ""
    why = why.removesuffix(" (written by a newer interlock?)")
    what = f" ({kind})" if kind else ""
    return DamagedHistory(
        run_id,
        seq,
        f"run {run_id}: its history cannot be read{at}{what}: {why}. If a newer interlock "
        "wrote it, read it with that version; otherwise the ledger was damaged or changed: "
        f"`interlock verify {run_id}` says whether its hash chain holds and "
        "`interlock doctor` what is affected and how to recover the ledger",
    )


def fold_history(events: Sequence[StoredEvent]) -> RunState:
    """The state a run's stored history leads to.

    Raises:
        DamagedHistory: an event cannot be decoded, or holds a value folding cannot take
            (a time out of range, a field of the wrong type); the error names it.
    """
    from interlock.core.state import RunState, apply

    state = RunState()
    for stored in events:
        event = stored.event
        try:
            apply(state, event)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise damaged_history(
                stored.run_id, stored.seq, str(stored.kind), f"{type(exc).__name__}: {exc}"
            ) from None
    return state


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """What listings show, kept beside the history and updated with every append."""

    status: str
    phase: str | None
    cost_usd: float = 0.0
    tokens: int = 0
    warnings: int = 0
    updated_at: float = 0.0
    # It only waits for provider-batch answers (`core.state.batch_parked`): a batch driver
    # does not count its row against `--concurrency`.
    batch_parked: bool = False
    # Some call's tokens, so the cost, were estimated (the server reported no usage).
    estimated: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """A run as listed: identity, pinned definition, summary and lease."""

    run_id: str
    pipeline: str
    topic: str
    definition_hash: str
    created_at: float
    last_seq: int
    summary: RunSummary
    source: str = ""
    lease_owner: str | None = None
    lease_expires: float | None = None
    lease_acquired_at: float | None = None  # when the current driver took the run over
    lease_renewed_at: float | None = None  # the driver's last heartbeat


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """The right to append to one run until `expires_at`, identified by a fencing token."""

    run_id: str
    owner: str
    token: int
    expires_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandRecord:
    """A person's command waiting in a run's inbox."""

    id: int
    run_id: str
    kind: str
    message: str = ""
    by: str = ""
    created_at: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRegistration:
    """A new run, registered in the same transaction as its first events."""

    run_id: str
    pipeline: str
    topic: str
    definition_hash: str
    definition: str  # canonical JSON, stored once per hash
    source: str
    created_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheEntry:
    """A completed task in the cache index: where its output is, by fingerprint."""

    fingerprint: str
    run_id: str
    task_id: str
    artifact: str
    sha256: str
    size: int
    values: dict[str, Any] = field(default_factory=dict)
    completed_at: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class AppendBatch:
    """One run's part of a group commit.

    `artifacts` are small outputs stored content-addressed in the same transaction as the
    completions that name them, so their durability costs no fsync of their own. `cache`
    entries index completions of cached workers in the same transaction too: a completion is
    never recorded without its entry (a crash in between would cost the next run the call).

    With `register`, the run is created by this very batch: its row, its pinned definition
    and its lease (held by `lease.owner` with `lease.token`, normally 1) are written in the same
    transaction as its first events, so a run exists only with a history.
    """

    lease: Lease
    events: Sequence[NewEvent]
    summary: RunSummary
    consumed: Sequence[int] = field(default_factory=tuple)
    register: RunRegistration | None = None
    artifacts: Sequence[tuple[str, bytes]] = field(default_factory=tuple)  # (sha256, body)
    cache: Sequence[CacheEntry] = field(default_factory=tuple)


@dataclass(frozen=True, kw_only=True, slots=True)
class OutboxItem:
    """A notification waiting to be sent to one sink; `key` is its idempotency key."""

    key: str
    sink: str
    run_id: str
    payload: dict[str, Any]
    created_at: float = 0.0
    attempts: int = 0  # sends tried so far (including the one a claim starts)
    delivered_at: float | None = None
    last_error: str | None = None


ENDED_STATUSES = ("delivered", "failed", "cancelled")  # runs nothing more happens to


@dataclass(frozen=True, kw_only=True, slots=True)
class PrunedRun:
    """The receipt a pruned run leaves: what it was and where its hash chain ended, so that a
    copy of its history kept elsewhere (`interlock export`) can still be matched to it."""

    run_id: str
    pipeline: str
    status: str
    created_at: float
    ended_at: float
    last_seq: int
    chain_head: str | None  # the hash of its last event (None: recorded before the chain)
    pruned_at: float


def receipt_from_row(row: Sequence[Any]) -> PrunedRun:
    """A receipt from its columns (run_id, pipeline, status, created_at, ended_at, last_seq,
    chain_head, pruned_at)."""
    run_id, pipeline, status, created_at, ended_at, last_seq, head, pruned_at = row
    return PrunedRun(
        run_id=str(run_id),
        pipeline=str(pipeline),
        status=str(status),
        created_at=float(created_at),
        ended_at=float(ended_at),
        last_seq=int(last_seq),
        chain_head=None if head is None else str(head),
        pruned_at=float(pruned_at),
    )


class Store(Protocol):
    """A durable ledger of runs. Methods are synchronous and safe to call from one thread."""

    def create_run(
        self,
        *,
        run_id: str,
        pipeline: str,
        topic: str,
        definition_hash: str,
        definition: str,
        source: str,
        created_at: float,
    ) -> None:
        """Register a new run and pin its definition (canonical JSON, stored once per hash)."""
        ...

    def definition(self, definition_hash: str) -> str:
        """The canonical JSON of a pinned definition."""
        ...

    def acquire_lease(
        self, run_id: str, owner: str, ttl: float, now: float, *, take_over_from: str | None = None
    ) -> Lease:
        """Take the run's lease if free, expired, ours, or held by `take_over_from`.

        Raises:
            LeaseHeld: another owner holds an unexpired lease.
        """
        ...

    def renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        """Extend a lease we still hold (raises LeaseLost otherwise)."""
        ...

    def take_slot(self, run_id: str, key: str, limit: int, now: float) -> bool:
        """Give the run one of the `limit` slots of concurrency key `key`, atomically.

        True when it holds one (also when it did already). False when live runs of the key
        hold `limit` slots, or, with the ones that are free, runs of the key that wait with a
        current lease and were created earlier go first: within a key, runs start in order.
        The run is marked as waiting on `key` either way; it keeps its slot until it ends.
        """
        ...

    def take_task_slot(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        key: str,
        limit: int,
        asked_at: float,
        now: float,
    ) -> bool:
        """Give the task's attempt one of the `limit` slots of task concurrency key `key`.

        True when it holds one (also when it did already). False when attempts of live runs
        hold `limit` slots of the key (a run whose orchestrator died keeps its slots until it
        is taken up again), or, with the ones that are free, attempts of live runs with a
        current lease that began waiting before `asked_at` go first (oldest first within a
        key). Either way the attempt is recorded as waiting on or holding the key; a new
        attempt of the task replaces the previous one's row.
        """
        ...

    def keep_task_slots(self, run_id: str, keep: Mapping[str, int]) -> None:
        """Forget the run's task-slot rows except those of `keep` (task id -> attempt): the
        attempts that ended free their slots, and a run reloaded from its ledger drops what
        an orchestrator that died did not get to release."""
        ...

    def artifact(self, sha256: str) -> bytes | None:
        """The body of an output stored with its completion (None if it was not stored)."""
        ...

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float, now: float
    ) -> list[Lease | LeaseLost]:
        """Extend many leases in one transaction; each lost one comes back as LeaseLost."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up early so another orchestrator need not wait for it to expire."""
        ...

    def release_leases(self, leases: Sequence[Lease]) -> None:
        """Release many leases in one transaction (those no longer held are left alone).

        An ended run whose lease is released was fully acted on (delivered, archived); one
        still holding an expired lease was not, and is worth taking over.
        """
        ...

    def append(self, batch: AppendBatch, now: float) -> int:
        """Append one run's events atomically; returns the run's last seq."""
        ...

    def append_many(
        self, batches: Sequence[AppendBatch], now: float, *, releases: Sequence[Lease] = ()
    ) -> list[int | Exception]:
        """Group commit: one transaction for many runs; a run whose lease was lost gets its
        `LeaseLost` in the result list and the others still commit. `releases` (leases of
        ended runs, as in `release_leases`) are released in the same transaction."""
        ...

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """A run's events with seq > since, in order."""
        ...

    def all_events(self, after_id: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Events of every run with id > after_id, in commit order (for live feeds)."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """One run (raises RunNotFound)."""
        ...

    def find_runs(self, prefix: str) -> list[str]:
        """Ids of runs starting with `prefix` (at most a few, for ambiguity messages)."""
        ...

    def list_runs(
        self, *, status: str | None = None, pipeline: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered."""
        ...

    def search_runs(self, query: RunQuery) -> list[RunRecord]:
        """One page of the runs list: `query`'s filters, search and sort, after its cursor."""
        ...

    def count_runs(self) -> dict[str, int]:
        """How many runs the store holds, by status (statuses with none are left out)."""
        ...

    def prunable_runs(
        self, before: float, statuses: Sequence[str], now: float, limit: int
    ) -> list[str]:
        """Ids of ended runs in `statuses` last changed before `before` and no longer leased,
        oldest first: what `prune_runs` may remove."""
        ...

    def prune_runs(self, run_ids: Sequence[str], now: float) -> tuple[list[PrunedRun], set[str]]:
        """Remove these runs whole, in one transaction: their events, commands, notifications,
        cache entries and queued tasks, leaving a receipt for each. A run that is not ended,
        or is leased again, is kept. Returns the receipts, and the stored outputs the removed
        runs named (for `drop_artifacts`: other runs may name them too)."""
        ...

    def drop_artifacts(self, candidates: set[str]) -> int:
        """Delete the stored outputs among `candidates` that no event names; how many."""
        ...

    def pruned_run(self, run_id: str) -> PrunedRun | None:
        """The receipt of a pruned run (None if it was never pruned)."""
        ...

    def post_command(self, run_id: str, kind: str, message: str, by: str, now: float) -> int:
        """Put a person's command in the run's inbox; returns its id."""
        ...

    def pending_commands(self, run_id: str | None = None) -> list[CommandRecord]:
        """Commands not yet consumed, oldest first (of one run, or of all runs)."""
        ...

    def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        """Index completed tasks by fingerprint (one already indexed is left as it is)."""
        ...

    def cache_find(self, fingerprint: str, since: float, limit: int = 5) -> list[CacheEntry]:
        """Indexed tasks with this fingerprint completed at or after `since`, newest first."""
        ...

    def cache_list(self, limit: int = 100) -> list[CacheEntry]:
        """The newest entries of the cache index."""
        ...

    def cache_clear(self, before: float | None = None) -> int:
        """Forget entries completed before `before` (all when None); returns how many.

        Only the index: the runs and their outputs stay as they are.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...

    def event_cursor(self, name: str) -> int:
        """Where the named consumer of `all_events` stopped (an event id; 0 when new)."""
        ...

    def outbox_enqueue(
        self, cursor: str, position: int, items: Sequence[OutboxItem], now: float
    ) -> None:
        """In one transaction: add `items` (a key already present is kept, not replaced) and
        move the cursor `cursor` to `position` (never backwards), so a consumer that crashes
        half-way neither loses a notification nor queues one twice."""
        ...

    def outbox_claim(
        self, owner: str, now: float, hold: float, limit: int = 20
    ) -> list[OutboxItem]:
        """Undelivered items that are due, claimed for `owner` until `now + hold` so that of
        several senders sharing the store only one sends each; `attempts` counts this one."""
        ...

    def outbox_settle(
        self,
        key: str,
        owner: str,
        now: float,
        *,
        error: str | None = None,
        retry_at: float | None = None,
    ) -> None:
        """Record how a claimed send went: delivered when `error` is None, else due again at
        `retry_at` (None: given up, kept with its error for people to see)."""
        ...

    def outbox_items(self, run_id: str) -> list[OutboxItem]:
        """A run's notifications, delivered or not, oldest first."""
        ...
