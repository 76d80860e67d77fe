"""Regexes, templates and inputs from a workflow or a run cannot take `check` or `run` down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

WORKER = """\
p:
  phases:
    - id: a
      workers:
        - role: w
          final: true
          timeout: 5
          command: [sh, -c, 'printf %s "$0" > "$1"', aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab, "{output}"]
"""


WRITE = """[sh, -c, 'printf %s "$0" > "$1"', aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab, "{output}"]"""


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_check_refuses_a_template_that_asks_for_gigabytes(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`check` exits 2 naming the line and the size limit instead of filling memory."""
    (tmp_path / "flow.yaml").write_text(WORKER + "          task: \"{{ 'x' * 10**10 }}\"\n")
    result = interlock(cli_env, tmp_path, "check", "flow.yaml")
    assert result.returncode == 2, result.stderr
    assert "line 9:" in result.stderr and "task template passes a limit" in result.stderr
    assert "past the limit of 1,000,000 (max_task_size" in result.stderr


def test_run_fails_the_attempt_naming_the_limit_and_matches_regexes_in_linear_time(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A template too large only with the run's topic fails its attempt saying which limit;
    a nested-repeat regex over the output is answered at once."""
    flow = (
        "p:\n"
        "  phases:\n"
        "    - id: first\n"
        "      workers:\n"
        "        - role: v\n"
        f"          command: {WRITE}\n"
        "          extract:\n"
        "            v: {regex: '^(a+)+$', required: false}\n"
        "    - id: second\n"
        "      workers:\n"
        "        - role: w\n"
        "          final: true\n"
        "          command: [sh, -c, 'printf ok > \"$0\"', \"{output}\"]\n"
        "          task: \"{% for a in range(100000) %}{{ topic }}{% endfor %}\"\n"
    )  # fmt: skip
    (tmp_path / "flow.yaml").write_text(flow)
    assert interlock(cli_env, tmp_path, "check", "flow.yaml").returncode == 0
    result = interlock(cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x" * 20)
    assert result.returncode == 1, result.stderr
    said = result.stdout + result.stderr
    assert "task template passes a limit: the rendered text would have" in said, said
    assert "internal error" not in said and "MemoryError" not in said
    assert re.search(r"task_completed +task_id=v@1", said), said  # the regex found nothing


def test_an_input_past_the_size_limit_exits_2(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`--input` with more than 100,000 characters is refused before the run is recorded."""
    (tmp_path / "flow.yaml").write_text(
        WORKER.replace("p:\n", "p:\n  inputs:\n    big: ''\n", 1) + "          task: '{{ big }}'\n"
    )
    result = interlock(
        cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x", "-i", "big=" + "y" * 100_001
    )
    assert result.returncode == 2, result.stderr
    assert "input 'big' has 100,001 characters" in result.stderr
    assert not (tmp_path / ".interlock").exists() or "run " not in result.stderr
