"""A call waiting on a spend cap is a state of its run that every reader sees: status.json,
`interlock runs`, `interlock status` and the API's run views say the run waits, on which
cap and until when, and stop saying it once the cap is raised and the run goes on."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from interlock import Interlock, RunStatus
from interlock.cli.main import cli
from interlock.runtime.orchestrator import Settings
from interlock.server.views import run_detail, run_row

from .fake_llm_server import FakeServer
from .test_spend_runs import project, write_config

__all__ = ["project"]  # the fixture, used by name

TEXT = "waiting: spend cap 'daily' (USD 0.06) until 00:00 UTC"


def until(what: Any, seconds: float = 20.0) -> Any:
    """`what()` once it is truthy (the test fails after `seconds`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s")


def status_file(home: Path) -> dict[str, Any] | None:
    """The one run's status.json while it shows a spend-cap wait."""
    for path in (home / "runs").glob("*/status.json"):
        try:
            view = json.loads(path.read_bytes())
        except ValueError:  # being replaced
            continue
        if view["status"] == "waiting":
            return dict(view)
    return None


def test_a_run_whose_call_waits_on_a_cap_shows_waiting_everywhere(
    project: Path, server: FakeServer
) -> None:
    """While the synthesizer's call waits on the daily cap, status.json, `runs`, `status`
    and the API show the run waiting on 'daily' until 00:00 UTC, the task row says so too;
    raised, the run delivers and nothing says it waits."""
    config = project / "interlock.toml"
    write_config(config, server, 0.06)
    home = project / "home"
    app = Interlock(home, settings=Settings(heartbeat=0.05, status_interval=0.05))
    ended: list[Any] = []
    runner = threading.Thread(
        target=lambda: ended.append(app.run(project / "research.json", "research", topic="caps"))
    )
    runner.start()
    try:
        view = until(lambda: status_file(home))
        run_id = view["run_id"]
        assert view["waiting"]["for"] == "spend_cap"
        assert view["waiting"]["text"] == TEXT
        assert view["waiting"]["cap"] == "daily" and view["waiting"]["amount_usd"] == 0.06
        assert view["waiting"]["task"] == "synthesizer@1"
        assert view["waiting"]["until"].endswith("T00:00:00.000Z")
        assert view["spend_waits"]["synthesizer@1"]["text"] == TEXT
        [synthesize] = [p for p in view["phases"] if p["id"] == "synthesis"]
        assert synthesize["workers"]["synthesizer"]["spend_wait"] == TEXT

        cli_runner = CliRunner()
        listed = cli_runner.invoke(cli, ["--home", str(home), "runs"], terminal_width=200)
        assert listed.exit_code == 0, listed.output
        assert TEXT in listed.output
        rows = json.loads(cli_runner.invoke(cli, ["--home", str(home), "runs", "--json"]).output)
        assert rows[0]["status"] == "waiting" and rows[0]["waiting"]["text"] == TEXT
        shown = cli_runner.invoke(cli, ["--home", str(home), "status", run_id], terminal_width=200)
        assert shown.exit_code == 0, shown.output
        assert f"{run_id}   waiting" in shown.output
        assert f"running ({TEXT})" in shown.output  # the synthesizer's row
        assert f"{TEXT} (task synthesizer@1;" in shown.output

        detail = run_detail(app, run_id)
        assert detail["status"] == "waiting" and detail["waiting"]["text"] == TEXT
        [task] = [t for t in detail["tasks"] if t["task_id"] == "synthesizer@1"]
        assert task["spend_wait"] == TEXT
        row = run_row(app.store.get_run(run_id), None, detail["waiting"])
        assert row["status"] == "waiting"
        assert app.status(run_id)["waiting"]["text"] == TEXT  # folded, then the file's wait

    finally:
        write_config(config, server, 1.0)
        runner.join(timeout=60)
    [state] = ended
    assert state.status is RunStatus.DELIVERED
    after = run_detail(app, run_id)
    assert after["status"] == "delivered" and after["waiting"] is None
    assert all(t["spend_wait"] is None for t in after["tasks"])
    listed = CliRunner().invoke(cli, ["--home", str(home), "runs"], terminal_width=200)
    assert "spend cap" not in listed.output


def test_a_wait_of_an_orchestrator_gone_is_not_shown(tmp_path: Path) -> None:
    """A status.json of a process that no longer holds the run's lease does not make the run
    waiting: its wait ended with it."""
    from interlock.runtime.projection import live_spend_wait

    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    waiting = {"for": "spend_cap", "text": TEXT, "task": "t@1", "tasks": 1}
    (run_dir / "status.json").write_text(
        json.dumps({"orchestrator": "host:1:a", "waiting": waiting, "spend_waits": {}})
    )
    assert live_spend_wait(run_dir, "host:1:a") == {"waiting": waiting, "spend_waits": {}}
    assert live_spend_wait(run_dir, "host:2:b") is None
    assert live_spend_wait(run_dir, None) is None
