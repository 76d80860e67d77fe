"""A real server on a store holding an imported run that nobody trusted yet."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_bundles import _env, _paused_bundle
from tests.cli.test_cli import cli
from tests.server.conftest import ServerFactory


def test_approving_or_resuming_an_inert_run_is_409_run_inert(
    cli_env: dict[str, str], tmp_path: Path, make_server: ServerFactory
) -> None:
    """`GET /api/runs/{id}` says the run is imported and not trusted; approving or resuming
    it is `409 run_inert` with the CLI's message naming `interlock trust`."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "b", marker)
    assert cli(env, "import", str(bundle)).returncode == 0
    server = make_server(home=tmp_path / "b")
    view = server.http.get(f"/api/runs/{run_id}").json()
    assert view["imported"] is True and view["trusted"] is False
    for action in ("approve", "resume"):
        answer = server.http.post(f"/api/runs/{run_id}/{action}", json={})
        assert answer.status_code == 409, (action, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "run_inert" and f"interlock trust {run_id}" in error["message"]
    assert not (marker / "ran").exists()
