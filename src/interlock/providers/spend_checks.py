"""What `interlock check` says of the spend caps: calls that could never start under one.

A call reserves at least its whole output limit at its output rate, whatever its prompt;
a model whose limit alone is over a cap that applies could never be called, and one with
no output limit cannot be bounded at all. Both are problems at check time, before a run
finds them at its first call. Pure over the configuration.
"""

from __future__ import annotations

from interlock.core.workflow import Pipeline
from interlock.providers.config import ModelConfig
from interlock.providers.spend import CallScope, too_dear, worst_case_usd

CAPPED_KINDS = ("openai", "anthropic")
"""The kinds whose calls the caps hold (`interlock.providers.factory`)."""


def cap_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """One line per worker and model whose calls a spend cap would refuse outright."""
    if not config.spend.caps:
        return []
    problems: list[str] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.model is None:
                continue
            for alias in dict.fromkeys([worker.model, *worker.fallback_models]):
                try:
                    model = config.resolve(alias).for_worker(worker)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                if model.kind not in CAPPED_KINDS:
                    continue
                caps = config.spend.applying(
                    CallScope(pipeline=name, alias=alias, provider=model.provider)
                )
                if not caps:
                    continue
                place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
                output = model.max_output_tokens
                if output is None and model.kind == "anthropic":
                    output = config.provider(model.provider).default_max_output_tokens
                if output is None:
                    problems.append(
                        f"{place}: model {alias!r} has no output limit, so spend cap "
                        f"{caps[0].name!r} ({config.spend.source}) cannot bound its calls; "
                        f"set max_output_tokens in [models.{alias}]"
                    )
                    continue
                least = worst_case_usd(input_tokens=0, output_tokens=output, rates=model.rates())
                dear = too_dear(caps, least)
                if dear is not None:
                    problems.append(
                        f"{place}: model {alias!r}: {output} output tokens alone can cost USD "
                        f"{least:.4f}, over spend cap {dear.name!r} (USD {dear.amount_usd:.2f}"
                        f", {config.spend.source}): no call could start; raise the cap or "
                        "lower max_output_tokens"
                    )
    return problems
