"""`interlock batch export`: a batch's rows written as JSONL or CSV."""

from __future__ import annotations

import csv
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from interlock.errors import UsageError

FIXED = ("row", "status", "run_id", "try", "cost_usd", "tokens", "topic")


def write_results(output: str, records: list[dict[str, Any]]) -> None:
    """Write `records` to `output` by its ending (.jsonl or .csv), whole or not at all: the
    file is written beside and renamed into place."""
    lower = output.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records)
    elif lower.endswith(".csv"):
        text = csv_text(records)
    else:
        raise UsageError(f"-o {output}: give a file ending in .jsonl or .csv")
    path = Path(output)
    try:
        handle, temporary = tempfile.mkstemp(dir=path.absolute().parent, prefix=".export-")
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        raise UsageError(f"-o {output}: cannot be written ({exc.strerror})") from None


def csv_text(records: list[dict[str, Any]]) -> str:
    """One row a record: the fixed columns, then `input.NAME`, `value.NAME` and `metric.NAME`
    columns for every input, extracted value and metric any row has, then `failure` and
    `output`."""
    inputs = list(dict.fromkeys(k for r in records for k in r.get("inputs", {})))
    values = list(dict.fromkeys(k for r in records for k in r.get("values", {})))
    metrics = list(dict.fromkeys(k for r in records for k in r.get("metrics", {})))
    header = [
        *FIXED,
        *(f"input.{k}" for k in inputs),
        *(f"value.{k}" for k in values),
        *(f"metric.{k}" for k in metrics),
        "failure",
        "output",
    ]
    lines: list[list[Any]] = [header]
    for r in records:
        lines.append(
            [
                *(r.get(k) for k in FIXED),
                *(_cell(r["inputs"].get(k)) for k in inputs),
                *(_cell(r["values"].get(k)) for k in values),
                *(_cell(r.get("metrics", {}).get(k)) for k in metrics),
                r.get("failure") or "",
                r.get("output") or "",
            ]
        )
    import io

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(lines)
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value
