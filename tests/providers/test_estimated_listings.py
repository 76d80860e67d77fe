"""Listings mark the costs of runs whose tokens were estimated (a server that reports no
usage): `interlock runs`, `interlock batch status`, `interlock batches` and their JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock import RunStatus
from interlock.cli.main import cli

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project, one_worker


def test_runs_marks_the_cost_of_a_run_whose_tokens_were_estimated(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run answered without usage is listed `~$...` (JSON `estimated: true`); a run whose
    usage was reported is listed as a plain count."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      model: gpt\n")
    app = app_for(project)
    counted = app.run(flow, topic="counted")
    server.fail_next(Fault(no_usage=True))
    guessed = app.run(flow, topic="guessed")
    assert counted.status is guessed.status is RunStatus.DELIVERED
    home = ["--home", str(project / "home")]
    listed = CliRunner().invoke(cli, [*home, "runs"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[0]: line for line in listed.output.splitlines() if line.strip()}
    assert f"~${guessed.cost_usd:.4f}" in lines[guessed.run_id]
    assert "~" not in lines[counted.run_id] and f"${counted.cost_usd:.4f}" in lines[counted.run_id]
    assert "~: estimated, a server reported no token counts" in listed.output
    rows = json.loads(CliRunner().invoke(cli, [*home, "runs", "--json"]).output)
    assert {r["run_id"]: r["estimated"] for r in rows} == {
        guessed.run_id: True,
        counted.run_id: False,
    }


def test_batch_status_marks_a_spend_that_includes_an_estimated_run(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of two rows, the one answered without usage shows `~$...`, and so do the batch's
    total in `batch status` and `batches`; the JSON says `estimated` of the row and batch."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      model: gpt\n")
    (project / "rows.jsonl").write_text('{"topic": "one"}\n{"topic": "two"}\n')
    server.fail_next(Fault(no_usage=True))
    home = ["--home", str(project / "home")]
    args = ["batch", str(flow), "--inputs", str(project / "rows.jsonl"), "--batch-id", "b"]
    done = CliRunner().invoke(cli, [*home, *args, "--concurrency", "1"])
    assert done.exit_code == 0, done.output
    body = json.loads(CliRunner().invoke(cli, [*home, "batch", "status", "b", "--json"]).output)
    assert [(r["row"], r["estimated"]) for r in body["rows"]] == [(1, True), (2, False)]
    assert body["estimated"] is True
    shown = CliRunner().invoke(cli, [*home, "batch", "status", "b"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    cost = body["rows"][0]["cost_usd"]
    assert f"~${cost:.4f}" in shown.output
    assert f"~${body['cost_usd']:.4f}" in shown.output
    assert f"~${body['rows'][1]['cost_usd']:.4f}" not in shown.output
    assert "~: estimated, a server reported no token counts" in shown.output
    listed = CliRunner().invoke(cli, [*home, "batches"], terminal_width=200)
    assert f"~${body['cost_usd']:.4f}" in listed.output
