"""A child run's supervision needs no orchestrator and no parent driver: given a
`ChildRequest` and `ChildPorts` (values and calls), it reports the attempt's start, creates
the child, reports what becomes of it, and ends with the attempt's result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.loader import Definition
from interlock.core.state import RunState, fold
from interlock.core.subpipelines import child_run_id
from interlock.core.workflow import Pipeline
from interlock.runtime.children import ChildPorts, ChildRequest, ChildStart, Supervision
from interlock.runtime.home import Home
from interlock.runtime.reports import Report
from interlock.testing import MemoryStore

CHILD = child_run_id("parent", "sub@1", 1)


class Parent:
    """What the supervision is told of its parent and of the orchestrator, recorded."""

    def __init__(self, tmp_path: Path, child: ChildStart | str) -> None:
        self.reports: list[Report] = []
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.driven: dict[str, RunState] = {}
        self.child = child
        self.ports = ChildPorts(
            store=MemoryStore(),
            home=Home.at(tmp_path),
            clock=lambda: 5.0,
            lease_ttl=30.0,
            idle=set(),
            live_state=self.driven.get,
            take=lambda run_id: None,
            create=lambda start, child_id, origin: self.created.append((child_id, origin)),
        )

    def supervision(self) -> Supervision:
        request = ChildRequest(
            parent_run="parent",
            task_id="sub@1",
            attempt=1,
            worker="me",
            child=lambda: self.child,
            report=self.reports.append,
            parent_ended=lambda: None,
            touch_parent=lambda: None,
            ended=lambda handle: None,
        )
        return Supervision(request, self.ports)

    def events(self) -> list[ev.Event]:
        return [r.event for r in self.reports]


def child_start() -> ChildStart:
    pipeline = Pipeline.model_validate(
        {
            "phases": [
                {"id": "draft", "workers": [{"role": "w", "command": ["true"], "final": True}]}
            ]
        }
    )
    definition = Definition.of("kid", pipeline)
    return ChildStart(name="kid", definition=definition, topic="t", inputs={})


def child_history(*, failed: bool) -> RunState:
    events: list[ev.Event] = [
        ev.RunCreated(at=0.0, run_id=CHILD, pipeline="kid", definition_hash="h", topic="t"),
        ev.PhaseStarted(at=0.0, phase="draft", visit=1),
    ]
    if failed:
        events.append(ev.RunFailed(at=1.0, reason="boom"))
    return fold(events)


def test_a_child_that_cannot_be_rendered_fails_the_attempt_for_good(tmp_path: Path) -> None:
    """Its task or inputs do not render: the start, then a failure not retried; no child."""
    parent = Parent(tmp_path, "inputs.x: no such value")
    assert parent.supervision().step()
    started, failed = parent.events()
    assert isinstance(started, ev.TaskStarted) and started.worker == "me"
    assert isinstance(failed, ev.TaskFailed) and not failed.retryable
    assert failed.error == "inputs.x: no such value"
    assert parent.created == []


def test_a_child_is_created_watched_and_its_failure_reported(tmp_path: Path) -> None:
    """Created with its parent's origin; running, it is reported once; failed, it fails the
    attempt as retryable with its reason and what it spent."""
    parent = Parent(tmp_path, child_start())
    supervision = parent.supervision()
    parent.driven[CHILD] = child_history(failed=False)
    assert not supervision.step()
    assert not supervision.step()  # nothing changed: nothing more reported
    assert parent.created == [(CHILD, {"parent_run": "parent", "parent_task": "sub@1"})]
    started, updated = parent.events()
    assert isinstance(started, ev.TaskStarted)
    assert isinstance(updated, ev.ChildUpdated) and updated.status == "running"
    parent.driven[CHILD] = child_history(failed=True)
    assert supervision.step()
    failed = parent.events()[-1]
    assert isinstance(failed, ev.TaskFailed) and failed.retryable
    assert failed.error == f"child run {CHILD} failed: boom"
    assert failed.usage == {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
