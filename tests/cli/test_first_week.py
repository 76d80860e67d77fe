"""What a new user meets in the first week, through the real `interlock` command: which
interlock.toml a command reads, and saying so."""

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
          model: fast
          task: "Write about {{ topic }}."
"""


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, run in `cwd`; never a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_the_project_config_is_read_for_a_workflow_in_a_subfolder_and_named(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An interlock.toml in the project folder, a workflow in `flows/`: outside a repository
    `check` refuses the alias naming the file it is defined in (before: ok, then the offline
    stand-in), and `--config` names it; inside one (`.git`), `check`, `run` and `status`
    read it and say so."""
    project = tmp_path / "project"
    (project / "flows").mkdir(parents=True)
    (project / "flows" / "flow.yaml").write_text(FLOW)
    config = project / "interlock.toml"
    config.write_text('[models.fast]\nprovider = "offline"\nmodel = "stand-in"\n')
    refused = cli(cli_env, project / "flows", "check", "flow.yaml")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"'fast' is defined in {config}, which is not read" in refused.stderr
    named = cli(cli_env, project / "flows", "--config", str(config), "check", "flow.yaml")
    assert named.returncode == 0, named.stderr
    assert f"config: {config}" in named.stdout.splitlines()
    (project / ".git").mkdir()
    checked = cli(cli_env, project, "check", "flows/flow.yaml")
    assert checked.returncode == 0, checked.stderr
    assert f"config: {config}" in checked.stdout.splitlines()
    ran = cli(cli_env, project, "run", "flows/flow.yaml", "--topic", "tides")
    assert ran.returncode == 0, ran.stderr
    assert f"config: {config}" in ran.stderr.splitlines()
    assert "no provider configured" not in ran.stdout + ran.stderr
    run_id = ran.stderr.split("run ", 1)[1].split()[0]
    status = cli(cli_env, project, "status", run_id)
    assert f"config: {config}" in status.stdout.splitlines(), status.stdout


def test_check_warns_about_a_value_yaml_typed_from_a_word(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`country: NO` checks ok, with a warning at its line that YAML made it false."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  inputs:\n    country: {default: NO}\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, final: true, command: ['sh', '-c', 'echo {{ country }} > {output}']}\n"
    )
    checked = cli(cli_env, tmp_path, "check", "flow.yaml")
    assert checked.returncode == 0, checked.stderr
    assert (
        "warning: flow.yaml: line 3: NO is read by YAML as the boolean false: quote it ('NO')"
        in checked.stderr
    )


def test_a_message_to_a_finished_run_is_refused_not_said_queued(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A note to a delivered run exits 2 saying the run ended and nothing was recorded; the
    run's history holds no note (before: "message queued", never recorded)."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, final: true, command: ['sh', '-c', 'echo hi > {output}']}\n"
    )
    ran = cli(cli_env, tmp_path, "run", "flow.yaml", "--topic", "t")
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stderr.split("run ", 1)[1].split()[0]
    refused = cli(cli_env, tmp_path, "message", run_id, "checked the sources")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "queued" not in refused.stdout + refused.stderr
    assert f"run {run_id} already ended (delivered)" in refused.stderr
    assert "nothing was recorded" in refused.stderr
    events = cli(cli_env, tmp_path, "events", run_id, "--json")
    assert "checked the sources" not in events.stdout


def test_check_and_run_name_the_configuration_a_call_workers_models_would_use(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A pipeline of a `call:` worker only names no model alias, yet its function may call
    models (`ctx.model`): `check` and `run` still say which interlock.toml those calls use,
    here none, so that a placeholder answer from the offline stand-in is no surprise."""
    (tmp_path / "agent_mod.py").write_text(
        "def solve(ctx):\n    return ctx.model('sonnet').complete(ctx.task).text\n"
    )
    (tmp_path / "flow.yaml").write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: 'agent_mod:solve', task: hi, final: true}\n"
    )
    env = {**cli_env, "PYTHONPATH": f"{tmp_path}:{cli_env.get('PYTHONPATH', '')}"}
    none = "config: none found (every model alias answers with the offline stand-in)"
    checked = cli(env, tmp_path, "check", "flow.yaml")
    assert checked.returncode == 0, checked.stderr
    assert none in checked.stdout.splitlines(), checked.stdout
    ran = cli(env, tmp_path, "run", "flow.yaml", "--topic", "t")
    assert ran.returncode == 0, ran.stderr
    assert none in ran.stderr.splitlines(), ran.stderr
