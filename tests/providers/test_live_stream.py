"""`interlock run` on a terminal shows what a model streams while its call runs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from interlock.cli import foreground
from interlock.errors import ExitCode

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project, one_worker


def test_a_terminal_shows_the_latest_streamed_line_while_the_call_runs(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the server pauses after its first fragment, the live view on a terminal shows
    that fragment's last line under the table and its clock goes on; the run is delivered
    as before."""
    # Long enough to show before the rest comes: the end of what came is held back while a
    # key split across fragments could still be masked (`MaskedStream`).
    server.state.reply = ["Title\n\nThe first words come first, and go on" + " and on" * 30, "."]
    server.fail_next(Fault(stall=1.0))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    run_id = app.start(one_worker(project, "      model: gpt\n"), "p", topic="t")
    terminal = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    monkeypatch.setattr(foreground, "out", terminal)
    assert foreground.drive_in_foreground(app, run_id) == int(ExitCode.OK)
    assert isinstance(terminal.file, io.StringIO)
    shown = terminal.file.getvalue()
    assert "The first words come first, and go on and on" in shown, shown
    # The clock went on while no event came (the server's pause): frames of several times.
    assert len(set(re.findall(r"running\s+(\d+\.\d)s", shown))) >= 3, shown
    assert app.state(run_id).status.value == "delivered"
