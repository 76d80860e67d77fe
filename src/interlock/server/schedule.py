"""Cron schedules: a pipeline with `schedule:` gets one run per due slot.

The run id is derived from the pipeline and the slot time, so the store's primary key makes
"one run per slot" hold across restarts and across several servers sharing a store: whoever
creates the run second fails and moves on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from croniter import croniter

from interlock.core.loader import Definition
from interlock.errors import InterlockError, RunNotFound, UsageError
from interlock.runtime.home import check_run_id
from interlock.runtime.orchestrator import Orchestrator
from interlock.runtime.run_config import config_origin

log = logging.getLogger("interlock.server")


def check_schedule(name: str, expression: str) -> None:
    """Refuse an expression croniter cannot read, naming the pipeline."""
    if not croniter.is_valid(expression):
        raise UsageError(f"pipeline {name!r}: schedule {expression!r} is not a cron expression")


def slot_run_id(pipeline: str, slot: float) -> str:
    """The one run id of `pipeline` for the slot at `slot` (UTC, to the second)."""
    slug = "".join(c if c.isalnum() else "-" for c in pipeline.lower()).strip("-")[:48] or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(slot))
    return check_run_id(f"{slug}-at-{stamp}")


def latest_slot(expression: str, now: float) -> float:
    """The most recent slot at or before `now`."""
    following = croniter(expression, now - 1).get_next(float)
    if following <= now:
        return float(following)
    return float(croniter(expression, now).get_prev(float))


class Scheduler:
    """Starts due runs of scheduled pipelines."""

    def __init__(
        self,
        definitions: Callable[[], dict[str, Definition]],
        orchestrator: Orchestrator,
        *,
        catch_up: float,
        on_start: Callable[[str], None],
    ) -> None:
        self.definitions = definitions
        self.orchestrator = orchestrator
        self.catch_up = catch_up  # how late a slot may still be started (after downtime)
        self.on_start = on_start

    def tick(self, now: float) -> list[str]:
        """Create the run of each due slot that has none yet; returns the ids created here."""
        started = []
        for name, definition in sorted(self.definitions().items()):
            expression = definition.pipeline.schedule
            if not expression:
                continue
            slot = latest_slot(expression, now)
            if now - slot > self.catch_up:
                continue
            run_id = slot_run_id(name, slot)
            store = self.orchestrator.store
            try:
                store.get_run(run_id)
                continue  # this slot already has its run
            except RunNotFound:
                pass
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(slot))
            try:
                topic = f"scheduled run of {stamp}"
                origin = config_origin(self.orchestrator.models, definition)
                self.orchestrator.create_runs([(definition, topic, None, run_id)], origin=origin)
            except InterlockError as exc:  # another server created it first (primary key)
                log.info("slot %s not started here: %s", run_id, exc, extra={"run_id": run_id})
                continue
            log.info("started scheduled run", extra={"run_id": run_id, "action": "scheduled"})
            started.append(run_id)
            self.on_start(run_id)
        return started
