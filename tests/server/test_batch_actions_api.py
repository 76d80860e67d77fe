"""Retry, cancel, export and compare of batches over the REST API: what `interlock batch
retry/cancel/export` and `interlock compare` do, with the API's scopes and error bodies."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, token

from interlock import Interlock
from interlock.cli.main import cli
from interlock.core.batches import RowInputs
from interlock.core.loader import load_workflow
from interlock.workloads.batches import BatchRunner, record_batch

# Odd rows fail until the file `FLAG` exists; `SLEEP` seconds first; the score is n.
FLOW = """\
score:
  inputs:
    n: {type: integer, required: true}
  metrics:
    score: w.score
    passed: w.score >= 2
  phases:
    - id: only
      workers:
        - role: w
          final: true
          command:
            - sh
            - -c
            - 'sleep SLEEP; [ -e FLAG ] || [ $(($1 % 2)) -eq 0 ] || exit 3; echo "Score: $1" > "$2"'
            - sh
            - "{{ n }}"
            - "{output}"
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def workflow(folder: Path, sleep: float = 0.0) -> Path:
    """The workflow file, its flag file beside it (not created)."""
    text = FLOW.replace("FLAG", str(folder / "flag")).replace("SLEEP", str(sleep))
    path = folder / "score.yaml"
    path.write_text(text)
    return path


def run_batch(home: Path, path: Path, batch_id: str, numbers: list[int]) -> None:
    """Record and run a batch of rows `n` in `home`, as `interlock batch` does."""
    app = Interlock(home)
    definition = load_workflow(path).get("score")
    rows = [RowInputs(number=i, topic=f"t{i}", inputs={"n": n}) for i, n in enumerate(numbers, 1)]
    record_batch(
        app,
        definition,
        rows,
        batch_id=batch_id,
        inputs_file="rows.csv",
        concurrency=2,
        max_cost_usd=None,
        now=time.time(),
    )
    asyncio.run(BatchRunner(app, batch_id, poll=0.05).run())
    app.close()


def settled(http: httpx.Client, batch_id: str, timeout: float = 30) -> dict[str, Any]:
    """The batch once nothing more runs."""
    deadline = time.monotonic() + timeout
    while True:
        shown: dict[str, Any] = http.get(f"/api/batches/{batch_id}").json()
        if shown["settled"]:
            return shown
        assert time.monotonic() < deadline, shown
        time.sleep(0.1)


def cli_json(home: Path, *args: str) -> Any:
    """The JSON a CLI command prints."""
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_retry_gives_failed_rows_a_new_try(make_server: ServerFactory, tmp_path: Path) -> None:
    """A posted batch whose odd rows fail: retry gives each failed row its `-t2` run, driven
    by the server, and they are delivered; the delivered rows are not run again."""
    path = workflow(tmp_path)
    server = make_server(workflows=[path])
    rows = [{"topic": f"t{n}", "n": n} for n in range(1, 5)]
    started = server.http.post(
        "/api/batches", json={"pipeline": "score", "rows": rows, "batch_id": "rt"}
    )
    assert started.status_code == 201, started.text
    assert settled(server.http, "rt")["counts"] == {"delivered": 2, "failed": 2}
    (tmp_path / "flag").write_text("")
    retried = server.http.post("/api/batches/rt/retry")
    assert retried.status_code == 202, retried.text
    assert retried.json() == {"batch_id": "rt", "retried": 2, "driven": True, "batch_ids": ["rt"]}
    shown = settled(server.http, "rt")
    assert shown["counts"] == {"delivered": 4}
    assert [(r["run_id"], r["try"]) for r in shown["rows"]] == [
        ("rt-r1-t2", 2), ("rt-r2", 1), ("rt-r3-t2", 2), ("rt-r4", 1),
    ]  # fmt: skip
    again = server.http.post("/api/batches/rt/retry").json()
    assert again["retried"] == 0
    missing = server.http.post("/api/batches/nope/retry")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "batch_not_found"


def test_cancel_stops_a_batch_the_server_drives(make_server: ServerFactory, tmp_path: Path) -> None:
    """Cancel while one row runs: that run is cancelled, the rows not started are marked
    cancelled and never start; an unknown batch is a 404."""
    path = workflow(tmp_path, sleep=20)
    server = make_server(workflows=[path])
    rows = [{"topic": f"t{n}", "n": 2 * n} for n in range(1, 5)]
    body = {"pipeline": "score", "rows": rows, "batch_id": "cx", "concurrency": 1}
    assert server.http.post("/api/batches", json=body).status_code == 201
    server.wait_status("cx-r1", "running")
    cancelled = server.http.post("/api/batches/cx/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {
        "batch_id": "cx", "batch_ids": ["cx"], "unstarted": 3, "stopped": ["cx-r1"],
        "finished": False,
    }  # fmt: skip
    shown = settled(server.http, "cx", timeout=15)  # well before the row's 20 s sleep ends
    assert shown["cancelled"] is True and shown["counts"] == {"cancelled": 4}
    assert [r["run_id"] for r in shown["rows"]] == ["cx-r1", None, None, None]
    missing = server.http.post("/api/batches/nope/cancel")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "batch_not_found"


def test_export_downloads_what_the_cli_writes(make_server: ServerFactory, tmp_path: Path) -> None:
    """The JSONL and CSV downloads hold what `interlock batch export -o` writes, byte for
    byte (final output, values and metrics included); another format is refused."""
    home = tmp_path / "home"
    run_batch(home, workflow(tmp_path), "ex", [1, 2, 3])
    server = make_server(workflows=[tmp_path / "score.yaml"])
    for kind in ("jsonl", "csv"):
        got = server.http.get(f"/api/batches/ex/export?format={kind}")
        assert got.status_code == 200, got.text
        assert got.headers["content-disposition"] == f'attachment; filename="ex.{kind}"'
        result = CliRunner().invoke(
            cli, ["--home", str(home), "batch", "export", "ex", "-o", str(tmp_path / f"o.{kind}")]
        )
        assert result.exit_code == 0, result.output
        assert got.text == (tmp_path / f"o.{kind}").read_text()
    table = list(csv.DictReader(io.StringIO(got.text)))
    assert [(r["row"], r["status"], r["metric.score"], r["output"]) for r in table] == [
        ("1", "failed", "", ""), ("2", "delivered", "2.0", "Score: 2\n"), ("3", "failed", "", ""),
    ]  # fmt: skip
    jsonl = server.http.get("/api/batches/ex/export").text.splitlines()
    assert json.loads(jsonl[1])["metrics"] == {"score": 2.0, "passed": True}
    bad = server.http.get("/api/batches/ex/export?format=xlsx")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    missing = server.http.get("/api/batches/nope/export")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "batch_not_found"


def test_compare_answers_what_the_cli_prints(make_server: ServerFactory, tmp_path: Path) -> None:
    """Two batches of the same rows compared: the API answers `interlock compare --json`'s
    object (per batch the metrics, cost, tokens and durations; the rows that differ most,
    with the diff of their two runs); bad ids and metrics are refused as the CLI refuses them."""
    home = tmp_path / "home"
    (tmp_path / "flag").write_text("")  # every row delivered
    path = workflow(tmp_path)
    run_batch(home, path, "ca", [1, 2, 3])
    run_batch(home, path, "cb", [3, 2, 1])
    server = make_server(workflows=[path])
    got = server.http.get("/api/compare?batch=ca&batch=cb&limit=5")
    assert got.status_code == 200, got.text
    found = got.json()
    expected = cli_json(home, "compare", "ca", "cb", "--limit", "5", "--json")
    seconds = ("p50_seconds", "p95_seconds")
    for one in (found, expected):  # the runs' durations are read from their histories alike
        for variant in one["variants"]:
            assert all(variant.pop(k) is not None for k in seconds)
    assert found == expected
    assert [v["metrics"]["score"]["mean"] for v in found["variants"]] == [2.0, 2.0]
    assert [(d["row"], d["diff"]) for d in found["differences"]] == [
        (1, "interlock diff ca-r1 cb-r1"), (3, "interlock diff cb-r3 ca-r3"),
    ]  # fmt: skip
    alone = server.http.get("/api/compare?batch=ca")
    assert alone.status_code == 400 and "is no experiment" in alone.json()["error"]["message"]
    by = server.http.get("/api/compare?batch=ca&batch=cb&by=nope")
    assert by.status_code == 400
    assert "--by 'nope': no metric of that name" in by.json()["error"]["message"]
    three = server.http.get("/api/compare?batch=ca&batch=cb&batch=ca")
    assert three.status_code == 400 and "one experiment" in three.json()["error"]["message"]
    missing = server.http.get("/api/compare?batch=ca&batch=nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "batch_not_found"
    none = server.http.get("/api/compare")
    assert none.status_code == 422


def test_scopes_guard_the_batch_routes(make_server: ServerFactory, tmp_path: Path) -> None:
    """With auth on, a read token exports and compares but cannot retry or cancel (403); no
    token is a 401; an operate token cancels."""
    home = tmp_path / "home"
    path = workflow(tmp_path)
    run_batch(home, path, "sa", [2, 4])
    server = make_server(workflows=[path], auth_secret=SECRET)
    read = {"Authorization": f"Bearer {token(['read'])}"}
    act = {"Authorization": f"Bearer {token(['read', 'operate'])}"}
    assert server.http.get("/api/batches/sa/export").status_code == 401
    assert server.http.get("/api/batches/sa/export", headers=read).status_code == 200
    for action in ("retry", "cancel"):
        refused = server.http.post(f"/api/batches/sa/{action}", headers=read)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
    done = server.http.post("/api/batches/sa/cancel", headers=act)
    assert done.status_code == 200
    assert done.json()["unstarted"] == 0 and done.json()["stopped"] == []
