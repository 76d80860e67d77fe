"""What `GET /api/batches/ID` says of a batch's rows in flight, as `interlock batch status`
shows them (a row waiting on a spend cap, the line under each row, who drives it), and what
`GET /api/runs/ID` says of the configuration files a run was created with."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import HOLD, Server

from interlock.providers.spend_guard import CapWait

TEXT = "waiting: spend cap 'daily' (USD 50.00) until 00:00 UTC"
CONFIG = """
[providers.gateway]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key_env = "GATEWAY_KEY"

[providers.local]
kind = "offline"

[models.sonnet]
provider = "local"
"""
KEY = "sk-the-gateway-key-0123456789"


def held_batch(server: Server, batch_id: str, rows: int) -> list[str]:
    """A batch of `held` rows posted to the server, each row's drafter started (and held
    until `HOLD` is set); their run ids."""
    posted = server.http.post(
        "/api/batches",
        json={"pipeline": "held", "rows": [{"topic": f"t{n}"} for n in range(rows)],
              "batch_id": batch_id, "concurrency": rows},
    )  # fmt: skip
    assert posted.status_code == 201, posted.text
    run_ids = [f"{batch_id}-r{n}" for n in range(1, rows + 1)]
    orchestrator = server.service.orchestrator
    deadline = time.monotonic() + 15
    for run_id in run_ids:
        while "drafter@1" not in _handles(orchestrator.drivers.get(run_id)):
            assert time.monotonic() < deadline, f"the drafter of {run_id} never started"
            time.sleep(0.02)
    return run_ids


def cap_wait(server: Server, run_id: str) -> None:
    """Tell the run's driver its drafter's call waits on cap 'daily', as `CappedProvider`
    tells the runtime, and have it write its status.json."""
    driver = server.service.orchestrator.drivers[run_id]
    now = time.time()
    wait = CapWait(text=TEXT, since=now, cap="daily", amount_usd=50.0, until=now + 3600)
    driver.spend_waits["drafter@1"] = wait.to_json()
    driver.write_status()


def test_a_row_waiting_on_a_spend_cap_is_marked_with_its_cap(make_server: ServerFactory) -> None:
    """Of two rows the server drives, the one whose call waits on cap 'daily' is marked
    `waiting: spend cap` with the cap's words as its `waiting` and its `why`; both are
    driven; the batch counts one row capped and none undriven. Once it waits no more, the
    mark is gone."""
    HOLD.clear()
    server = make_server()
    try:
        first, second = held_batch(server, "capped", 2)
        cap_wait(server, first)
        shown = server.http.get("/api/batches/capped")
        assert shown.status_code == 200, shown.text
        body = shown.json()
        rows = {r["run_id"]: r for r in body["rows"]}
        assert {k: rows[first][k] for k in ("status", "shown_status", "mark")} == {
            "status": "running",
            "shown_status": "waiting: spend cap",
            "mark": "spend_cap",
        }
        assert rows[first]["waiting"] == rows[first]["why"] == TEXT
        assert [rows[second][k] for k in ("shown_status", "mark", "waiting", "why")] == [
            "running",
            None,
            None,
            None,
        ]
        assert [rows[first]["driven"], rows[second]["driven"]] == [True, True]
        assert (body["spend_capped"], body["undriven"], body["undriven_hint"]) == (1, 0, None)
        server.service.orchestrator.drivers[first].spend_waits.clear()
        server.service.orchestrator.drivers[first].write_status()
        again = server.http.get("/api/batches/capped").json()
        assert [r["mark"] for r in again["rows"]] == [None, None]
        assert again["spend_capped"] == 0
    finally:
        HOLD.set()


def test_a_failed_row_says_why_and_a_delivered_one_says_nothing(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A row whose run failed has its failure as `why`, as the CLI prints under it; a row
    delivered has none; rows ended are neither driven nor undriven (`driven` null)."""
    flow = tmp_path / "odd.yaml"
    flow.write_text("""\
odd:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: only
      workers:
        - role: w
          final: true
          command: [sh, -c, '[ $(($1 % 2)) -eq 0 ] || { echo odd >&2; exit 3; }; echo ok > "$2"',
                    sh, "{{ n }}", "{output}"]
""")
    server = make_server(workflows=[flow])
    posted = server.http.post(
        "/api/batches", json={"pipeline": "odd", "rows": [{"n": 1}, {"n": 2}], "batch_id": "o"}
    )
    assert posted.status_code == 201, posted.text
    deadline = time.monotonic() + 30
    body: dict[str, Any] = {}
    while not body.get("settled"):
        assert time.monotonic() < deadline, body
        time.sleep(0.05)
        body = server.http.get("/api/batches/o").json()
    failed, delivered = body["rows"]
    assert failed["status"] == "failed" and failed["why"] == failed["failure"] is not None
    assert (delivered["status"], delivered["why"], delivered["mark"]) == ("delivered", None, None)
    assert [failed["driven"], delivered["driven"]] == [None, None]


def test_a_run_view_names_its_config_files_and_hashes_only(
    make_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of a model pipeline started with the interlock.toml beside its workflow gives,
    in `GET /api/runs/ID`, that file's path, SHA-256 and state (`changed` once edited), and
    nothing of the environment: no key's value, no variable's name."""
    import hashlib

    monkeypatch.setenv("GATEWAY_KEY", KEY)
    config = tmp_path / "interlock.toml"
    config.write_text(CONFIG)
    server = make_server()
    run_id = server.start_run("modelled", "Configured")
    server.wait_status(run_id, "delivered")
    view = server.http.get(f"/api/runs/{run_id}").json()
    digest = hashlib.sha256(CONFIG.encode()).hexdigest()
    assert view["config"] == {
        "files": [{"path": str(config), "sha256": digest, "state": "unchanged"}],
        "explicit": False,
    }
    text = server.http.get(f"/api/runs/{run_id}").text
    assert KEY not in text and "GATEWAY_KEY" not in text
    config.write_text(CONFIG + "\n# edited\n")
    again = server.http.get(f"/api/runs/{run_id}").json()
    assert again["config"]["files"][0]["state"] == "changed"
    assert again["config"]["files"][0]["sha256"] == digest  # the file the run started with


def _handles(driver: Any) -> Any:
    """The tasks the run's driver runs now (none before it is taken)."""
    return {} if driver is None else driver.workers.handles
