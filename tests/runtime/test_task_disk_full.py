"""A task that meets a full disk while it starts is a failed attempt that says so, not a crash
logged with a traceback."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from interlock import Interlock, RunStatus
from interlock.core import events as ev
from interlock.runtime import processes
from interlock.runtime.orchestrator import Settings

from .conftest import WriteWorkflow


def test_a_full_disk_when_a_command_starts_fails_the_attempt_plainly(
    tmp_path: Path,
    write_workflow: WriteWorkflow,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The process record of a command cannot be written (ENOSPC): the attempt fails with
    "disk full ... (ENOSPC)", and the log says so without a traceback."""
    path = write_workflow("""
        p:
          phases:
            - id: only
              workers:
                - role: w
                  final: true
                  command: ["sh", "-c", 'echo x > "$INTERLOCK_OUTPUT"']
    """)

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(processes, "record", full)
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05))
    try:
        with caplog.at_level(logging.ERROR, logger="interlock.runtime"):
            state = app.run(path, topic="t")
        assert state.status is RunStatus.FAILED
        failed = [s.event for s in app.events(state.run_id) if isinstance(s.event, ev.TaskFailed)]
        assert failed and all("disk full" in f.error and "ENOSPC" in f.error for f in failed)
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    finally:
        app.close()
