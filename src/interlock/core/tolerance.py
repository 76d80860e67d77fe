"""How many items of a fan-out (or rows of a batch) may fail for good before the whole fails.

`tolerate` is a count (`5`) or a percentage of the items (`"2%"`, `"12.5%"`), the same two
ways Step Functions' Distributed Map takes `ToleratedFailureCount` and
`ToleratedFailurePercentage`. A percentage allows the largest whole number of items not past
it: 2% of 120 items is 2.4, so 2 may fail and the third fails the run. The arithmetic is
exact (`Fraction`), so 10% of 30 items allows 3, never 2.999... rounded down to 2.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

Tolerance = int | str  # a count, or a percentage written "N%"

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_COUNT = re.compile(r"^\s*(\d+)\s*$")
HINT = 'give a number of items (tolerate: 5) or a percentage of them (tolerate: "2%")'


def parse_tolerance(value: object, hint: str = HINT, unit: str = "items") -> Tolerance:
    """The tolerance `value` stands for, or ValueError saying what is wrong and the fix
    (`hint`: how to write one where it was given; `unit`: what it counts)."""
    if isinstance(value, bool):
        raise ValueError(f"tolerate {value!r} is not a number of {unit}: {hint}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"tolerate {value} is negative: {hint}, 0 or more")
        return value
    if isinstance(value, str):
        count = _COUNT.match(value)
        if count is not None:
            return int(count.group(1))
        percent = _PERCENT.match(value)
        if percent is None:
            raise ValueError(f"tolerate {value!r} is neither a count nor a percentage: {hint}")
        if Fraction(percent.group(1)) > 100:
            raise ValueError(
                f"tolerate {value!r} is more than 100% of the {unit}: give a percentage "
                "from 0% to 100%"
            )
        return f"{percent.group(1)}%"
    raise ValueError(f"tolerate {value!r} is not a number of {unit}: {hint}")


def allowed_failures(tolerance: Tolerance | None, count: int) -> int:
    """How many of `count` items may fail for good (0 without a tolerance)."""
    if tolerance is None:
        return 0
    if isinstance(tolerance, int):
        return tolerance
    return math.floor(Fraction(tolerance[:-1]) * count / 100)


def describe(tolerance: Tolerance | None, count: int, unit: str = "items") -> str:
    """`tolerate 5`, or `tolerate 2% (2 of 120 items)`, as messages say it."""
    if isinstance(tolerance, str):
        return f"tolerate {tolerance} ({allowed_failures(tolerance, count)} of {count} {unit})"
    return f"tolerate {tolerance or 0}"


def outside_tolerance(tolerance: Tolerance | None, failed: int, count: int) -> bool:
    """Whether `failed` of `count` items is past what `tolerance` allows."""
    return failed > allowed_failures(tolerance, count)
