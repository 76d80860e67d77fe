"""Metrics of delivered runs, and the statistics `interlock compare` shows. Pure: no I/O.

A pipeline's `metrics:` maps a name to a CEL expression over the values its workers
extracted (`score: reviewer.score`, `passed: verdict.passed`), evaluated with the limits of
every condition (`core.expression_limits`). A row's metrics are computed from what its run
recorded, when compared: a metric added to the workflow later still reads the rows run
before it, and a value no worker extracted in that run leaves the metric unset for the row.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from interlock.core.expressions import ExpressionError, evaluate_text

METRIC_ROOTS = frozenset({"topic", "inputs", "roles"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


def metric_name_problem(name: str) -> str | None:
    """Why `name` cannot name a metric (None: it can): it is a column of compare and export."""
    if _NAME.match(name):
        return None
    return (
        "a metric's name is letters, digits, '_' and '-', starting with a letter or '_', at "
        "most 64 characters"
    )


@dataclass(frozen=True, kw_only=True)
class RowMetrics:
    """One row's metrics: the values computed, and why the others have none."""

    values: dict[str, Any]  # name -> a number, true/false or text
    missing: dict[str, str]  # name -> why it has no value in this row


def row_metrics(
    metrics: Mapping[str, str],
    *,
    topic: str,
    inputs: Mapping[str, Any],
    roles: Mapping[str, Mapping[str, Any]],
) -> RowMetrics:
    """Each metric of a row from its run's recorded values (`roles`: role -> extracted
    values), its topic and inputs; a metric that cannot be evaluated is said missing."""
    context: dict[str, Any] = {
        "topic": topic,
        "inputs": dict(inputs),
        "roles": {r: dict(v) for r, v in roles.items()},
    }
    for role, extracted in roles.items():
        if role.isidentifier() and role not in METRIC_ROOTS:
            context[role] = dict(extracted)
    values: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for name, expression in sorted(metrics.items()):
        try:
            text = evaluate_text(expression, context)
        except ExpressionError as exc:
            missing[name] = str(exc)
            continue
        values[name] = _typed(text)
    return RowMetrics(values=values, missing=missing)


def _typed(text: str) -> Any:
    """`evaluate_text` gives text as it is and other values as JSON: back to their kind."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, bool | int | float) else text


# -- statistics --------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile (0-100) by the nearest rank: a value that was measured, the
    same on every machine. None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float | None:
    """The middle value (the mean of the two middle ones for an even count)."""
    if not values:
        return None
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    return (ordered[half - 1] + ordered[half]) / 2


@dataclass(frozen=True, kw_only=True)
class MetricSummary:
    """One metric over a variant's delivered rows."""

    name: str
    count: int  # rows with a value
    mean: float | None = None  # numbers (and true/false, as 1/0)
    median: float | None = None
    pass_rate: float | None = None  # true/false: the share of rows where it is true

    def as_json(self) -> dict[str, Any]:
        """The summary as JSON (`compare --json`)."""
        return {
            "count": self.count,
            "mean": self.mean,
            "median": self.median,
            "pass_rate": self.pass_rate,
        }


def summarize(name: str, values: Sequence[Any]) -> MetricSummary:
    """A metric's mean and median (numbers), or its pass rate (true/false); text is counted."""
    flags = [v for v in values if isinstance(v, bool)]
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if flags and not numbers:
        rate = sum(flags) / len(flags)
        return MetricSummary(name=name, count=len(values), mean=rate, pass_rate=rate)
    if numbers:
        return MetricSummary(
            name=name,
            count=len(values),
            mean=sum(numbers) / len(numbers),
            median=median(numbers),
        )
    return MetricSummary(name=name, count=len(values))


@dataclass(frozen=True, kw_only=True)
class RowOutcome:
    """A row of one variant as compare reads it."""

    number: int
    run_id: str | None
    status: str
    cost_usd: float = 0.0
    tokens: int = 0
    seconds: float | None = None  # its run's duration, once ended
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class VariantSummary:
    """A variant (a batch) summed up: rows, spend, durations and each metric."""

    name: str
    batch_id: str
    rows: int
    delivered: int
    failed: int
    cost_usd: float
    tokens: int
    p50_seconds: float | None
    p95_seconds: float | None
    metrics: tuple[MetricSummary, ...]


def summarize_variant(
    name: str, batch_id: str, rows: Sequence[RowOutcome], metric_names: Sequence[str]
) -> VariantSummary:
    """A variant's rows summed up; metrics over its delivered rows only."""
    delivered = [r for r in rows if r.status == "delivered"]
    seconds = [r.seconds for r in rows if r.seconds is not None and r.status == "delivered"]
    return VariantSummary(
        name=name,
        batch_id=batch_id,
        rows=len(rows),
        delivered=len(delivered),
        failed=sum(1 for r in rows if r.status == "failed"),
        cost_usd=sum(r.cost_usd for r in rows),
        tokens=sum(r.tokens for r in rows),
        p50_seconds=percentile(seconds, 50),
        p95_seconds=percentile(seconds, 95),
        metrics=tuple(
            summarize(m, [r.metrics[m] for r in delivered if m in r.metrics]) for m in metric_names
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Difference:
    """A row where variants differ on a metric: its highest and lowest variant's runs."""

    number: int
    spread: float
    high: tuple[str, str, float]  # variant, run id, value
    low: tuple[str, str, float]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def differences(
    variants: Sequence[tuple[str, Sequence[RowOutcome]]], metric: str, limit: int
) -> list[Difference]:
    """The rows whose metric differs most between variants (largest spread first, then by
    row number: the same order every time), among rows delivered with a value in at least
    two variants; rows alike are left out."""
    by_row: dict[int, list[tuple[str, str, float]]] = {}
    for name, rows in variants:
        for row in rows:
            value = _number(row.metrics.get(metric))
            if row.status == "delivered" and row.run_id is not None and value is not None:
                by_row.setdefault(row.number, []).append((name, row.run_id, value))
    found = []
    for number, seen in by_row.items():
        if len(seen) < 2:
            continue
        high = max(seen, key=lambda s: s[2])
        low = min(seen, key=lambda s: s[2])
        if high[2] == low[2]:
            continue
        found.append(Difference(number=number, spread=high[2] - low[2], high=high, low=low))
    found.sort(key=lambda d: (-d.spread, d.number))
    return found[:limit]


def first_numeric(metric_names: Sequence[str], variants: Sequence[VariantSummary]) -> str | None:
    """The first metric (in name order, as the pinned definition keeps them) that is a
    number in some variant; else the first true/false one; else None."""
    found = [m for v in variants for m in v.metrics]
    for flag in (False, True):
        for name in metric_names:
            if any(m.name == name and m.mean is not None for m in found) and flag == any(
                m.name == name and m.pass_rate is not None for m in found
            ):
                return name
    return None
