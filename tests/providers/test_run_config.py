"""`status` names the interlock.toml a run's models were resolved from when it was created
(recorded with the run), not the one found now, and says when that file changed or is gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli.main import cli

from .fake_llm_server import FakeServer
from .project import CONFIG, app_for, make_project, one_worker


def test_status_names_the_config_a_run_was_started_with_and_whether_it_changed(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run started with `--config X` (no other interlock.toml) is reported with X, even
    without `--config` later, and the file a command finds now is said beside it; once X
    changes, then goes, status says so; `status --json` gives the same; `verify` passes."""
    project = make_project(tmp_path, server, monkeypatch)
    (project / "interlock.toml").unlink()
    explicit = tmp_path / "elsewhere" / "models.toml"
    explicit.parent.mkdir()
    explicit.write_text(CONFIG.format(url=server.url))
    monkeypatch.setenv("INTERLOCK_CONFIG", "")  # restored after the test: --config sets it
    monkeypatch.chdir(project)
    flow = one_worker(project, "      model: gpt\n")
    home = ["--home", str(project / "home")]
    started = CliRunner().invoke(
        cli, [*home, "--config", str(explicit), "run", str(flow), "--topic", "t"]
    )
    assert started.exit_code == 0, started.output
    monkeypatch.delenv("INTERLOCK_CONFIG")
    run_id = app_for(project).store.list_runs()[0].run_id

    def status() -> str:
        shown = CliRunner().invoke(cli, [*home, "status", run_id], terminal_width=300)
        assert shown.exit_code == 0, shown.output
        return shown.output

    said = status()
    assert (
        f"config: {explicit} (named by --config or INTERLOCK_CONFIG) (as the run was started)"
        in said
    )
    assert "config found here now: none found" in said
    body = json.loads(CliRunner().invoke(cli, [*home, "status", run_id, "--json"]).output)
    assert body["config"]["explicit"] is True
    assert [(f["path"], f["state"]) for f in body["config"]["files"]] == [
        (str(explicit), "unchanged")
    ]
    explicit.write_text(CONFIG.format(url=server.url) + "\n# edited\n")
    assert f"config: {explicit} (named by --config or INTERLOCK_CONFIG) (changed since" in status()
    explicit.unlink()
    assert "(gone since the run started)" in status()
    body = json.loads(CliRunner().invoke(cli, [*home, "status", run_id, "--json"]).output)
    assert body["config"]["files"][0]["state"] == "gone"
    verified = CliRunner().invoke(cli, [*home, "verify", run_id])
    assert verified.exit_code == 0, verified.output


def test_a_run_with_its_config_beside_the_workflow_names_only_that_file(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usual case: the workflow's own interlock.toml, unchanged, is named once."""
    project = make_project(tmp_path, server, monkeypatch)
    monkeypatch.chdir(project)
    flow = one_worker(project, "      model: gpt\n")
    state = app_for(project).run(flow, topic="t")
    shown = CliRunner().invoke(
        cli, ["--home", str(project / "home"), "status", state.run_id], terminal_width=300
    )
    assert f"config: {project / 'interlock.toml'}" in shown.output.splitlines()
    assert "config found here now" not in shown.output
    (project / "interlock.toml").write_text(CONFIG.format(url=server.url) + "\n# edited\n")
    shown = CliRunner().invoke(
        cli, ["--home", str(project / "home"), "status", state.run_id], terminal_width=300
    )
    changed = f"config: {project / 'interlock.toml'} (changed since the run started)"
    assert changed in shown.output.splitlines()


def test_a_run_recorded_without_its_config_says_what_is_found_now_and_verifies(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `run_created` without `config` (as interlock wrote before runs kept it) reads back:
    `status` says the file found now, `status --json` gives `config: null`, and the run's
    history verifies."""
    from interlock.core.loader import load_workflow

    project = make_project(tmp_path, server, monkeypatch)
    monkeypatch.chdir(project)
    flow = one_worker(project, "      model: gpt\n")
    app = app_for(project)
    definition = load_workflow(flow).get("p")
    run_id = app.orchestrator.create_run(definition, topic="t")  # records no `config`
    app.drive(run_id)
    assert "config" not in app.store.events(run_id, 0, 1)[0].data
    home = ["--home", str(project / "home")]
    shown = CliRunner().invoke(cli, [*home, "status", run_id], terminal_width=300)
    assert f"config: {project / 'interlock.toml'}" in shown.output.splitlines()
    body = json.loads(CliRunner().invoke(cli, [*home, "status", run_id, "--json"]).output)
    assert body["config"] is None
    verified = CliRunner().invoke(cli, [*home, "verify", run_id])
    assert verified.exit_code == 0, verified.output
