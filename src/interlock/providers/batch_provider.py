"""Model calls through the providers' batch APIs, at their batch price.

An alias with ``batch = true`` is served by `BatchingProvider`: a call is recorded in the
process's `BatchStore` under its idempotency key (run, task, attempt) and waits there; one
`Collector` per alias gathers the waiting calls of every run for ``batch_window`` (or until
``batch_max``), records a batch under a fresh tag, sends it, polls it and writes each call's
answer back to its record, where the waiting call reads it.

Crash safety comes from the order of those steps:

* a batch is recorded (``submitting``) before it is sent, and sent under its tag; a process
  that finds a ``submitting`` batch asks the provider for a batch with that tag first, and
  sends it only when there is none, so no batch goes out twice;
* a ``submitted`` batch is polled by whichever process drives the alias next: a killed
  orchestrator that resumes goes on polling;
* a call whose key is recorded (a restarted attempt) waits for that record instead of
  sending again; an answer already recorded is returned at once, and paid once.

Holding nothing while it waits: a call enters the runtime's `batch_parking` for as long as
it waits for its batch, which gives up the attempt's place among the process's running
tasks (others run, and gather into the same batch, meanwhile) and stops its timeout (the
worker's ``timeout`` covers the attempt's own work; the provider's 24 h expiry bounds the
wait). The request's own timeout bounds each HTTP request of the batch API.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from interlock.core.params import RequestSettings
from interlock.core.provider_batches import (
    TERMINAL,
    BatchRequest,
    BatchState,
    ProviderBatch,
    RequestState,
)
from interlock.providers.base import ModelRequest, ModelResult, ProviderError, TokenCallback
from interlock.providers.batch_api import BatchApi, Outcome
from interlock.providers.batch_store import BatchStore, batch_store
from interlock.providers.batch_waits import BatchWait, batch_parking, batch_waits, wait_of
from interlock.providers.settings import BatchMode

logger = logging.getLogger("interlock.providers.batch")

POLL_ENV = "INTERLOCK_BATCH_POLL_S"  # seconds between status requests (default 30)
# Named crash points of batch mode (tests/providers/test_provider_batch_crash.py), armed as
# the runtime's are, by INTERLOCK_CRASH_AT=<name>.
CRASH_POINTS = ("after_batch_submit", "while_batch_poll")


def _crash_point(name: str) -> None:
    if os.environ.get("INTERLOCK_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


class BatchBackend(Protocol):
    """What a direct provider lends batch mode: its request body and its answer reader."""

    name: str

    def batch_body(self, request: ModelRequest) -> dict[str, Any]: ...

    def batch_result(self, request: ModelRequest, answer: dict[str, Any]) -> ModelResult: ...


def unstreamed(request: ModelRequest) -> ModelRequest:
    """`request` asking for one JSON answer: a batch line is the body minus streaming."""
    settings = RequestSettings.model_validate({**request.settings.set_fields(), "stream": False})
    return ModelRequest(**{**request.__dict__, "settings": settings})


class Collector:
    """Gathers, sends, polls and answers the batch-mode calls of one alias in this process."""

    def __init__(self, *, provider: str, kind: str, alias: str, mode: BatchMode, api: BatchApi,
                 store: BatchStore, poll_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.provider, self.kind, self.alias = provider, kind, alias
        self.mode, self.api, self.store = mode, api, store
        self.poll_s = poll_s or float(os.environ.get(POLL_ENV) or 30.0)
        self.clock = clock
        self.changed = asyncio.Event()  # set whenever a request's record changed
        self._kick = asyncio.Event()
        self._driving: dict[str, asyncio.Task[None]] = {}
        self._main: asyncio.Task[None] | None = None
        self.waiting = 0  # calls of this process waiting on the collector
        self.known: dict[str, ProviderBatch] = {}  # the batches it drives, as last seen
        self._cancels: dict[str, asyncio.Future[None]] = {}  # batches being cancelled

    def start(self) -> None:
        """Run the gathering loop (and resume this alias's unfinished batches) if idle."""
        if self._main is None or self._main.done():
            self._main = asyncio.get_running_loop().create_task(self._run())
        self._kick.set()

    async def _run(self) -> None:
        for batch in self.store.batches():
            if (batch.provider, batch.alias) == (self.provider, self.alias) and batch.state in (
                BatchState.SUBMITTING, BatchState.SUBMITTED):  # fmt: skip
                self._drive(batch)
        while self.waiting > 0 or self._driving:
            gathered = self.store.gathered(self.provider, self.alias, self.mode.max_requests)
            if gathered:
                due = gathered[0].created_at + self.mode.window_s
                if len(gathered) >= self.mode.max_requests or self.clock() >= due:
                    self._open(gathered)
                    continue
                wait = max(0.0, due - self.clock())
            else:
                wait = self.poll_s
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), min(wait, self.poll_s))

    def adopt(self, tag: str) -> None:
        """Drive batch `tag` from here too, unless this collector does already: the call of
        an attempt started again (its process died, or its fleet worker) waits in a batch
        sent by another process, perhaps one that is gone, while this collector may be busy
        with batches of its own (its start adopts only the batches unfinished then)."""
        if tag in self._driving:
            return
        batch = next((b for b in self.store.batches() if b.tag == tag), None)
        if batch is not None and batch.state in (BatchState.SUBMITTING, BatchState.SUBMITTED):
            self._drive(batch)

    def _open(self, gathered: list[BatchRequest]) -> None:
        batch = ProviderBatch(tag=f"il{uuid.uuid4().hex[:16]}", provider=self.provider,
                              kind=self.kind, alias=self.alias, state=BatchState.SUBMITTING,
                              created_at=self.clock())  # fmt: skip
        if not self.store.open_batch(batch, [r.key for r in gathered]):
            # Another process sharing the store (a fleet's other worker) put them in a
            # batch of its own first: this one holds nothing and is never sent.
            self.store.end_batch(batch.tag, BatchState.CANCELLED, "empty", self.clock())
            return
        self._drive(batch)
        self.changed.set()

    def _drive(self, batch: ProviderBatch) -> None:
        if batch.tag not in self._driving:
            self.known[batch.tag] = batch
            task = asyncio.get_running_loop().create_task(self._follow(batch))
            self._driving[batch.tag] = task
            task.add_done_callback(lambda _: self._driving.pop(batch.tag, None))

    async def _follow(self, batch: ProviderBatch) -> None:
        backoff = 1.0
        while True:
            try:
                await self._step(batch)
                return
            except ProviderError as exc:
                if not exc.retryable:
                    self._fail_all(batch.tag, str(exc), retryable=False)
                    return
                logger.warning("batch %s: %s; trying again", batch.tag, exc,
                               extra={"action": "provider_batch_retry"})  # fmt: skip
                await asyncio.sleep(min(backoff, self.poll_s))
                backoff = min(backoff * 2, 60.0)
                batch = next((b for b in self.store.batches() if b.tag == batch.tag), batch)

    async def _step(self, batch: ProviderBatch) -> None:
        requests = self.store.requests_in(batch.tag)
        batch_id = batch.provider_batch_id
        if batch.state == BatchState.SUBMITTING:
            # Recorded, perhaps sent by a process that died before it recorded the id.
            batch_id = await self.api.find(batch.tag, batch.created_at) or ""
            if not batch_id:
                lines = [(f"{batch.tag}-{r.key}", orjson.loads(r.body)) for r in requests]
                batch_id = await self.api.submit(batch.tag, lines)
            _crash_point("after_batch_submit")
            at = self.clock()
            self.store.mark_submitted(batch.tag, batch_id, "submitted", at)
            self._seen(batch.tag, provider_batch_id=batch_id, provider_status="submitted",
                       submitted_at=at, state=BatchState.SUBMITTED)  # fmt: skip
        while True:
            live = [r for r in self.store.requests_in(batch.tag) if r.state not in TERMINAL]
            if not live:  # every request withdrawn: nothing to wait for
                await self.withdrawn(batch.tag)
                return
            poll = await self.api.poll(batch_id)
            self.store.set_status(batch.tag, poll.status)
            self._seen(batch.tag, provider_status=poll.status)
            if poll.ended:
                self._answer(batch.tag, poll.results, expired=poll.expired, status=poll.status)
                self.store.end_batch(batch.tag, BatchState.ENDED, poll.status, self.clock())
                return
            _crash_point("while_batch_poll")
            await asyncio.sleep(self.poll_s)

    def _seen(self, tag: str, **changes: Any) -> None:
        before = self.known.get(tag)
        if before is not None:
            self.known[tag] = dataclasses.replace(before, **changes)
            if self.known[tag] != before:
                self.changed.set()  # the calls in it tell their runs (`batch_waits`)

    async def withdrawn(self, tag: str) -> None:
        """Cancel batch `tag` at the provider if none of its requests is waiting any more;
        returns once the provider was asked (by this call or by the one that began asking)."""
        asking = self._cancels.get(tag)
        if asking is None:
            batch = next((b for b in self.store.batches() if b.tag == tag), None)
            if batch is None or batch.state != BatchState.SUBMITTED:
                return
            if any(r.state not in TERMINAL for r in self.store.requests_in(tag)):
                return
            # Recorded first, so that the calls withdrawn together cancel it once.
            self.store.end_batch(tag, BatchState.CANCELLED, "cancelled", self.clock())
            task = self._driving.pop(tag, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
            asking = asyncio.ensure_future(self._cancel(batch.provider_batch_id))
            self._cancels[tag] = asking
        # Shielded: a call stopped again while it waits leaves the request to go out.
        await asyncio.shield(asking)

    async def _cancel(self, provider_batch_id: str) -> None:
        with contextlib.suppress(ProviderError):
            await self.api.cancel(provider_batch_id)

    def _answer(self, tag: str, results: dict[str, Outcome], *, expired: bool,
                status: str) -> None:  # fmt: skip
        ended = []
        for request in self.store.requests_in(tag):
            outcome = results.get(f"{tag}-{request.key}")
            if outcome is not None and outcome.answer is not None:
                ended.append(
                    BatchRequest(
                        **{
                            **request.__dict__,
                            "state": RequestState.DONE,
                            "answer": orjson.dumps(outcome.answer).decode(),
                        }
                    )
                )
                continue
            if outcome is not None:
                error, retryable = outcome.error, outcome.retryable
            elif expired:
                error, retryable = (
                    "the provider's batch expired (24 h) before this request ran",
                    True,
                )
            else:
                error = f"the provider's batch ended ({status}) without a result for this request"
                retryable = True
            ended.append(BatchRequest(**{**request.__dict__, "state": RequestState.FAILED,
                                         "error": error, "retryable": retryable}))  # fmt: skip
        self.store.finish(ended)
        self.changed.set()

    def _fail_all(self, tag: str, error: str, *, retryable: bool) -> None:
        self.store.finish([BatchRequest(**{**r.__dict__, "state": RequestState.FAILED,
                                           "error": error, "retryable": retryable})
                           for r in self.store.requests_in(tag)])  # fmt: skip
        self.store.end_batch(tag, BatchState.ENDED, "failed", self.clock())
        self.changed.set()


class BatchingProvider:
    """A `Provider` whose calls go through `collector` (see the module docstring)."""

    def __init__(self, *, inner: BatchBackend, collector: Callable[[], Collector],
                 store: Callable[[], BatchStore] = batch_store) -> None:  # fmt: skip
        self.name = inner.name
        self._inner = inner
        self._collector = collector
        self._store = store

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        """Wait for the call's answer from its batch; streaming is not offered."""
        if request.tools or request.turns:
            # A tool loop needs an answer per turn; its turns share one key, so a recorded
            # answer would be read back for every turn.
            raise ProviderError(
                f"{self.name}: model {request.alias!r} is sent in batches (batch = true), which "
                "cannot run a tool loop: remove the worker's tools or use another model",
                retryable=False,
            )
        request = unstreamed(request)
        store = self._store()
        collector = self._collector()
        record = store.add_request(BatchRequest(
            key=request.idempotency_key, provider=collector.provider, alias=collector.alias,
            body=orjson.dumps(self._inner.batch_body(request)).decode(),
            state=RequestState.GATHERED, created_at=collector.clock(),
            run_id=request.run_id, task_id=request.task_id))  # fmt: skip
        if record.tag and record.state not in TERMINAL:
            collector.adopt(record.tag)  # recorded in a batch before: this attempt started again
        listener, told = batch_waits.get(), None
        parking = batch_parking.get()
        parked = (
            contextlib.nullcontext()
            if parking is None or record.state in TERMINAL  # answered already: no wait
            else parking()
        )
        collector.waiting += 1
        try:
            async with parked:
                while record.state not in TERMINAL:
                    if listener is not None:
                        told = _tell(listener, told, record, collector)
                    collector.start()
                    collector.changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(collector.changed.wait(), collector.poll_s)
                    record = store.request(record.key) or record
        except asyncio.CancelledError:
            # Stopped because its run ended (the runtime withdrew the run's calls first): the
            # provider's batch is cancelled now if nothing else waits in it. Stopped for any
            # other reason (the process shutting down), the call stays in its batch, and
            # the same attempt started again reads its answer.
            record = store.request(record.key) or record
            if record.state == RequestState.WITHDRAWN and record.tag:
                await collector.withdrawn(record.tag)
            raise
        finally:
            collector.waiting -= 1
            if told is not None and listener is not None:
                listener(None)  # answered, failed or stopped: it waits no more
        if record.state == RequestState.DONE:
            result = self._inner.batch_result(request, orjson.loads(record.answer))
            if on_token is not None and result.text:
                on_token(result.text)
            return result
        if record.state == RequestState.WITHDRAWN:
            await collector.withdrawn(record.tag)
            raise ProviderError(f"{self.name}: the call was withdrawn from its batch",
                                retryable=False)  # fmt: skip
        raise ProviderError(f"{self.name}: {record.error}", retryable=record.retryable)


def _tell(listener: Callable[[BatchWait | None], None], told: BatchWait | None,
          record: BatchRequest, collector: Collector) -> BatchWait:  # fmt: skip
    """Tell `listener` what the call of `record` waits on, if that changed since `told`."""
    wait = wait_of(record, collector.known.get(record.tag), collector.mode.window_s)
    if wait != told:
        listener(wait)
    return wait


def withdraw_run(store: BatchStore, run_id: str) -> int:
    """Withdraw the unanswered batch-mode calls of a cancelled run; how many there were. A
    batch left with no live request is cancelled at the provider by its collector."""
    live = [r for r in store.requests_of_run(run_id) if r.state not in TERMINAL]
    store.finish([BatchRequest(**{**r.__dict__, "state": RequestState.WITHDRAWN,
                                  "error": "its run was cancelled"}) for r in live])  # fmt: skip
    return len(live)
