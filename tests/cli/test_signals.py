"""Stopping a driven run from outside: SIGTERM is Ctrl-C, and a stopped run says it is not
driven and how to continue it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.test_cli import cli


def slow_flow(tmp_path: Path, seconds: float = 3.0) -> Path:
    """A one-task pipeline whose command sleeps, then writes its output."""
    flow = tmp_path / "slow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      command: ['{sys.executable}', '-c', 'import time,os; time.sleep({seconds}); "
        'open(os.environ["INTERLOCK_OUTPUT"], "w").write("ok")\']\n'
    )
    return flow


def start_until_running(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `interlock ARGS` and return once its task has started, with the run id."""
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    run_id = ""
    while True:
        line = process.stdout.readline()
        assert line, "the run ended before its task started"
        if "run_created" in line:
            run_id = line.split("run_id=")[1].split()[0]
        if "task_started" in line:
            return process, run_id


def test_sigterm_stops_like_ctrl_c(cli_env: dict[str, str], tmp_path: Path) -> None:
    """SIGTERM exits 130 with the resume command naming the run; status and runs say no
    orchestrator drives it; `resume` delivers it."""
    process, run_id = start_until_running(
        cli_env, "run", str(slow_flow(tmp_path)), "p", "--topic", "x"
    )
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert f"interlock resume {run_id}" in stderr and "Traceback" not in stderr
    status = cli(cli_env, "status", run_id)
    assert "not driven" in status.stdout and f"interlock resume {run_id}" in status.stdout
    listing = cli(cli_env, "runs")
    assert "running (not driven)" in listing.stdout
    assert f"interlock resume {run_id}" in listing.stdout
    resumed = cli(cli_env, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.usefixtures("sigint_default")
def test_ctrl_c_names_the_run_to_resume(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Ctrl-C exits 130 and the hint names the actual run id, not a placeholder."""
    process, run_id = start_until_running(
        cli_env, "run", str(slow_flow(tmp_path)), "p", "--topic", "x"
    )
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert f"interlock resume {run_id}" in stderr
