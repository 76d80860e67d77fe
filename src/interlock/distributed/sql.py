"""The queue's named SQL statements, kept beside the ledger's in `storage/sql/postgres/`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import psycopg

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def queue_queries() -> dict[str, str]:
    """`-- name: x` blocks of `sql/postgres/queue.sql`, by name."""
    folder = resources.files("interlock.storage").joinpath("sql", "postgres")
    parts = _NAME.split(folder.joinpath("queue.sql").read_text())
    return {
        name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def by_keys(db: psycopg.Connection[Any], query: str, keys: Sequence[Any]) -> list[Any]:
    """The rows of a lookup by a set of keys (`query` takes them as one array), planned for
    these keys and the table as it is now, not prepared once: a plan made while the table was
    nearly empty (a fresh database) reads the whole table for a few keys ever after, and the
    lookups of a run's inputs and results then grow with the history. Planning a one-table
    lookup costs a few tens of microseconds; they run once per run or per burst of results."""
    return db.execute(query, (list(keys),), prepare=False).fetchall()
