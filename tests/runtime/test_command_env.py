"""What a `command:` worker's environment holds: the allow-list every started program gets,
its INTERLOCK_* variables, and the variables its worker and pipeline name under `env:`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from interlock import Interlock
from interlock.core.loader import parse_workflow
from interlock.core.state import RunStatus
from interlock.errors import WorkflowError
from interlock.providers.cli_env import ALLOWED, ALLOWED_PREFIXES
from interlock.runtime.orchestrator import Settings

TASK_VARIABLES = {
    "INTERLOCK_OUTPUT",
    "INTERLOCK_TASK",
    "INTERLOCK_TOPIC",
    "INTERLOCK_RUN_ID",
    "INTERLOCK_TASK_ID",
    "INTERLOCK_ATTEMPT",
    "INTERLOCK_INPUTS",
    "INTERLOCK_ITEM",
    "INTERLOCK_IDEMPOTENCY_KEY",
    "INTERLOCK_RUN_DIR",
}
NAMES = (
    "import json, os; "
    "open(os.environ['INTERLOCK_OUTPUT'], 'w').write(json.dumps(sorted(os.environ)))"
)


def test_a_command_gets_only_allowed_task_and_named_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a token secret, a database URL, a provider key and stray variables in the
    environment of the process that runs it, a command sees only the allow-list, its ten
    INTERLOCK_* variables and what its pipeline's and its own `env:` name."""
    for name, value in {
        "INTERLOCK_AUTH_SECRET": "a-server-token-secret-of-32-bytes-or-more",
        "INTERLOCK_STORE": "postgresql://app:pw-of-the-db@db.internal/ledger",
        "OPENAI_API_KEY": "sk-not-for-commands-0123456789",
        "PIPELINE_WIDE": "one",
        "WORKER_OWN": "two",
        "LC_ALL": "C.UTF-8",
    }.items():
        monkeypatch.setenv(name, value)
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        textwrap.dedent(f"""
        p:
          env: [PIPELINE_WIDE]
          phases:
            - id: a
              workers:
                - role: plain
                  command: [{json.dumps(sys.executable)}, -c, {json.dumps(NAMES)}]
                - role: named
                  env: [WORKER_OWN, NOT_SET_ANYWHERE]
                  command: [{json.dumps(sys.executable)}, -c, {json.dumps(NAMES)}]
                  final: true
        """)
    )
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05))
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    run_dir = app.run_dir(state.run_id)
    plain = set(json.loads((run_dir / "plain.md").read_text()))
    named = set(json.loads((run_dir / "named.md").read_text()))
    app.close()
    assert plain >= TASK_VARIABLES | {"PATH", "LC_ALL"}
    assert named - plain == {"WORKER_OWN"}
    assert "PIPELINE_WIDE" in plain
    for names in (plain, named - {"WORKER_OWN"}):
        others = {n for n in names - TASK_VARIABLES if not n.startswith(ALLOWED_PREFIXES)}
        # What the interpreter's launcher may add itself (PWD): nothing of the parent's.
        assert others <= ALLOWED | {"PIPELINE_WIDE", "PWD"}, others - ALLOWED


@pytest.mark.parametrize(
    ("worker", "said"),
    [
        ("{role: m, model: fast, env: [X]}", "'env' only applies to command workers"),
        ("{role: c, call: 'a.b:c', env: [X]}", "'env' only applies to command workers"),
        (
            "{role: c, command: [echo], env: ['sk-live-0123456789abcdef=value']}",
            "env item 1 is not a variable's name",
        ),
    ],
)
def test_env_is_refused_where_it_cannot_apply_and_never_echoes_a_value(
    worker: str, said: str
) -> None:
    """`env:` on a worker that starts no program is refused saying where it applies; an item
    that is not a variable's name is refused by its position, never repeated (it may be a
    pasted key)."""
    text = f"p:\n  phases:\n    - id: a\n      workers:\n        - {worker}\n"
    with pytest.raises(WorkflowError) as refused:
        parse_workflow(text)
    assert said in str(refused.value)
    assert "sk-live-0123456789abcdef" not in str(refused.value)


def test_check_accepts_env_and_the_pinned_definition_keeps_its_hash_without_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`interlock check` takes `env:` at both levels; a pipeline that does not use it keeps
    the definition hash it had (the key is left out of the canonical form when empty)."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  env: [A_B]\n  phases:\n    - id: a\n      workers:\n"
        "        - {role: c, command: [echo, hi], env: [C_D], final: true}\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "interlock", "check", str(flow)],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    without = (
        "p:\n  phases:\n    - id: a\n      workers:\n"
        "        - {role: c, command: [echo], final: true}\n"
    )
    pipeline = parse_workflow(without).get("p").pipeline
    assert "env" not in pipeline.model_dump(mode="json", by_alias=True)
    assert "env" not in pipeline.phases[0].workers[0].model_dump(mode="json", by_alias=True)


