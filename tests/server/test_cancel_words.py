"""A run cancelled without a reason is said to be cancelled once, in the watch feed too."""

from __future__ import annotations

from interlock.server.messages import describe
from interlock.storage.base import StoredEvent


def cancelled(reason: str) -> StoredEvent:
    data = {"reason": reason, "by": "ana"}
    return StoredEvent(id=1, run_id="r", seq=9, at=0.0, kind="run_cancelled", data=data)


def test_the_default_reason_is_not_repeated_and_a_given_one_is_shown() -> None:
    """'cancelled by ana', not 'cancelled by ana: cancelled'; a real reason follows a colon."""
    assert describe(cancelled("cancelled")) == "cancelled by ana"
    assert describe(cancelled("")) == "cancelled by ana"
    assert describe(cancelled("too slow")) == "cancelled by ana: too slow"
