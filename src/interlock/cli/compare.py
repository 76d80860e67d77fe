"""`interlock compare`: an experiment's variants (or two batches) side by side.

Per variant: rows delivered and failed, spend, tokens, the p50/p95 of its runs' durations,
and each metric's mean, median or pass rate; then the rows where the variants differ most,
with the `interlock diff` that shows the two runs. Plain aligned text: a rich table of many
rows takes seconds to lay out.
"""

from __future__ import annotations

import json
from typing import Any

import click

from interlock.cli.base import COUNT, Ctx, handle_errors, out, pass_ctx


@click.command()
@click.argument("batch_ids", nargs=-1, required=True)
@click.option("--by", help="The metric rows are compared by (default: the first numeric one).")
@click.option("--limit", type=COUNT, default=10, show_default=True, help="Rows that differ.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@pass_ctx
@handle_errors
def compare(
    ctx: Ctx, batch_ids: tuple[str, ...], by: str | None, limit: int, as_json: bool
) -> None:
    """Compare an experiment's variants (BATCH), or two batches of the same rows (B1 B2)."""
    from interlock.cli.batch import opened
    from interlock.workloads.commands import compare_batches

    app = opened(ctx, batch_ids[0])  # no ledger: the first id is not found
    found = compare_batches(app, list(batch_ids), by=by, limit=limit)
    if as_json:
        out.print_json(json.dumps(found))
        return
    for line in compare_lines(found):
        out.print(line, soft_wrap=True, highlight=False)


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def compare_lines(found: dict[str, Any]) -> list[str]:
    """The comparison as lines of aligned text."""
    head = ["variant", "batch", "delivered", "failed", "cost", "tokens", "p50 s", "p95 s"]
    metric_heads = []
    for name in found["metrics"]:
        shown = found["variants"]
        if any(v["metrics"][name]["pass_rate"] is not None for v in shown):
            metric_heads.append((name, "pass_rate", f"{name} pass"))
        else:
            metric_heads += [(name, "mean", f"{name} mean"), (name, "median", f"{name} median")]
    table = [head + [h for _, _, h in metric_heads]]
    for v in found["variants"]:
        line = [
            v["variant"],
            v["batch_id"],
            f"{v['delivered']}/{v['rows']}",
            str(v["failed"]),
            f"${v['cost_usd']:.4f}",
            f"{v['tokens']:,}",
            _number(v["p50_seconds"], 1),
            _number(v["p95_seconds"], 1),
        ]
        for name, key, _ in metric_heads:
            value = v["metrics"][name][key]
            line.append(
                "-" if value is None else f"{value:.0%}" if key == "pass_rate" else _number(value)
            )
        table.append(line)
    lines = aligned(table, left=2)
    if found["by"] is None:
        lines.append("no numeric metric to compare rows by (declare 'metrics:' in the pipeline)")
        return lines
    if not found["differences"]:
        lines.append(f"no row differs by {found['by']}")
        return lines
    lines.append(f"rows that differ most by {found['by']}:")
    rows = [
        [
            f"  row {d['row']}",
            f"{d['high']['variant']} {d['high']['value']:g}",
            f"{d['low']['variant']} {d['low']['value']:g}",
            d["diff"],
        ]
        for d in found["differences"]
    ]
    return lines + aligned(rows, left=4)


def aligned(table: list[list[str]], *, left: int) -> list[str]:
    """Columns padded to their widest cell; the first `left` aligned left, others right."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [
        "  ".join(
            cell.ljust(widths[i]) if i < left else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in table
    ]


COMMANDS = [compare]