def test_check_warns_about_variables_a_command_reads_but_will_not_get(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`interlock check` names each variable a command's script reads (`$NAME` in a shell
    script, `os.environ[...]` / `getenv(...)` in a Python one-liner) that it will not get,
    with the `env:` line that fixes it; what it gets (the allow-list, INTERLOCK_*, its `env:`)
    and what the script sets itself are not named, and the file is still ok."""
    flow = tmp_path / "flow.yaml"
    script = (
        'X=1; echo "$X $HOME $LISTED $INTERLOCK_OUTPUT $DEPLOY_TOKEN $PPID" > "$INTERLOCK_OUTPUT"'
        "; for f in a; do echo $f; done"
    )
    python = "import os; print(os.environ['DB_URL'], os.getenv('LC_ALL'), os.environ.get('OWN'))"
    flow.write_text(
        textwrap.dedent(f"""
        p:
          env: [LISTED]
          phases:
            - id: a
              workers:
                - {{role: s, command: [sh, -c, {json.dumps(script)}]}}
                - role: py
                  command: [python3, -c, {json.dumps(python)}]
                  env: [OWN]
                  final: true
        """)
    )
    checked = subprocess.run(
        [sys.executable, "-m", "interlock", "check", str(flow)],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    said = " ".join(checked.stderr.split())
    assert "worker 's': its command reads $DEPLOY_TOKEN, which it will not get" in said
    assert "add env: [DEPLOY_TOKEN] to the worker or the pipeline" in said
    assert "worker 'py': its command reads the environment variable DB_URL," in said
    for name in ("$X", "$HOME", "$LISTED", "$INTERLOCK_OUTPUT", "$PPID", "$f", "$LC_ALL", "$OWN"):
        assert f"reads {name}," not in said


def test_check_names_the_line_node_reads_and_env_names_that_are_not_set(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`check` warns with "FILE: line N:" about a Node one-liner's `process.env.API_KEY`,
    a Python one-liner's `os.environ["DB_URL"]` (as "the environment variable DB_URL") and a
    name under `env:` that is not set in its environment."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        textwrap.dedent("""
        p:
          phases:
            - id: a
              workers:
                - role: js
                  command: [node, -e, 'console.log(process.env.API_KEY, process.env["OTHER"])']
                - role: py
                  command: [python3, -c, 'import os; print(os.environ["DB_URL"])']
                  env: [MY_TOKEN_NOT_SET]
                  final: true
        """)
    )
    cli_env.pop("MY_TOKEN_NOT_SET", None)
    checked = subprocess.run(
        [sys.executable, "-m", "interlock", "check", "-q", str(flow)],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    said = " ".join(checked.stderr.split())
    assert (
        f"warning: {flow}: line 7: pipeline 'p', worker 'js': its command reads the "
        "environment variable API_KEY, which it will not get" in said
    )
    assert "reads the environment variable OTHER," in said
    assert (
        f"warning: {flow}: line 9: pipeline 'p', worker 'py': its command reads the "
        "environment variable DB_URL," in said
    )
    assert (
        f"warning: {flow}: line 10: pipeline 'p', worker 'py': MY_TOKEN_NOT_SET, listed "
        "under 'env:', is not set in this environment" in said
    )


def test_a_failed_command_says_which_variable_it_lacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command failing with `KeyError: 'MY_TOKEN'` for a variable set here but not passed
    is told that commands get only the allow-list and `env:` (MY_TOKEN is not passed); one
    whose `env:` names an unset variable is told that it is not set."""
    monkeypatch.setenv("MY_TOKEN", "a-value-that-is-set")
    monkeypatch.delenv("UNSET_TOKEN", raising=False)
    reads = "import os; print(os.environ['MY_TOKEN'])"
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        textwrap.dedent(f"""
        p:
          phases:
            - id: a
              workers:
                - role: w
                  command: [{json.dumps(sys.executable)}, -c, {json.dumps(reads)}]
                  final: true
        q:
          phases:
            - id: a
              workers:
                - role: u
                  command: [sh, -c, 'test -n "$UNSET_TOKEN" || exit 3']
                  env: [UNSET_TOKEN]
                  final: true
        """)
    )
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05))
    lacked = app.run(flow, "p", topic="t")
    unset = app.run(flow, "q", topic="t")
    app.close()
    assert lacked.status is RunStatus.FAILED and unset.status is RunStatus.FAILED
    assert "KeyError: 'MY_TOKEN'" in (lacked.failure or "")
    assert (lacked.failure or "").endswith(
        "; commands get only the allow-listed variables and those under env: "
        "(MY_TOKEN is not passed)"
    )
    assert (unset.failure or "").endswith(
        "(nothing on stderr); note: UNSET_TOKEN, listed under env:, is not set"
    )
