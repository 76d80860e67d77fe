"""A command's placeholders are filled as the README says, `{read:NAME}` included."""

from __future__ import annotations

import sys
from pathlib import Path

from interlock import Interlock
from interlock.core.state import RunStatus

from .conftest import WriteWorkflow

COPY = "import sys; r = lambda p: open(p).read(); open(sys.argv[1], 'w').write(r(sys.argv[2]) + r(sys.argv[3]))"  # noqa: E501


def test_read_and_input_placeholders_are_the_path_of_a_read_file(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """`{read:a.md}` and its older spelling `{input:a.md}` are both the path of a's output."""
    path = write_workflow(f"""
        p:
          phases:
            - id: one
              workers:
                - role: a
                  command: ["{sys.executable}", "-c", "import sys; open(sys.argv[1], 'w').write('A')", "{{output}}"]
            - id: two
              workers:
                - role: b
                  final: true
                  reads: [a.md]
                  command: ["{sys.executable}", "-c", "{COPY}", "{{output}}", "{{read:a.md}}", "{{input:a.md}}"]
    """)  # noqa: E501
    state = app.run(path, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    final = tmp_path / "home" / "archive" / state.run_id / "final.md"
    assert final.read_text() == "AA"


def test_shell_braces_after_a_dollar_are_no_placeholder(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`${DB_URL:-none}` and `${output}` in a shell script pass `check` and reach the shell
    as written (`${output}` is the shell's variable, not the output path), while `{output}`
    as an argument is still the output path."""
    import subprocess

    script = 'output=shellvar; echo "${DB_URL:-none} ${output}" > "$1"'
    path = write_workflow(f"""
        p:
          phases:
            - id: one
              workers:
                - role: a
                  final: true
                  command: [sh, -c, '{script}', sh, "{{output}}"]
    """)
    checked = subprocess.run(
        [sys.executable, "-m", "interlock", "check", "-q", str(path)],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "placeholder" not in checked.stderr and "$DB_URL" in checked.stderr
    state = app.run(path, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    final = tmp_path / "home" / "archive" / state.run_id / "final.md"
    assert final.read_text().split()[:2] == ["none", "shellvar"]
