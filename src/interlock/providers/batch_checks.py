"""What `interlock check` says of workers whose models are sent in batches (`batch = true`):
the settings a batch cannot honour."""

from __future__ import annotations

from interlock.core.workflow import Pipeline, Worker
from interlock.providers.config import ModelConfig

COMPLETION_S = 24 * 3600.0  # the providers' completion window for a batch


def batch_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Workers with `tools:` on a batch model: a tool loop needs an answer per turn, which
    batch mode does not send."""
    problems: list[str] = []
    for phase, worker, alias in _batched(pipeline, config):
        if worker.tools:
            problems.append(
                f"pipeline {name!r}, phase {phase}, worker {worker.role!r}: model {alias!r} is "
                f"sent in batches ([models.{alias}] batch = true), which cannot run the "
                "worker's tool loop: remove tools: or use a model without batch = true"
            )
    return problems


def batch_warnings(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Batch models whose worker may time out before the batch ends, or that ask to stream."""
    warnings: list[str] = []
    for phase, worker, alias in _batched(pipeline, config):
        model = config.resolve(alias)
        assert model.batch is not None
        place = f"pipeline {name!r}, phase {phase}, worker {worker.role!r}: model {alias!r}"
        longest = model.batch.window_s + COMPLETION_S
        if worker.timeout < longest:
            warnings.append(
                f"{place} is sent in batches, which take up to {longest / 3600:g} h (the "
                f"batch window plus the provider's 24 h), but the worker's timeout is "
                f"{worker.timeout:g} s: set timeout: {int(longest) + 1} on the worker to wait "
                "for the whole batch"
            )
        if model.settings.stream:
            warnings.append(f"{place} is sent in batches: stream = true is not honoured")
    return warnings


def _batched(pipeline: Pipeline, config: ModelConfig) -> list[tuple[str, Worker, str]]:
    found: list[tuple[str, Worker, str]] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            for alias in dict.fromkeys([worker.model or "", *worker.fallback_models]):
                try:
                    model = config.resolve(alias)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                if model.batch is not None and model.kind in ("openai", "anthropic"):
                    found.append((repr(phase.id), worker, alias))
    return found
