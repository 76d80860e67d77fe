"""Batches driven beside a loop that runs already: a server's orchestrator, or that of
`interlock mcp`.

A feeder task (`BatchRunner.feed`) starts a batch's rows as `interlock batch` does, until
nothing more runs or `stop` is set; the batch stays resumable after. One feeder a batch for
each API object, whichever way in (REST or MCP) asked for it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interlock.api import Interlock

log = logging.getLogger("interlock.runtime")

# Each API object's feeders, by batch id (a test process runs several servers).
_FEEDERS: weakref.WeakKeyDictionary[Interlock, dict[str, asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary()
)


def feed(app: Interlock, batch_id: str, stop: asyncio.Event) -> None:
    """Drive the batch with `app`'s orchestrator until nothing more runs (or `stop` is set):
    one feeder per batch, a second call while it runs does nothing.

    Raises:
        LeaseHeld: another live process drives the batch.
    """
    from interlock.workloads.batches import BatchRunner

    feeders = _FEEDERS.setdefault(app, {})
    running = feeders.get(batch_id)
    if running is not None and not running.done():
        return
    runner = BatchRunner(app, batch_id)
    runner.hold()  # raises LeaseHeld now, not in the task

    async def drive() -> None:
        try:
            await runner.feed(stop=stop)
        except Exception as exc:  # said in the log; the batch stays resumable
            log.error(
                "batch %s: its driver stopped: %s",
                batch_id,
                exc,
                extra={"action": "batch_feeder_failed"},
            )
        finally:
            feeders.pop(batch_id, None)

    feeders[batch_id] = asyncio.create_task(drive())


def feed_group(app: Interlock, batch_id: str, stop: asyncio.Event) -> list[str]:
    """Drive the batch and, for an experiment's, every variant with it (as `interlock batch
    resume` does); the batch ids driven.

    Raises:
        LeaseHeld: another live process drives one of them.
    """
    from interlock.workloads.experiments import experiment_of

    group = [b.batch_id for b in experiment_of(app, batch_id)]
    for one in group:
        feed(app, one, stop)
    return group


def take_undriven(app: Interlock, run_ids: tuple[str, ...] | list[str]) -> None:
    """Drive here the runs no live process drives (a cancellation posted to them is then
    recorded); one taken by another process meanwhile is left to it."""
    from interlock.errors import InterlockError

    orchestrator = app.orchestrator
    for run_id in run_ids:
        if run_id in orchestrator.drivers:
            continue
        try:
            orchestrator.take(run_id)
        except InterlockError as exc:
            log.info(
                "run %s is not driven here: %s",
                run_id,
                exc.message,
                extra={"run_id": run_id, "action": "batch_run_not_taken"},
            )
    orchestrator.look_now()  # the cancellations posted are read at once
