"""A rerun paused at a review can be told how its source's review there ended."""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.review import rejection_at

HISTORY = [
    ev.Paused(at=1.0, phase="draft", visit=1),
    ev.Rejected(at=2.0, to="draft", feedback="cite sources"),
    ev.Paused(at=3.0, phase="draft", visit=2),
    ev.Approved(at=4.0),
    ev.Paused(at=5.0, phase="review", visit=1),
    ev.Rejected(at=6.0, to="draft", feedback="shorter"),
]


def test_the_rejection_of_the_same_review_is_found() -> None:
    """Each review is matched by phase and visit: the first draft's rejection, the review's."""
    first = rejection_at(HISTORY, "draft", 1)
    assert first is not None and first.feedback == "cite sources"
    later = rejection_at(HISTORY, "review", 1)
    assert later is not None and (later.to, later.feedback) == ("draft", "shorter")


def test_an_approved_or_unknown_review_has_no_rejection() -> None:
    """A review that was approved, or never happened in the source, gives nothing."""
    assert rejection_at(HISTORY, "draft", 2) is None
    assert rejection_at(HISTORY, "draft", 3) is None
    assert rejection_at([], "draft", 1) is None
