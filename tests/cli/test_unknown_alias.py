"""A run whose model alias the configuration does not define is refused before it is recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLOW = """\
p:
  phases:
    - id: a
      workers:
        - role: w
          final: true
          model: sonnet
          task: "Write about {{ topic }}."
"""


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_a_run_on_an_alias_the_configuration_lacks_exits_2_and_records_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """With an interlock.toml that defines no such alias, `run` names the alias and the fix,
    exits 2 and leaves no run behind (before, a run was recorded and failed at dispatch)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "flow.yaml").write_text(FLOW)
    (project / "interlock.toml").write_text('[retention]\nolder_than = "30d"\n')
    refused = cli(cli_env, project, "run", "flow.yaml", "p", "--topic", "tides")
    assert refused.returncode == 2, refused.stderr
    assert "unknown model alias 'sonnet'" in refused.stderr
    assert "[models.sonnet]" in refused.stderr and "nothing was recorded" in refused.stderr
    listed = cli(cli_env, project, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() in ("", "[]"), listed.stdout
