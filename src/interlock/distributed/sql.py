"""The queue's named SQL statements, kept beside the ledger's in `storage/sql/postgres/`."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def queue_queries() -> dict[str, str]:
    """`-- name: x` blocks of `sql/postgres/queue.sql`, by name."""
    folder = resources.files("interlock.storage").joinpath("sql", "postgres")
    parts = _NAME.split(folder.joinpath("queue.sql").read_text())
    return {
        name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }
