"""A run whose model alias the configuration does not define is refused before it is recorded."""

from __future__ import annotations

import json
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


def test_a_missing_key_or_a_call_that_does_not_import_is_refused_before_anything_is_paid(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A later phase's provider whose key is not set, or a `call:` target that does not
    import, would fail its task after the phases before it were paid for: `run` says so at
    once, exit 2, and records nothing. A fallback model's missing key is no reason to refuse
    (it is needed only if its model fails)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "interlock.toml").write_text(
        "".join(
            f'[providers.{name}]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
            f'api_key_env = "{env}"\n[models.{name}]\nprovider = "{name}"\nmodel = "x"\n'
            for name, env in (("first", "FIRST_KEY"), ("later", "LATER_KEY"))
        )
    )
    (project / "flow.yaml").write_text(
        "keys:\n  phases:\n"
        "  - id: a\n    workers:\n    - {role: w, model: first, task: hi}\n"
        "  - id: b\n    workers:\n    - {role: v, model: later, task: hi, final: true}\n"
        "calls:\n  phases:\n"
        "  - id: a\n    workers:\n    - {role: w, call: 'no_such_module:f', final: true}\n"
        "fallback:\n  phases:\n"
        "  - id: a\n    workers:\n"
        "    - {role: w, model: first, fallback_models: [later], task: hi, final: true}\n"
    )
    env = {**cli_env, "FIRST_KEY": "sk-first-0123456789abcdef"}
    refused = cli(env, project, "run", "flow.yaml", "keys", "--topic", "t")
    assert refused.returncode == 2, refused.stderr
    assert "nothing was recorded" in refused.stderr
    assert "set the environment variable LATER_KEY" in refused.stderr
    refused = cli(env, project, "run", "flow.yaml", "calls", "--topic", "t")
    assert refused.returncode == 2, refused.stderr
    assert "nothing was recorded" in refused.stderr and "'no_such_module'" in refused.stderr
    listed = cli(env, project, "runs", "--json")
    assert listed.stdout.strip() in ("", "[]"), listed.stdout
    started = cli(env, project, "run", "flow.yaml", "fallback", "--topic", "t")
    assert "nothing was recorded" not in started.stderr, started.stderr
    assert started.returncode == 1  # its model's server is not there: the run fails
    # Recorded for others to run (a fleet's workers have their own keys): not refused here.
    submitted = cli(env, project, "submit", "flow.yaml", "keys", "--topic", "t")
    assert submitted.returncode == 0, submitted.stderr


def test_an_invalid_interlock_toml_is_refused_before_the_run_is_recorded(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A misspelt setting, a value of the wrong type and a broken table header each exit 2
    with the file and table named, in plain words, and leave no run behind (before, the run
    was recorded and its first task failed)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "flow.yaml").write_text(FLOW)
    head = '[models.sonnet]\nprovider = "openai"\nmodel = "m"\n'
    for text, said in [
        (head + "temprature = 0.2\n", "unknown setting 'temprature' (did you mean 'temperature'?)"),
        (head + 'temperature = "hot"\n', "[models.sonnet] is invalid: temperature: "),
        ('[models.sonnet\nprovider = "x"\n', "invalid TOML: Expected ']'"),
    ]:
        (project / "interlock.toml").write_text(text)
        refused = cli(cli_env, project, "run", "flow.yaml", "p", "--topic", "tides")
        assert refused.returncode == 2, refused.stderr
        assert "nothing was recorded" in refused.stderr and said in refused.stderr
        assert f"{project / 'interlock.toml'}" in refused.stderr
        assert "Value error" not in refused.stderr and "table:" not in refused.stderr
    listed = cli(cli_env, project, "runs", "--json")
    assert listed.stdout.strip() in ("", "[]"), listed.stdout


def test_a_rerun_and_its_plan_refuse_an_interlock_toml_broken_since(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """After interlock.toml is broken, `rerun` and `rerun --dry-run` exit 2 naming it and
    record nothing, rather than a failed run (and a plan blaming the worker's definition)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "flow.yaml").write_text(FLOW)
    config = '[models.sonnet]\nprovider = "offline"\n'
    (project / "interlock.toml").write_text(config)
    first = cli(cli_env, project, "run", "flow.yaml", "p", "--topic", "tides")
    assert first.returncode == 0, first.stderr
    source = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("run "))
    (project / "interlock.toml").write_text(
        '[models.sonnet]\nprovider = "offline"\ntemprature = 1\n'
    )
    for dry in (["--dry-run"], []):
        refused = cli(cli_env, project, "rerun", source, *dry)
        assert refused.returncode == 2, refused.stderr
        assert "nothing was recorded" in refused.stderr and "'temprature'" in refused.stderr
    assert len(json.loads(cli(cli_env, project, "runs", "--json").stdout)) == 1
