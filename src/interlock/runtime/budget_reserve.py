"""What a cost budget holds back before spending: the worst case of what comes next.

A run's budget: the engine dispatches a model task only while recorded spend, the worst cases
of the calls in flight and its own fit in the budget (`core.decide`). `call_reserve` builds
that worst case per role from the aliases the run's workers call (prices, output limits) and
the run's own topic and inputs, the same estimate `interlock check --cost` quotes
(`core.quote`).

A batch's budget: a row starts only while the worst case of its whole run fits in what is
left once the spend and the worst cases of the rows in flight are taken from it
(`core.batches.next_starts`). `row_worst_cases` gives each row's, quoted as `check --cost`
quotes a run with that row's topic and inputs (`run_quote`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.core.loader import Definition
from interlock.core.quote import Quote, TextSizes, call_worst_cases, quote
from interlock.core.state import RunState
from interlock.providers.config_files import ConfigError
from interlock.providers.terms import model_terms
from interlock.runtime.models import ModelRunner

if TYPE_CHECKING:
    from interlock.core.batches import RowInputs
    from interlock.core.explore import ExploreReport
    from interlock.providers import ModelConfig

RUN_MAX_STATES = 100_000  # as `check`: a run's quote covers what `check` covers


def run_quote(
    definition: Definition,
    config: ModelConfig,
    sizes: TextSizes | None = None,
    report: ExploreReport | None = None,
) -> Quote:
    """The worst case of a run of `definition` (exploring it unless `report` is given), its
    sub-pipelines' included; `sizes`: its topic's and inputs' (assumed when not given)."""
    from interlock.core.explore import explore
    from interlock.core.subpipelines import children

    pipeline = definition.pipeline
    if report is None:
        report = explore(definition, max_states=RUN_MAX_STATES)
    child_quotes = {
        worker.role: run_quote(
            Definition.of(worker.child_name, child), config, None, report.children.get(worker.role)
        )
        for worker, child in children(pipeline)
    }
    return quote(
        definition.name,
        pipeline,
        terms=model_terms(pipeline, config),
        sizes=sizes or TextSizes.assumed_for(pipeline),
        visit_counts=report.ways,
        complete=report.complete,
        children=child_quotes,
    )


def row_quotes(
    definition: Definition, config: ModelConfig, rows: Sequence[RowInputs]
) -> dict[int, Quote]:
    """row -> the worst case of its run, with its own topic and inputs (explored once; rows
    of the same text sizes quoted once)."""
    from interlock.core.explore import explore

    report = explore(definition, max_states=RUN_MAX_STATES)
    pipeline = definition.pipeline
    defaults = {k: v.default for k, v in pipeline.inputs.items() if v.default is not None}
    memo: dict[tuple[int, tuple[tuple[str, int], ...]], Quote] = {}
    quotes: dict[int, Quote] = {}
    for row in rows:
        sizes = TextSizes.of_run(row.topic, {**defaults, **row.inputs})
        key = (sizes.topic, tuple(sorted(sizes.inputs.items())))
        if key not in memo:
            memo[key] = run_quote(definition, config, sizes, report)
        quotes[row.number] = memo[key]
    return quotes


def row_worst_cases(
    models: ModelRunner,
    definition: Definition,
    workflow_dir: Path | None,
    rows: Sequence[RowInputs],
) -> dict[int, float]:
    """row -> the most its run can cost, for the rows whose worst case is known (a model
    with no price or output limit, tools, a `call:` worker's own calls, or exploring stopped
    early leave a row out: the batch's budget then checks its recorded spend only). Empty
    when the configuration cannot be read (a run refused for that is never driven)."""
    try:
        config = models.config(workflow_dir)
    except ConfigError:
        return {}
    return {
        number: q.usd
        for number, q in row_quotes(definition, config, rows).items()
        if q.usd is not None and q.complete and not q.not_quoted
    }


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
