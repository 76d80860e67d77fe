"""Driving an experiment: its variants' batches, side by side, in one process.

Every variant is a batch of the same rows (`record_batch` with `variants`). One
`BatchRunner` a batch, all fed beside one orchestrator loop: the base batch's rows start as
a batch's do; a variant's row starts once its base row's run has ended, as a rerun of that
run with the variant's definition, so each task whose fingerprint equals the base task's is
carried over (`TaskReused`) and only what differs is paid for. Waiting for the whole base
run (rather than for each shared task) keeps to what a rerun does already: it reads a run
that has ended; the rows still run `--concurrency` at a time in every variant.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.experiments import VariantPlan, base_plan, plan
from interlock.runtime.batches import BatchRunner, Snapshot
from interlock.storage.batches import BatchRecord, batch_ledger

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.loader import Definition
    from interlock.runtime.models import ModelRunner


def experiment_of(app: Interlock, batch_id: str) -> list[BatchRecord]:
    """The batches driven together with `batch_id`: its experiment's (the base first), or
    itself alone."""
    ledger = batch_ledger(app.store)
    record = ledger.get_batch(batch_id)
    if record.experiment is None:
        return [record]
    return ledger.experiment_batches(record.experiment)


class ExperimentRunner:
    """Drives the batches of an experiment until none runs and none can start more."""

    def __init__(
        self,
        app: Interlock,
        batch_ids: list[str],
        *,
        on_progress: Callable[[Snapshot], None] = lambda _: None,
    ) -> None:
        self.app = app
        self.runners = [BatchRunner(app, b) for b in batch_ids]
        self.on_progress = on_progress

    async def run(self) -> list[Snapshot]:
        """Feed every batch beside one orchestrator loop; each one's last snapshot."""
        orchestrator = self.app.orchestrator
        for runner in self.runners:
            runner.on_progress = self.on_progress
            runner.hold()
        stop = asyncio.Event()
        loop = asyncio.create_task(orchestrator.serve_forever(stop))
        try:
            return list(await asyncio.gather(*(r.feed(loop) for r in self.runners)))
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await loop
            await orchestrator.shutdown()
            from interlock.providers import aclose_providers

            await aclose_providers()


def identities(models: ModelRunner, definition: Definition) -> dict[str, Any]:
    """What each worker of `definition` resolves to from its workflow's folder (model
    settings, the code files a command runs): part of whether two workers are the same."""
    from interlock.runtime.reuse import model_identity

    source = definition.source
    folder = Path(source).parent if source and not source.startswith("<") else None
    return {
        w.role: model_identity(models, w, folder)
        for phase in definition.pipeline.phases
        for w in phase.workers
    }


def plans(
    models: ModelRunner, base: Definition, variants: list[tuple[str, Definition]]
) -> list[VariantPlan]:
    """Per variant, the tasks a row runs and those it reuses from its base row."""
    base_ids = identities(models, base)
    found = [base_plan(base.pipeline)]
    for name, definition in variants:
        found.append(
            plan(
                base.pipeline,
                definition.pipeline,
                name=name,
                base_identity=base_ids,
                identity=identities(models, definition),
            )
        )
    return found
