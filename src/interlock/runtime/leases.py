"""Keeping the leases of the runs an orchestrator drives, whatever its event loop is doing.

A lease says "this process is alive and driving the run". Renewing it from the loop made it
say "this loop is idle enough": with thousands of model calls streaming, a loop busy for
longer than the lease's time lost every lease to its own load, and the runs were left
`running` with nobody driving them. So renewal has a thread of its own: Python hands the
interpreter to a waiting thread every few milliseconds however busy the loop is, and the
stores are thread-safe (SQLite behind a lock, PostgreSQL through a pool of connections), so
a renewal waits at most for one statement of the loop's, never for the loop's work.

A loop that has not turned for `stall_limit` seconds is taken as hung rather than busy: its
leases are left to run out, so that another orchestrator can take its runs over.

A lease that ran out anyway (the machine was suspended, the database was locked for longer
than the lease) is taken back when nobody else took it in the meantime: every acquisition
raises the fencing token by one, so getting exactly the next token proves that no other
orchestrator held the run in between, and nothing was appended but by this one.
A lease the loop released on purpose while a renewal of it waited for the ledger (the run
ended, or was handed back) is not one that ran out: the loop stops driving a run before it
releases the lease, so a renewal that finds the lease gone and the run no longer driven
leaves it released.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from interlock.errors import DiskFull, LeaseHeld, LeaseLost, StorageError
from interlock.storage.base import Lease, RunRecord, Store
from interlock.storage.outage import level_for

log = logging.getLogger("interlock.runtime")
IDLE_LINGER = 5.0  # seconds the keeper's thread waits for the next drive before it ends


class Holder(Protocol):
    """What holds a lease: a run's driver."""

    lease: Lease

    @property
    def run_id(self) -> str:
        """The run whose lease this is."""
        ...


H = TypeVar("H", bound=Holder)


