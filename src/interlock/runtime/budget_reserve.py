"""What a run's cost budget holds back before each model call: the call's worst case.

The engine dispatches a model task only while recorded spend, the worst cases of the calls in
flight and its own fit in the budget (`core.decide`). This module builds that worst case per
role from the aliases the run's workers call (prices, output limits) and the run's own topic
and inputs, the same estimate `interlock check --cost` quotes (`core.quote`).
"""

from __future__ import annotations

from pathlib import Path

from interlock.core.loader import Definition
from interlock.core.quote import TextSizes, call_worst_cases
from interlock.core.state import RunState
from interlock.providers.config_files import ConfigError
from interlock.providers.terms import model_terms
from interlock.runtime.models import ModelRunner


def call_reserve(
    models: ModelRunner, definition: Definition, workflow_dir: Path | None, state: RunState
) -> dict[str, float] | None:
    """role -> the most one call of that worker can cost, for a run with a cost budget;
    None when the pipeline has none, or its configuration cannot be read (a run refused for
    that is never driven; a call made anyway keeps the budget's check on recorded spend)."""
    pipeline = definition.pipeline
    if pipeline.budget is None or pipeline.budget.max_cost_usd is None:
        return None
    try:
        config = models.config(workflow_dir)
    except ConfigError:
        return None
    defaults = {k: v.default for k, v in pipeline.inputs.items() if v.default is not None}
    sizes = TextSizes.of_run(state.topic, {**defaults, **state.inputs})
    return call_worst_cases(pipeline, terms=model_terms(pipeline, config), sizes=sizes)
