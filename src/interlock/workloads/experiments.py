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
from interlock.errors import UsageError
from interlock.storage.batches import BatchRecord, BatchRow, batch_ledger
from interlock.workloads.batches import BatchRunner, Snapshot

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.loader import Definition
    from interlock.core.metrics import RowOutcome
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
        held: list[BatchRunner] = []
        try:
            for runner in self.runners:
                runner.on_progress = self.on_progress
                runner.hold()
                held.append(runner)
        except BaseException:  # another process drives one of them: hand the others back
            for runner in held:
                runner.ledger.release_batch(runner.batch.batch_id, orchestrator.owner)
            raise
        from interlock.runtime.shared_limits import limits_shared_for

        stop = asyncio.Event()
        loop = asyncio.create_task(orchestrator.serve_forever(stop))
        # Rate limits shared with every process on the store, spend caps counted in its
        # ledger, as a batch of its own does.
        shared = limits_shared_for(None, store=self.app.store)
        try:
            with shared:
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


def earlier_reuse(base: Definition) -> str:
    """What the base variant's rows may take from earlier runs (a batch of the same rows run
    before): only the outputs of workers with `cache:`, matched by fingerprint. A variant's
    rows reuse from their base rows; the base rows themselves are fresh runs."""
    cached = [
        w.role
        for phase in base.pipeline.phases
        for w in phase.workers
        if base.pipeline.cache_for(w.role) is not None
    ]
    if not cached:
        return (
            "base rows run afresh: nothing is reused from earlier runs or batches of these "
            "rows (give a worker 'cache: true' to reuse its earlier outputs)"
        )
    return (
        f"base rows run afresh, except what workers with 'cache:' made before for the same "
        f"fingerprint (an earlier batch of these rows): {', '.join(cached)}"
    )


def outcomes(definition: Definition, rows: list[BatchRow]) -> list[RowOutcome]:
    """Each row as compare reads it, its metrics computed from its run's recorded values
    with `definition`'s `metrics:` (a row kept before every worker's values were: its final
    worker's alone)."""
    from interlock.core.batches import fold, row_status
    from interlock.core.metrics import RowOutcome, row_metrics

    pipeline = definition.pipeline
    final = pipeline.final_worker.role
    progress = fold([r.view for r in rows], max_cost_usd=None)
    found = []
    for row in rows:
        result = row.result or {}
        status = row_status(row.view, progress).value
        metrics: dict[str, Any] = {}
        if status == "delivered" and pipeline.metrics:
            roles = result.get("roles") or {final: result.get("values") or {}}
            metrics = row_metrics(
                pipeline.metrics, topic=row.topic, inputs=row.inputs, roles=roles
            ).values
        seconds = result.get("seconds")
        found.append(
            RowOutcome(
                number=row.view.number,
                run_id=row.view.run_id,
                status=status,
                cost_usd=row.view.cost_usd,
                tokens=row.view.tokens,
                seconds=float(seconds) if isinstance(seconds, int | float) else None,
                metrics=metrics,
            )
        )
    return found


def comparison(
    variants: list[tuple[str, BatchRecord, Definition, list[RowOutcome]]],
    *,
    by: str | None,
    limit: int,
) -> dict[str, Any]:
    """The comparison of variants as JSON: each one summed up, then the rows where they
    differ most by `by` (default: the first metric with a number)."""
    from interlock.core.metrics import differences, first_numeric, summarize_variant

    names: list[str] = []
    for _, _, definition, _ in variants:
        names += [m for m in definition.pipeline.metrics if m not in names]
    if by is not None and by not in names:
        raise UsageError(
            f"--by {by!r}: no metric of that name; the metrics are {', '.join(names) or 'none'}"
            " (declare them under the pipeline's 'metrics:')"
        )
    summaries = [summarize_variant(n, r.batch_id, rows, names) for n, r, _, rows in variants]
    metric = by or first_numeric(names, summaries)
    diffs = differences([(n, rows) for n, _, _, rows in variants], metric, limit) if metric else []
    return {
        "metrics": names,
        "by": metric,
        "variants": [
            {
                "variant": s.name,
                "batch_id": s.batch_id,
                "rows": s.rows,
                "delivered": s.delivered,
                "failed": s.failed,
                "cost_usd": round(s.cost_usd, 6),
                "tokens": s.tokens,
                "p50_seconds": s.p50_seconds,
                "p95_seconds": s.p95_seconds,
                "metrics": {m.name: m.as_json() for m in s.metrics},
            }
            for s in summaries
        ],
        "differences": [
            {
                "row": d.number,
                "spread": d.spread,
                "high": {"variant": d.high[0], "run_id": d.high[1], "value": d.high[2]},
                "low": {"variant": d.low[0], "run_id": d.low[1], "value": d.low[2]},
                "diff": f"interlock diff {d.low[1]} {d.high[1]}",
            }
            for d in diffs
        ],
    }
