"""The real CLI on an imported paused run: each command names the step that applies to the
run's state, `status` says it is imported and whether it is trusted, and `approve` counts
only what it ran."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_bundles import _env, _paused_bundle
from tests.cli.test_cli import cli


def test_an_imported_paused_run_is_led_to_trust_then_approve(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`import`, `rerun`, `status` and `trust` of an imported paused run lead to `trust` then
    `approve` (never to a rerun it refuses), and `approve` reports only the task it ran."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "b", marker)
    imported = cli(env, "import", str(bundle))
    assert imported.returncode == 0, imported.stderr
    both = f"interlock trust {run_id}, then interlock approve {run_id}"
    assert both in imported.stdout and "rerun" not in imported.stdout, imported.stdout
    rerun = cli(env, "rerun", run_id, "--workflow", str(tmp_path / "src" / "wf.yaml"))
    assert rerun.returncode == 2 and both in rerun.stderr, rerun.stderr
    approve = cli(env, "approve", run_id)
    assert approve.returncode == 2 and both in approve.stderr, approve.stderr
    assert "rerun" not in approve.stderr
    status = cli(env, "status", run_id)
    assert f"imported (inert until `interlock trust {run_id}`)" in status.stdout, status.stdout
    view = json.loads(cli(env, "status", run_id, "--json").stdout)
    assert view["imported"] is True and view["trusted"] is False
    trusted = cli(env, "trust", run_id)
    assert trusted.returncode == 0 and f"Go on with it: interlock approve {run_id}" in (
        trusted.stdout
    ), trusted.stdout
    assert "imported (trusted)" in cli(env, "status", run_id).stdout
    assert json.loads(cli(env, "status", run_id, "--json").stdout)["trusted"] is True
    done = cli(env, "approve", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 task(s) completed here" in done.stderr, done.stderr
    ended = cli(env, "status", run_id)
    assert f"interlock rerun {run_id} --workflow FILE" in ended.stdout, ended.stdout