class LeaseKeeper(Generic[H]):
    """Renews, from a thread, every lease of `holders` that has used a third of its time.

    Args:
        store: The ledger (thread-safe).
        holders: The runs held, by run id; read from the keeper's thread, written by the loop.
        ttl: Seconds a lease lasts.
        interval: Seconds between looks at which leases are due.
        clock: Wall-clock seconds, as leases are stamped.
        on_lost: Called for a lease lost and not taken back, and with a `DiskFull`.
        stall_limit: Seconds without a turn of the loop after which renewal stops.
    """

    def __init__(
        self,
        store: Store,
        holders: Mapping[str, H],
        *,
        ttl: float,
        interval: float,
        clock: Callable[[], float],
        on_lost: Callable[[H, Exception], None],
        stall_limit: float,
    ) -> None:
        self.store = store
        self.holders = holders
        self.ttl = ttl
        self.interval = interval
        self.clock = clock
        self.on_lost = on_lost
        self.stall_limit = stall_limit
        self._lock = threading.Lock()  # one renewal or take-back at a time
        self._life = threading.Lock()  # the thread's start and end against the drives' count
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._users = 0
        self._turned = time.monotonic()
        self._stalled = False

    def start(self) -> None:
        """Keep leases from now on (the keeper is shared by nested drives of one loop)."""
        with self._life:
            self._users += 1
            self.turned()
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="interlock-leases", daemon=True
                )
                self._thread.start()
                _LINGERING.add(self)

    def stop(self) -> None:
        """Stop keeping leases once the last drive has ended. The thread waits, idle, for
        `IDLE_LINGER` seconds before it ends: a program that drives runs one after another
        starts it once, not once per run."""
        with self._life:
            self._users = max(0, self._users - 1)
        with self._lock:
            pass  # a renewal under way ends before the caller goes on (it may close the store)

    def close(self) -> None:
        """End the thread now (the store is about to close)."""
        with self._life:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """Whether the keeper's thread is renewing leases for a drive (a loop driven one step
        at a time, as the simulator does, renews them itself with `renew_due`)."""
        return self._thread is not None and self._users > 0

    def turned(self) -> None:
        """The loop is alive: called on each of its turns."""
        self._turned = time.monotonic()

    def _run(self) -> None:
        idle_since: float | None = None
        while not self._stop.wait(self.interval):
            if self._users == 0:  # between drives: nothing is held, nothing to renew
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since < IDLE_LINGER:
                    continue
                with self._life:
                    if self._users == 0:
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                continue
            idle_since = None
            try:
                self.renew_due(while_driven=True)
            except Exception:  # the keeper must outlive any surprise; the next look retries
                log.exception("renewing leases failed", extra={"action": "renew_failed"})

    def renew_due(self, *, while_driven: bool = False) -> None:
        """Renew, in one transaction, every lease that has used a third of its time
        (`while_driven`: only while a drive is under way, as the keeper's thread does)."""
        lost: list[tuple[H, Exception]] = []
        with self._lock:
            if while_driven and self._users == 0:
                return
            stalled = time.monotonic() - self._turned
            if stalled > self.stall_limit:
                if not self._stalled:
                    log.error(
                        "the event loop has not turned for %.1fs; its leases are left to run "
                        "out so that another orchestrator can take its runs over",
                        stalled,
                        extra={"action": "loop_stalled"},
                    )
                self._stalled = True
                return
            self._stalled = False
            now = self.clock()
            due = [
                h for h in _snapshot(self.holders) if h.lease.expires_at - now < self.ttl * 2 / 3
            ]
            if not due:
                return
            try:
                renewed = self.store.renew_leases([h.lease for h in due], self.ttl, now)
            except DiskFull as exc:
                lost.append((due[0], exc))
                renewed = []
            except StorageError as exc:
                # A locked database is transient: the leases still hold until they expire,
                # and appends are fenced, so trying again at the next look is safe.
                log.log(
                    level_for(exc), "cannot renew leases: %s", exc, extra={"action": "renew_failed"}
                )
                return
            taken: list[str] = []
            for holder, lease in zip(due, renewed, strict=False):
                if isinstance(lease, LeaseLost):
                    if self.holders.get(holder.run_id) is not holder:
                        # Let go by the loop while the renewal waited for the ledger: the
                        # loop stops driving a run before it releases the lease, so a lease
                        # found released here was released on purpose, and is not taken back.
                        continue
                    if self._take_back(holder, holder.lease.token, now):
                        taken.append(holder.run_id)
                    else:
                        lost.append((holder, lease))
                elif holder.lease.token == lease.token:
                    holder.lease = lease
            if len(taken) == 1:
                _taken_back(taken[0])
            elif taken:  # one line for a look's runs: thousands may run out together
                log.warning(
                    "%d runs (%s, ...): their leases had run out and nobody took them; taken back",
                    len(taken),
                    taken[0],
                    extra={"action": "lease_taken_back", "runs": len(taken)},
                )
        for holder, error in lost:
            self.on_lost(holder, error)

    def take_back(self, holder: H, token: int) -> bool:
        """After an append refused with the lease of fencing token `token`: whether the run's
        lease is this orchestrator's again (taken back now, or already), so that it may carry
        on from what the ledger holds."""
        with self._lock:
            if holder.lease.token != token:
                return True  # taken back already, since the refused append was built
            if not self._take_back(holder, token, self.clock()):
                return False
        _taken_back(holder.run_id)
        return True

    def _take_back(self, holder: H, token: int, now: float) -> bool:
        """Acquire the lease of fencing token `token` again: whether nobody held it since."""
        try:
            lease = self.store.acquire_lease(holder.run_id, holder.lease.owner, self.ttl, now)
        except (LeaseHeld, StorageError):
            return False  # held by another orchestrator now, or not to be known now
        if lease.token != token + 1:
            # Someone else held the run in between and may have appended: what this
            # orchestrator holds in memory may be behind. Let it go.
            with contextlib.suppress(StorageError, LeaseLost):
                self.store.release_lease(lease)
            return False
        holder.lease = lease
        return True


# Keepers whose thread may be waiting for a next drive. At exit each is ended: a thread left
# to the interpreter's end would keep its store open, and SQLite then leaves the ledger's
# write-ahead log behind instead of folding it into the file.
_LINGERING: weakref.WeakSet[LeaseKeeper[Any]] = weakref.WeakSet()


@atexit.register
def _close_lingering() -> None:
    for keeper in list(_LINGERING):
        keeper.close()


def _taken_back(run_id: str) -> None:
    log.warning(
        "run %s: its lease had run out and nobody took it; taken back",
        run_id,
        extra={"run_id": run_id, "action": "lease_taken_back"},
    )


def _snapshot(holders: Mapping[str, H]) -> list[H]:
    """The holders now; the loop may change the mapping while this thread reads it."""
    while True:
        try:
            return list(holders.values())
        except RuntimeError:  # "dictionary changed size during iteration": look again
            continue


def driver_of(record: RunRecord, now: float) -> str | None:
    """The live orchestrator holding the run's lease (host:pid:nonce), or None: the lease
    was handed back, ran out by `now`, or its holder's process on this host is gone."""
    owner = record.lease_owner
    if not owner or (record.lease_expires or 0) <= now:
        return None  # an ended or handed-back run: no process to look for (nor its module)
    from interlock.runtime.processes import holder_is_dead

    return None if holder_is_dead(owner) else owner
