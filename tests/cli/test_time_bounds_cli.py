"""A delay or a start time interlock cannot keep is refused before a run is recorded, so the
listing commands keep working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WRITE = '["sh", "-c", "echo ok > \\"$INTERLOCK_OUTPUT\\"", "sh"]'
FLOW = f"""\
p:
  inputs:
    when: 1800000000
  phases:
    - id: one
      workers:
        - {{role: a, command: {WRITE}}}
    - id: two
      KEY
      workers:
        - {{role: w, command: {WRITE}, final: true}}
"""


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_a_delay_of_a_billion_days_is_refused_by_check_and_run(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`delay: 1000000000d` is a check error (exit 2) and no run is recorded; runs still lists."""
    (tmp_path / "flow.yaml").write_text(FLOW.replace("KEY", "delay: 1000000000d"))
    checked = interlock(cli_env, tmp_path, "check", "flow.yaml")
    assert checked.returncode == 2
    assert "line 9: pipeline 'p', phase 'two', key 'delay': delay is 1,000,000,000 days" in (
        checked.stderr
    )
    ran = interlock(cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x")
    assert ran.returncode == 2 and "past the longest wait" in ran.stderr
    assert interlock(cli_env, tmp_path, "runs").returncode == 0


def test_an_input_that_puts_not_before_past_9999_refuses_the_run(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`--input when=2e14` for `not_before: inputs.when` is refused (exit 2), nothing
    recorded, and the default's date runs as before."""
    (tmp_path / "flow.yaml").write_text(FLOW.replace("KEY", "not_before: inputs.when"))
    assert interlock(cli_env, tmp_path, "check", "flow.yaml").returncode == 0
    ran = interlock(
        cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x", "-i", "when=200000000000000"
    )
    assert ran.returncode == 2, ran.stderr
    assert "phase 'two', not_before: expression 'inputs.when' gave a time" in ran.stderr
    assert "nothing was recorded" in ran.stderr
    listed = interlock(cli_env, tmp_path, "runs")
    assert listed.returncode == 0 and "p-" not in listed.stdout


def test_a_text_input_that_is_no_time_refuses_the_run(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`--input at=99999-01-01T00:00:00Z` for `not_before: inputs.at` is refused (exit 2)
    before anything is recorded, the value quoted as text."""
    flow = FLOW.replace("when: 1800000000", "at: {type: string, required: true}")
    (tmp_path / "flow.yaml").write_text(flow.replace("KEY", "not_before: inputs.at"))
    assert interlock(cli_env, tmp_path, "check", "flow.yaml").returncode == 0
    ran = interlock(
        cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x", "-i", "at=99999-01-01T00:00:00Z"
    )
    assert ran.returncode == 2, ran.stderr
    assert (
        "phase 'two', not_before: expression 'inputs.at' gave \"99999-01-01T00:00:00Z\""
        in ran.stderr
    )
    assert "nothing was recorded" in ran.stderr and "StringType" not in ran.stderr
    listed = interlock(cli_env, tmp_path, "runs")
    assert listed.returncode == 0 and "p-" not in listed.stdout
