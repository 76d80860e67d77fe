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

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.core.loader import Definition
from interlock.core.quote import Quote, TextSizes, call_worst_cases, quote
from interlock.core.state import RunState
from interlock.providers.config_files import ConfigError
from interlock.providers.terms import model_terms

if TYPE_CHECKING:
    from interlock.core.batches import RowInputs
    from interlock.core.explore import ExploreReport
    from interlock.providers import ModelConfig
    from interlock.runtime.models import ModelRunner

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
    quotes = RowQuotes(definition, config, rows)
    return {row.number: quotes.quote(row.number) for row in rows}


class RowQuotes:
    """The worst case of each row's run, quoted when first asked for (a driver needs only
    its rows in flight and the next to start: a batch of 10,000 rows is not quoted whole at
    each start), the pipeline explored once and rows of the same text sizes quoted once."""

    def __init__(
        self, definition: Definition, config: ModelConfig, rows: Sequence[RowInputs]
    ) -> None:
        self._definition = definition
        self._config = config
        self._rows = {row.number: row for row in rows}
        self._report: ExploreReport | None = None
        self._memo: dict[tuple[int, tuple[tuple[str, int], ...]], Quote] = {}
        pipeline = definition.pipeline
        self._defaults = {k: v.default for k, v in pipeline.inputs.items() if v.default is not None}

    def quote(self, number: int) -> Quote:
        """The worst case of row `number`'s run (KeyError: no such row)."""
        from interlock.core.explore import explore

        row = self._rows[number]
        sizes = TextSizes.of_run(row.topic, {**self._defaults, **row.inputs})
        key = (sizes.topic, tuple(sorted(sizes.inputs.items())))
        if key not in self._memo:
            if self._report is None:
                self._report = explore(self._definition, max_states=RUN_MAX_STATES)
            self._memo[key] = run_quote(self._definition, self._config, sizes, self._report)
        return self._memo[key]


class RowWorstCases(Mapping[int, float]):
    """row -> the most its run can cost, for the rows whose worst case is known (see
    `row_worst_cases`), each quoted when first looked up."""

    def __init__(self, quotes: RowQuotes | None, numbers: Sequence[int]) -> None:
        self._quotes = quotes
        self._numbers = tuple(numbers)
        self._known: dict[int, float | None] = {}

    def __getitem__(self, number: int) -> float:
        if number not in self._known:
            if self._quotes is None or number not in self._numbers:
                raise KeyError(number)
            q = self._quotes.quote(number)
            bounded = q.usd is not None and q.complete and not q.not_quoted
            self._known[number] = q.usd if bounded else None
        found = self._known[number]
        if found is None:
            raise KeyError(number)
        return found

    def __iter__(self) -> Iterator[int]:
        return (n for n in self._numbers if n in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def row_worst_cases(
    models: ModelRunner,
    definition: Definition,
    workflow_dir: Path | None,
    rows: Sequence[RowInputs],
) -> RowWorstCases:
    """row -> the most its run can cost, for the rows whose worst case is known (a model
    with no price or output limit, tools, a `call:` worker's own calls, or exploring stopped
    early leave a row out: the batch's budget then checks its recorded spend only). Empty
    when the configuration cannot be read (a run refused for that is never driven)."""
    numbers = [row.number for row in rows]
    try:
        config = models.config(workflow_dir)
    except ConfigError:
        return RowWorstCases(None, numbers)
    return RowWorstCases(RowQuotes(definition, config, rows), numbers)


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
