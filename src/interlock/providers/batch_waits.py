"""What a model call waiting in a provider batch tells its run: which batch, since when, and
what the provider says of it. Told, as a spend-cap wait is (`spend_guard.cap_waits`), to
the listener the runtime sets around a task's call; the runtime shows it in status.json."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from interlock.core.provider_batches import BatchRequest, ProviderBatch, RequestState


@dataclass(frozen=True, kw_only=True)
class BatchWait:
    """A call waiting in (or for) a provider batch, as its run shows it.

    Attributes:
        text: What it says: ``in provider batch batch_abc, submitted 12:03 UTC, in_progress``.
        alias: The model alias whose batch it is.
        tag: Interlock's name for the batch ("" while the call is gathered for one).
        batch_id: The provider's id of the batch ("" until it is sent).
        submitted_at: When the batch was sent (epoch seconds; None until then).
        status: What the provider said of the batch last ("gathered", "submitting" before).
    """

    text: str
    alias: str
    tag: str = ""
    batch_id: str = ""
    submitted_at: float | None = None
    status: str = ""

    def to_json(self) -> dict[str, Any]:
        """The wait as status.json carries it (times as epoch seconds)."""
        return {
            "alias": self.alias,
            "tag": self.tag,
            "batch_id": self.batch_id,
            "submitted_at": self.submitted_at,
            "status": self.status,
            "text": self.text,
        }


BatchWaitListener = Callable[[BatchWait | None], None]
batch_waits: ContextVar[BatchWaitListener | None] = ContextVar(
    "interlock_batch_waits", default=None
)
"""Told when the call of this context waits in a provider batch (a `BatchWait`, again each
time what it says changes) and when it waits no more (None). Unset: nobody is told."""


BatchParking = Callable[[], AbstractAsyncContextManager[None]]
batch_parking: ContextVar[BatchParking | None] = ContextVar("interlock_batch_parking", default=None)
"""Entered by the call of this context for as long as it waits in (or for) a provider batch:
the runtime's, which gives up what the attempt holds meanwhile (its place among the
process's running tasks) and stops its timeout, then takes them back when the answer came.
Unset: the call holds on to everything while it waits."""


def wait_of(request: BatchRequest, batch: ProviderBatch | None, window_s: float) -> BatchWait:
    """What `request` (not yet answered) waits on; `batch` is its batch, when known."""
    if request.state == RequestState.GATHERED or batch is None:
        due = _hhmm(request.created_at + window_s)
        return BatchWait(
            text=f"gathered for a provider batch of {request.alias!r}, sent by {due} UTC",
            alias=request.alias,
            status="gathered",
        )
    if not batch.provider_batch_id:
        return BatchWait(
            text=f"in provider batch {batch.tag}, being sent",
            alias=request.alias,
            tag=batch.tag,
            status="submitting",
        )
    submitted = "" if batch.submitted_at is None else f", submitted {_hhmm(batch.submitted_at)} UTC"
    status = batch.provider_status or "submitted"
    return BatchWait(
        text=f"in provider batch {batch.provider_batch_id}{submitted}, {status}",
        alias=request.alias,
        tag=batch.tag,
        batch_id=batch.provider_batch_id,
        submitted_at=batch.submitted_at,
        status=status,
    )


def _hhmm(at: float) -> str:
    return time.strftime("%H:%M", time.gmtime(at))
