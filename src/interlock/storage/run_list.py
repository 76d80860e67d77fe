"""The runs list's query: search, filters, a sort and keyset pages, as SQL for both backends.

Pages are keyset pages: the next one starts after the last row's (sort value, run id), so
page 1000 costs what page 1 costs, and a run added meanwhile never shifts a page. Each sort has
an index of (sort column, run_id) (`sql/*/0NN_run_list.sql`); a filter on status or pipeline
uses its own index. A search is a case-insensitive substring match on the run id, the topic
and the run's input values, which the ledger keeps one per line in the run's `search` column
(filled by triggers as the run and its first event are inserted): it reads every run the
filters leave, one table only (docs/server.md has the figures at 100,000 runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SORTS = ("created_at", "cost_usd")
Sort = Literal["created_at", "cost_usd"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunQuery:
    """Which runs to list, in which order, from where."""

    text: str | None = None  # a substring of the id, the topic or an input value
    status: str | None = None
    pipeline: str | None = None
    children: bool = True  # False: leave child runs (of `pipeline` workers) out
    created_from: float | None = None  # epoch seconds, inclusive
    created_to: float | None = None  # epoch seconds, exclusive
    sort: Sort = "created_at"
    descending: bool = True
    after: tuple[float, str] | None = None  # the previous page's last (sort value, run id)
    limit: int = 100


def like_pattern(text: str) -> str:
    """`text` as a LIKE pattern matching it anywhere, its wildcards taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def where(query: RunQuery, dialect: str) -> tuple[str, list[object]]:
    """The WHERE and ORDER BY ... LIMIT of `query` (after `SELECT ... FROM runs`)."""
    mark = "?" if dialect == "sqlite" else "%s"
    conditions: list[str] = []
    args: list[object] = []
    if query.status:
        conditions.append(f"status = {mark}")
        args.append(query.status)
    if query.pipeline:
        conditions.append(f"pipeline = {mark}")
        args.append(query.pipeline)
    if not query.children:
        # A child run's id ends in `-c` and 12 hex digits (`core.subpipelines.CHILD_ID`).
        if dialect == "sqlite":
            conditions.append(f"run_id NOT GLOB '*-c{'[0-9a-f]' * 12}'")
        else:
            conditions.append("run_id !~ '-c[0-9a-f]{12}$'")
    if query.created_from is not None:
        conditions.append(f"created_at >= {mark}")
        args.append(query.created_from)
    if query.created_to is not None:
        conditions.append(f"created_at < {mark}")
        args.append(query.created_to)
    if query.text:
        # LIKE ignores ASCII case in SQLite; ILIKE ignores all case in PostgreSQL.
        like = "LIKE" if dialect == "sqlite" else "ILIKE"
        conditions.append(f"search {like} {mark} ESCAPE '\\'")
        args.append(like_pattern(query.text))
    if query.sort not in SORTS:
        raise ValueError(f"cannot sort runs by {query.sort!r}; sorts: {', '.join(SORTS)}")
    column = query.sort
    if query.after is not None:
        compare = "<" if query.descending else ">"
        conditions.append(f"({column}, run_id) {compare} ({mark}, {mark})")
        args += [query.after[0], query.after[1]]
    order = "DESC" if query.descending else "ASC"
    clause = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    args.append(query.limit)
    return f"{clause} ORDER BY {column} {order}, run_id {order} LIMIT {mark}", args
