"""Observations are filtered before they become events, and events survive a round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from interlock.core import events as ev
from interlock.core.observe import (
    Command,
    CommandKind,
    accept_result,
    implied_start,
    interpret_command,
)
from interlock.core.state import fold

from .runs import Run, fixture


def research() -> Run:
    """A started run of the research pipeline."""
    d = Run(fixture("research.json", "research").pipeline)
    d.start()
    return d


def test_duplicate_completion_is_dropped() -> None:
    """The same completion reported twice is recorded once."""
    d = research()
    report = d.completion("researcher-a@1")
    assert d.observe(report) == []
    assert not accept_result(d.state, report)
    assert d.observe(report) is None
    assert len(d.events_of(ev.TaskCompleted)) == 1


def test_report_for_an_unknown_task_is_dropped() -> None:
    """A report naming a task the run never dispatched is not recorded."""
    d = research()
    stray = ev.TaskFailed(at=0, task_id="intruder@1", attempt=1, error="x")
    assert not accept_result(d.state, stray)


def test_report_for_another_attempt_is_dropped() -> None:
    """A report for an attempt that is not the current one is stale."""
    d = research()
    assert not accept_result(d.state, d.completion("researcher-a@1", attempt=2))


def test_start_is_recorded_once() -> None:
    """A worker's start is recorded once per attempt; a second start report is dropped."""
    d = research()
    started = ev.TaskStarted(at=1, task_id="researcher-a@1", attempt=1, worker="pid 1")
    assert accept_result(d.state, started)
    d.record(started)
    assert not accept_result(d.state, started)


def test_a_completion_whose_start_was_lost_implies_it() -> None:
    """A completion for an attempt with no recorded start brings the start along (its start
    report died with the orchestrator it was sent to); one after a recorded start does not."""
    d = research()
    report = d.completion("researcher-a@1")
    start = implied_start(d.state, report)
    assert start == ev.TaskStarted(at=report.at, task_id="researcher-a@1", attempt=1)
    assert d.observe(report) is not None
    kinds = [type(e).__name__ for e in d.history if getattr(e, "task_id", "") == "researcher-a@1"]
    assert kinds == ["TaskDispatched", "TaskStarted", "TaskCompleted"]
    d.record(ev.TaskStarted(at=1, task_id="researcher-b@1", attempt=1, worker="pid 1"))
    assert implied_start(d.state, d.completion("researcher-b@1")) is None


def test_only_a_reported_completion_implies_a_start() -> None:
    """Failures may come before any start (a worker that could not begin); an output adopted
    from disk is recorded as adopted."""
    d = research()
    failed = ev.TaskFailed(at=1, task_id="researcher-a@1", attempt=1, error="no input")
    assert implied_start(d.state, failed) is None
    adopted = dataclasses.replace(d.completion("researcher-a@1"), adopted=True)
    assert implied_start(d.state, adopted) is None


def test_start_after_completion_is_dropped() -> None:
    """A start report that arrives after the completion is stale."""
    d = research()
    d.complete("researcher-a@1")
    late = ev.TaskStarted(at=1, task_id="researcher-a@1", attempt=1)
    assert not accept_result(d.state, late)


def test_message_is_always_noted() -> None:
    """A person's message is kept in the history whatever the run's state."""
    d = research()
    event = interpret_command(d.state, Command(kind=CommandKind.MESSAGE, message="hi", by="ann"), 3)
    assert event == ev.MessageNoted(at=3, message="hi", by="ann")


@pytest.mark.parametrize("scores", [[6.5, 7.9, 7.9], [6.5, 8.4]])
def test_history_round_trips_through_json(scores: list[float]) -> None:
    """Every event of a run survives to_record -> JSON -> from_record, and folds the same."""
    d = Run(fixture("translate.yaml", "translate").pipeline)
    d.start(inputs={"language": "French"})
    d.complete("fetcher@1")
    d.complete("translator@1")
    for visit, score in enumerate(scores, start=1):
        d.complete(f"reviewer@{visit}", {"score": score})
        if f"polisher@{visit}" in d.state.tasks:
            d.complete(f"polisher@{visit}")
    d.complete("publisher@1")
    records = [json.loads(json.dumps(ev.to_record(e))) for e in d.history]
    assert all(data["v"] == ev.EVENT_VERSION for _, data in records)
    again = [ev.from_record(kind, data) for kind, data in records]
    assert again == d.history
    assert fold(again) == d.state


def test_unknown_event_kind_is_an_error() -> None:
    """A record of a kind this version does not know is refused, not skipped."""
    with pytest.raises(ValueError, match="unknown event kind 'teleported'"):
        ev.from_record("teleported", {"at": 0})


def test_unknown_event_field_is_an_error() -> None:
    """A record with a field this version does not know is refused, not silently dropped."""
    with pytest.raises(ValueError, match="event 'approved' has unknown field\\(s\\) colour"):
        ev.from_record("approved", {"at": 0, "v": 1, "colour": "blue"})


def test_incomplete_event_is_an_error() -> None:
    """A record missing a required field is refused with the event's kind."""
    with pytest.raises(ValueError, match="event 'paused' record is incomplete"):
        ev.from_record("paused", {"at": 0, "v": 1})


def test_newer_event_version_is_an_error() -> None:
    """A record written by a newer format version is refused rather than misread."""
    with pytest.raises(ValueError, match="version 2, newer than this interlock understands"):
        ev.from_record("approved", {"at": 0, "v": 2})
