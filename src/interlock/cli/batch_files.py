"""`interlock batch export`: a batch's rows written as JSONL or CSV."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from interlock.errors import UsageError


def write_results(output: str, records: list[dict[str, Any]]) -> None:
    """Write `records` to `output` by its ending (.jsonl or .csv), whole or not at all: the
    file is written beside and renamed into place."""
    from interlock.workloads.commands import export_format, export_text

    kind = export_format(output)
    if kind is None:
        raise UsageError(f"-o {output}: give a file ending in .jsonl or .csv")
    text = export_text(kind, records)
    path = Path(output)
    try:
        handle, temporary = tempfile.mkstemp(dir=path.absolute().parent, prefix=".export-")
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        raise UsageError(f"-o {output}: cannot be written ({exc.strerror})") from None
