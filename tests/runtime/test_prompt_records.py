"""Prompt records: written once the call's request is on its way, on disk before its outcome
is recorded, and never a reason for a call to fail."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from interlock import Interlock
from interlock.core.state import RunState
from interlock.storage.base import NewEvent

WORKFLOW = """
ask:
  phases:
    - id: p
      workers:
        - {role: w, model: m, task: "Say hello", final: true, retries: 1}
"""
CONFIG = """
[providers.p]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_attempts = 1

[models.m]
provider = "p"
model = "x"
"""


def test_each_attempt_has_its_record_when_its_outcome_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLOCK_CONFIG", "")
    (tmp_path / "interlock.toml").write_text(CONFIG)  # nothing listens: refused at once
    app = Interlock(tmp_path / "home")
    seen: list[tuple[int, bool]] = []

    def listen(run_id: str, seq: int, new: NewEvent, state: RunState) -> None:
        event = new.event
        if type(event).__name__ == "TaskFailed":
            record = app.run_dir(run_id) / "prompts" / f"{event.task_id}.{event.attempt}.md"  # type: ignore[attr-defined]
            seen.append((event.attempt, record.is_file() and "Say hello" in record.read_text()))  # type: ignore[attr-defined]

    app.orchestrator.listeners.append(listen)
    (tmp_path / "ask.yaml").write_text(WORKFLOW)
    state = app.run(tmp_path / "ask.yaml", "ask", topic="t")
    assert state.status == "failed"
    assert seen == [(1, True), (2, True)]
    app.close()


def test_a_record_that_cannot_be_written_does_not_fail_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("INTERLOCK_CONFIG", "")
    (tmp_path / "interlock.toml").write_text(CONFIG)
    (tmp_path / "ask.yaml").write_text(WORKFLOW)
    app = Interlock(tmp_path / "home")
    run_id = app.start(tmp_path / "ask.yaml", "ask", topic="t")
    (app.run_dir(run_id) / "prompts").write_text("in the way")  # a file where the folder goes
    with caplog.at_level(logging.WARNING, logger="interlock.runtime"):
        state = app.drive(run_id)
    errors = [e.data["error"] for e in app.events(run_id) if e.kind == "task_failed"]
    assert state.status == "failed" and len(errors) == 2
    assert all("connection to" in error for error in errors)  # the call was made, and refused
    assert "cannot write the prompt record" in caplog.text
    app.close()
