"""The spend caps' operations on a SQL connection, shared by both dialects.

Each backend (`spend_sqlite`, `spend_pg`) opens its transaction its own way and hands
these functions a way to run a named query in it; the steps are the same. A reservation
reads each cap's total and holds, in cap-name order, inside one transaction that keeps the
totals it read locked until it commits: no two reservations can both fit under a cap's
last dollars.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from interlock.core.spend import CapKey, CapUsage

Run = Callable[[str, tuple[Any, ...]], list[Any]]
"""Runs a named query with its arguments in the open transaction; its rows."""


def reserve_in(
    run: Run, *, hold: str, keys: Sequence[CapKey], amount_usd: float, now: float, expires: float
) -> str | None:
    """`SpendStore.reserve` in the open transaction (the caller rolls back on a refusal)."""
    for key in sorted(keys, key=lambda k: k.cap):  # one lock order for every process
        spent = float(run("lock_total", (key.cap, key.window_start))[0][0])
        run("drop_expired", (key.cap, key.window_start, now))
        held = float(run("held", (key.cap, key.window_start))[0][0])
        if spent + held + amount_usd > key.amount_usd + 1e-9:
            return key.cap
        run("add_hold", (hold, key.cap, key.window_start, amount_usd, expires))
    return None


def settle_in(run: Run, *, hold: str, keys: Sequence[CapKey], spent_usd: float) -> None:
    """`SpendStore.settle` in the open transaction. The spend is counted whether or not the
    hold is still there (it may have expired during a very long call)."""
    for key in sorted(keys, key=lambda k: k.cap):
        run("add_spent", (key.cap, key.window_start, max(0.0, spent_usd)))
        run("drop_hold", (hold, key.cap))


def usage_of(rows: list[Any]) -> list[CapUsage]:
    """The rows of the `usage` query as values."""
    return [
        CapUsage(
            cap=str(r[0]),
            window_start=float(r[1]),
            spent_usd=float(r[2]),
            held_usd=float(r[3]),
            holds=int(r[4]),
        )
        for r in rows
    ]
