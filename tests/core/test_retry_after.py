"""A provider's Retry-After, carried by the failure, holds the engine's retry back."""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.decide import RuleName
from interlock.core.events import from_record, to_record

from .test_decide import one_worker


def _rate_limited(at: float, wait: float | None) -> ev.TaskFailed:
    return ev.TaskFailed(
        at=at, task_id="w@1", attempt=1, error="HTTP 429", retryable=True, retry_after=wait
    )


def test_the_retry_waits_at_least_what_the_provider_asked() -> None:
    """A failure saying "retry after 120 s" schedules the retry at +120 s, not at its backoff."""
    d = one_worker(retries=2, backoff={"initial": 0.4, "jitter": 0})
    d.now = 50.0
    made = d.observe(_rate_limited(50.0, 120.0))
    assert made is not None and [x.rule for x in made] == [RuleName.RETRY]
    retry = made[0].event
    assert isinstance(retry, ev.RetryScheduled) and retry.not_before == 170.0
    assert "retry in 120.00s" in (made[0].why or "")
    assert d.advance(119.9) == []
    assert [x.rule for x in d.advance(0.1)] == [RuleName.RETRY_DUE]


def test_a_shorter_wait_than_the_backoff_keeps_the_backoff() -> None:
    """The backoff still applies when the provider asks for less."""
    d = one_worker(retries=1, backoff={"initial": 10, "jitter": 0})
    made = d.observe(_rate_limited(0.0, 1.0))
    assert made is not None
    retry = made[0].event
    assert isinstance(retry, ev.RetryScheduled) and retry.not_before == 10.0


def test_a_failure_without_a_wait_is_recorded_as_before() -> None:
    """The field is written only when set, so records without it stay as older versions
    wrote them, and both forms read back."""
    kind, data = to_record(_rate_limited(1.0, None))
    assert "retry_after" not in data
    assert from_record(kind, data) == _rate_limited(1.0, None)
    kind, data = to_record(_rate_limited(1.0, 30.0))
    assert data["retry_after"] == 30.0 and from_record(kind, data) == _rate_limited(1.0, 30.0)
