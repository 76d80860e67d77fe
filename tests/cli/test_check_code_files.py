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


def test_run_and_batch_refuse_a_missing_script_before_anything_is_paid(tmp_path: Path) -> None:
    """`check` warns (the file may be put there before a run); `run` and `batch` refuse, with
    the same words and exit 2, before anything is recorded: the run would pay for the tasks
    before that one and then fail there."""
    (tmp_path / "flow.yaml").write_text(FLOW)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "rows.csv").write_text("topic\na\n")
    home = str(tmp_path / "home")
    flow = str(tmp_path / "flow.yaml")
    for args in (
        ["run", flow, "p", "--topic", "t"],
        ["batch", flow, "p", "--inputs", str(tmp_path / "rows.csv")],
    ):
        refused = CliRunner().invoke(cli, ["--home", home, *args])
        assert refused.exit_code == 2, (args, refused.output)
        assert "nothing was recorded" in refused.output
        assert "line 9: pipeline 'p', phase 'one', worker 'w', key 'command'" in refused.output
        assert "which is not there" in refused.output
    listed = CliRunner().invoke(cli, ["--home", home, "runs"])
    assert "no runs yet" in listed.output, listed.output
