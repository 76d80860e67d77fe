"""What `interlock check` says of workers whose models are sent in batches (`batch = true`):
the settings a batch cannot honour."""

from __future__ import annotations

from interlock.core.workflow import Pipeline, Worker
from interlock.providers.config import ModelConfig


def batch_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Workers with `tools:` on a batch model: a tool loop needs an answer per turn, which
    batch mode does not send."""
    problems: list[str] = []
    for phase, worker, alias in _batched(pipeline, config):
        if worker.tools:
            problems.append(
                f"pipeline {name!r}, phase {phase}, worker {worker.role!r}: model {alias!r} is "
                f"sent in batches ({_said(worker, alias)}), which cannot run the worker's tool "
                "loop: remove tools: or send its calls one by one"
            )
    return problems


def batch_warnings(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Batch models that ask to stream, which a batch cannot do. (A worker's timeout needs
    no room for the batch: the time a call waits in one counts in no timeout.)"""
    warnings: list[str] = []
    for phase, worker, alias in _batched(pipeline, config):
        model = config.resolve(alias).for_worker(worker)
        assert model.batch is not None
        place = f"pipeline {name!r}, phase {phase}, worker {worker.role!r}: model {alias!r}"
        if model.settings.stream:
            warnings.append(f"{place} is sent in batches: stream = true is not honoured")
    return warnings


def _said(worker: Worker, alias: str) -> str:
    """Where the batch mode of the worker's calls is asked for."""
    return "the worker's batch: true" if worker.batch else f"[models.{alias}] batch = true"


def _batched(pipeline: Pipeline, config: ModelConfig) -> list[tuple[str, Worker, str]]:
    found: list[tuple[str, Worker, str]] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            for alias in dict.fromkeys([worker.model or "", *worker.fallback_models]):
                try:
                    model = config.resolve(alias).for_worker(worker)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                if model.batch is not None and model.kind in ("openai", "anthropic"):
                    found.append((repr(phase.id), worker, alias))
    return found
