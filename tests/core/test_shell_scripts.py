"""Data pasted into the script of `sh -c` (or `python -c`, ...) is warned about by `check`,
which suggests passing it as an argument; a one-line command is suggested in that form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from interlock.core.loader import parse_workflow
from interlock.core.parse import locator
from interlock.core.shell_scripts import as_arguments, script_warnings, shell_warnings
from interlock.errors import WorkflowError


@pytest.mark.parametrize(
    ("argv", "value", "runner"),
    [
        (["sh", "-c", "echo {topic} > {output}"], "{topic}", "sh -c"),
        (["bash", "-ec", "tool --item={item}"], "{item}", "bash -ec"),
        (["/bin/zsh", "-c", "cat {read:a.md}"], "{read:a.md}", "zsh -c"),
        (["env", "dash", "-c", "say {{ language }}"], "{{ language }}", "dash -c"),
        (["{python}", "-c", "print('{task}')"], "{task}", "python -c"),
        (["sudo", "python3.12", "-u", "-c", "x = '{topic}'"], "{topic}", "python -c"),
        (["node", "-e", "run(`{{ item }}`)"], "{{ item }}", "node -e"),
    ],
)
def test_a_value_pasted_into_a_script_is_warned_about(
    argv: list[str], value: str, runner: str
) -> None:
    """Each interpreter's code argument is found, and the value named with the safe form."""
    (warning,) = script_warnings(argv)
    assert f"{value!r} is pasted into the script of '{runner}'" in warning
    assert "pass it as an argument after the script" in warning


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", 'tool --topic "$1" > {output}', "sh", "{topic}"],  # the safe form
        ["sh", "script.sh", "{topic}"],  # a script file: its arguments are not code
        ["python3", "-m", "tool", "{topic}"],
        ["sh", "-c", "echo hi > {output} && ls {run_dir} {workflow_dir}"],  # paths only
        ["tool", "-c", "{topic}"],  # -c of a program that is no interpreter
        ["awk", "{print $1}", "{read:a.md}"],
    ],
)
def test_values_as_arguments_are_not_warned_about(argv: list[str]) -> None:
    """Values passed as arguments of their own, and paths interlock makes, are no warning."""
    assert script_warnings(argv) == []


def test_the_environment_variable_is_named_for_topic_item_and_task() -> None:
    """The warning names the variable the script can read instead."""
    (warning,) = script_warnings(["sh", "-c", "echo {item}"])
    assert 'or read "$INTERLOCK_ITEM"' in warning
    (warning,) = script_warnings(["python", "-c", "print('{topic}')"])
    assert 'or read os.environ["INTERLOCK_TOPIC"]' in warning
    assert "read sys.argv[1]: [python, -c, 'import sys; ... sys.argv[1]', '{topic}']" in warning


def test_a_one_line_command_is_suggested_with_its_values_as_arguments() -> None:
    """`command: "grep {topic} {read:a.md} > {output}"` is refused with a shell form that
    passes each value as an argument, never one pasted into the script."""
    suggestion = as_arguments("grep {topic} {read:a.md} > {output} && echo '{{ x }}'")
    assert suggestion == (
        """[sh, -c, 'grep "$1" "$2" > "$3" && echo ''"$4"''', sh, "{topic}", "{read:a.md}","""
        """ "{output}", "{{ x }}"]"""
    )
    data = {"p": {"phases": [{"id": "a", "workers": [
        {"role": "w", "final": True, "command": "grep {topic} {read:a.md}"}]}]}}  # fmt: skip
    with pytest.raises(WorkflowError) as info:
        parse_workflow(json.dumps(data), "f.json", json_only=True)
    (problem,) = info.value.problems
    assert """write [sh, -c, 'grep "$1" "$2"', sh, "{topic}", "{read:a.md}"]""" in problem
    assert '[sh, -c, "grep {topic}' not in problem


FLOW = """\
p:
  phases:
    - id: one
      workers:
        - role: a
          final: true
          command:
            - sh
            - -c
            - echo {topic} > {output}
"""


def test_shell_warnings_name_the_line_of_the_script() -> None:
    """The warning is placed at the script argument's line, with pipeline, phase and worker."""
    pipeline = parse_workflow(FLOW, "flow.yaml").get("p").pipeline
    (warning,) = shell_warnings("p", pipeline, locator(FLOW))
    assert warning.startswith(
        "line 10: pipeline 'p', phase 'one', worker 'a', key 'command': argument 3: '{topic}'"
    )


def test_check_prints_the_warning_and_still_passes(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock check` exits 0 and prints the warning with the file and line."""
    (tmp_path / "flow.yaml").write_text(FLOW)
    result = subprocess.run(
        [sys.executable, "-m", "interlock", "check", "flow.yaml"],
        env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: flow.yaml: line 10: pipeline 'p'" in result.stderr
    assert """[sh, -c, 'tool "$1"', sh, '{topic}'], or read "$INTERLOCK_TOPIC\"""" in (
        result.stderr
    )
