"""Commands refused or with nothing to act on leave a directory without a ledger as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLOW = """\
p:
  inputs: {n: 1}
  phases:
    - id: a
      workers: [{role: w, final: true, command: ["sh", "-c", "echo hi > {output}"]}]
"""


def test_refused_and_empty_commands_create_no_ledger(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A run or submit refused for its inputs or pipeline, commands on runs that cannot
    exist, and the cache and prune with nothing recorded answer without making `.interlock/`
    (which would turn the next command's "no ledger here" into "no such run")."""
    (tmp_path / "flow.yaml").write_text(FLOW)
    env = {k: v for k, v in cli_env.items() if k != "INTERLOCK_HOME"}
    for args, code in [
        (["run", "flow.yaml", "p", "-t", "x", "-i", "n=four"], 2),
        (["run", "flow.yaml", "p", "-t", "x", "-i", "m=1"], 2),
        (["submit", "flow.yaml", "p", "-t", "x", "-i", "n=1.5"], 2),
        (["submit", "flow.yaml", "nope", "-t", "x"], 2),
        (["diff", "a", "b"], 2),
        (["rerun", "nope"], 2),
        (["rerun", "nope", "--dry-run"], 2),
        (["edit", "nope", "w.md", "--file", "flow.yaml"], 2),
        (["reject", "nope", "--to", "a", "-m", "again"], 2),
        (["cache", "list"], 0),
        (["cache", "clear"], 0),
        (["prune", "--older-than", "1d"], 0),
        (["prune", "--older-than", "1d", "--dry-run"], 0),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr
        assert result.returncode == code, (args, result.stderr)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.yaml"], args


def test_a_run_refused_for_its_configuration_creates_no_ledger(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An `interlock.toml` that does not parse refuses a run or a submit of model workers
    before the ledger is opened, so nothing is left behind to clean up."""
    flow = FLOW.replace('command: ["sh", "-c", "echo hi > {output}"]', "model: fast")
    (tmp_path / "flow.yaml").write_text(flow)
    (tmp_path / "interlock.toml").write_text("[models\nfast = 1\n")
    env = {k: v for k, v in cli_env.items() if k != "INTERLOCK_HOME"}
    for command in ("run", "submit"):
        result = subprocess.run(
            [sys.executable, "-m", "interlock", command, "flow.yaml", "p", "-t", "x"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr
        assert result.returncode == 2, (command, result.stderr)
        assert "nothing was recorded" in result.stderr and "interlock.toml" in result.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.yaml", "interlock.toml"]
