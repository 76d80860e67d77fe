"""The commands that show a run live, on a real terminal (a pseudo-terminal): what a person
typing them sees, where the tests elsewhere read pipes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli import RESEARCH

HIDE, SHOW = "\x1b[?25l", "\x1b[?25h"  # the cursor, hidden while a live display runs


def on_terminal(env: dict[str, str], *args: str, cwd: Path) -> tuple[int, str]:
    """`interlock ARGS` with stdin, stdout and stderr on a pseudo-terminal: (exit code, all
    it wrote)."""
    leader, follower = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", *args],
        env={**env, "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"},
        stdin=follower, stdout=follower, stderr=follower, cwd=cwd, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_run_shows_its_progress_and_delivers_on_a_terminal(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    code, text = on_terminal(cli_env, "run", RESEARCH, "research", "-t", "tty", cwd=tmp_path)
    assert code == 0, text
    assert "internal error" not in text and "Traceback" not in text, text
    assert "synthesizer" in text and "completed" in text  # the live table
    assert re.search(r"delivered: .*final\.md", text), text
    assert text.count(HIDE) == text.count(SHOW) >= 1  # the cursor given back


def test_a_pause_approve_and_watch_on_a_terminal(cli_env: dict[str, str], tmp_path: Path) -> None:
    flow = tmp_path / "announce.yaml"
    made = subprocess.run(
        [sys.executable, "-m", "interlock", "init", str(flow), "-t", "approval"],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    args = ("run", str(flow), "announce", "-t", "tty", "--run-id", "gate")
    code, text = on_terminal(cli_env, *args, cwd=tmp_path)
    assert code == 3, text  # paused
    assert "interlock approve gate" in text, text
    code, text = on_terminal(cli_env, "approve", "gate", cwd=tmp_path)
    assert code == 0, text
    assert "delivered" in text and "internal error" not in text, text
    code, text = on_terminal(cli_env, "watch", "gate", cwd=tmp_path)
    assert code == 0 and "delivered" in text, text
    assert text.count(HIDE) == text.count(SHOW)
