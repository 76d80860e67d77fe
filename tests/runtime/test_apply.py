"""The runtime starts and stops only what the run's step asks for (`runtime/apply.py`)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from interlock import Interlock, RunStatus
from interlock.core import events as ev
from interlock.engine import RunMachine
from interlock.engine import effects as fx

ROOT = Path(__file__).resolve().parents[2]
RESEARCH = ROOT / "examples" / "research.json"


def test_every_started_attempt_was_asked_for_by_the_machine(
    app: Interlock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attempt the runtime starts is one a `StartAttempt` effect asked for, and the run's
    end is carried out from the machine's `Archive` and `RefreshStatus` effects."""
    asked: list[fx.Effect] = []
    effects = RunMachine.effects

    def recording(self: RunMachine, *args: Any, **kwargs: Any) -> list[fx.Effect]:
        made = effects(self, *args, **kwargs)
        asked.extend(made)
        return made

    monkeypatch.setattr(RunMachine, "effects", recording)
    state = app.run(RESEARCH, "research", topic="applier")
    assert state.status is RunStatus.DELIVERED and state.archived
    started = {
        (s.event.task_id, s.event.attempt)
        for s in app.events(state.run_id)
        if isinstance(s.event, ev.TaskStarted)
    }
    starts = {(e.task_id, e.attempt) for e in asked if isinstance(e, fx.StartAttempt)}
    assert started and started == starts
    assert any(isinstance(e, fx.Archive) for e in asked)
    assert any(isinstance(e, fx.RefreshStatus) for e in asked)


def test_an_attempt_the_machine_does_not_ask_for_is_not_started(
    app: Interlock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leave one task's `StartAttempt` out of every step and the runtime never starts it: the
    driver has no decision of its own that would start it anyway."""
    effects = RunMachine.effects

    def without_b(self: RunMachine, *args: Any, **kwargs: Any) -> list[fx.Effect]:
        made = effects(self, *args, **kwargs)
        return [
            e
            for e in made
            if not (isinstance(e, fx.StartAttempt) and e.task_id == "researcher-b@1")
        ]

    monkeypatch.setattr(RunMachine, "effects", without_b)
    run_id = app.start(RESEARCH, "research", topic="held back")
    with contextlib.suppress(TimeoutError):  # it waits for researcher-b for ever
        asyncio.run(asyncio.wait_for(app.drive_async(run_id), 3.0))
    kinds = [
        (type(s.event).__name__, getattr(s.event, "task_id", None)) for s in app.events(run_id)
    ]
    assert ("TaskStarted", "researcher-a@1") in kinds
    assert ("TaskStarted", "researcher-b@1") not in kinds
    assert ("TaskDispatched", "researcher-b@1") in kinds
