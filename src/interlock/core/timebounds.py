"""The longest wait and the range of times interlock keeps (pure: numbers in, words out).

A wait's end is recorded as epoch seconds and shown as a date, so a duration or a time past
what a date can be (year 9999) would be recorded and then break every command that shows the
run. Durations a workflow gives (`delay`, `wait_for.timeout`, `cache.ttl`) are at most ten
years, which covers any real wait and keeps `now + duration` a date; times (`not_before`, a
signal's or wait's `until`) lie between 1970 and 9999. Each refusal says what to write.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

MAX_WAIT_S = 10 * 365 * 86400  # ten years: 315,360,000 seconds
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
EARLIEST_S = EARLIEST.timestamp()
LATEST_S = LATEST.timestamp()


def duration_problem(seconds: Any, what: str) -> str | None:
    """Why `seconds` is not a duration interlock keeps (not finite, or past ten years)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None  # not a number: the field's own type check says so
    if not math.isfinite(seconds):
        return f"{what} must be a finite number of seconds, not {seconds}"
    if seconds > MAX_WAIT_S:
        return (
            f"{what} is {_said(seconds)}, past the longest wait interlock keeps (10 years, "
            f"{MAX_WAIT_S:,} s): write a shorter duration like 30d, or wait for a signal "
            "(wait_for) that someone sends"
        )
    return None


def time_problem(epoch: float, what: str) -> str | None:
    """Why epoch seconds `epoch` is not a time interlock keeps (outside 1970 to 9999)."""
    if not math.isfinite(epoch) or not EARLIEST_S <= epoch <= LATEST_S:
        shown = f"{epoch:g} epoch seconds" if math.isfinite(epoch) else str(epoch)
        return (
            f"{what} is {shown}, outside the times interlock keeps (1970-01-01 to "
            "9999-12-31 UTC): give a time in that range, e.g. 2026-01-31T09:00:00Z"
        )
    return None


def _said(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:,.0f} days" if days >= 1 else f"{seconds:,g} s"
