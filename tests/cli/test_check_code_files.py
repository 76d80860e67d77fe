"""`check` warns about a script its commands run from beside the workflow that is not
there (a workflow copied without its scripts), and not about data files or present scripts."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from interlock.cli.main import cli

FLOW = """\
p:
  phases:
    - id: one
      workers:
        - role: v
          command: ["{workflow_dir}/scripts/tool", "{workflow_dir}/data/in.txt", "{output}"]
        - role: w
          final: true
          command: [python3, "{workflow_dir}/scripts/clean.py", "{output}"]
"""


def test_a_missing_script_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(FLOW)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "tool").write_text("#!/bin/sh\n")
    checked = CliRunner().invoke(cli, ["check", str(tmp_path / "flow.yaml")])
    assert checked.exit_code == 0, checked.output
    said = checked.output
    assert "line 9: pipeline 'p', phase 'one', worker 'w', key 'command'" in said
    assert "'{workflow_dir}/scripts/clean.py', which is not there" in said
    assert "scripts/tool" not in said  # present
    assert "in.txt" not in said  # data, not code
    (tmp_path / "scripts" / "clean.py").write_text("")
    again = CliRunner().invoke(cli, ["check", str(tmp_path / "flow.yaml")])
    assert "not there" not in again.output
