"""Named SQL queries and versioned migrations, loaded from the package's `.sql` files."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def queries(dialect: str) -> dict[str, str]:
    """`-- name: x` blocks of `sql/<dialect>/queries.sql`, by name."""
    text = resources.files("interlock.storage").joinpath("sql", dialect, "queries.sql").read_text()
    parts = _NAME.split(text)
    return {
        name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


@cache
def migrations(dialect: str) -> list[tuple[int, str]]:
    """(version, script) for each `NNN_*.sql` file of the dialect, in order."""
    folder = resources.files("interlock.storage").joinpath("sql", dialect)
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{3})_.*\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text()))
    return sorted(found)


@cache
def named(dialect: str, file: str) -> dict[str, str]:
    """`-- name: x` blocks of `sql/<dialect>/<file>`, by name (queries of one feature kept
    in a file of their own, such as `batches.sql`)."""
    text = resources.files("interlock.storage").joinpath("sql", dialect, file).read_text()
    parts = _NAME.split(text)
    return {
        name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }
