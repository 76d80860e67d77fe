"""What `interlock check` can say about a pipeline's model calls before any is made."""

from __future__ import annotations

from interlock.core.workflow import Pipeline
from interlock.providers.config import ModelConfig
from interlock.providers.request import unsupported


def settings_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Request settings a worker's models cannot be sent, one line per worker and model.

    Aliases that do not resolve are reported elsewhere; without any configuration every
    alias is the offline stand-in, which accepts every setting.
    """
    problems: list[str] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.model is None:
                continue
            for alias in dict.fromkeys([worker.model, *worker.fallback_models]):
                try:
                    model = config.resolve(alias).with_params(worker.params)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                refused = unsupported(model.kind, model.settings)
                if refused is not None:
                    place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
                    source = "its params" if worker.params else f"[models.{alias}]"
                    problems.append(
                        f"{place}: model {alias!r} (provider {model.provider!r}): {refused}; "
                        f"remove the setting from {source}"
                    )
    return problems
