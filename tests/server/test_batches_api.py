"""GET /api/batches and /api/batches/{id}: a batch run with `interlock batch`, as served."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.server.conftest import ServerFactory

from interlock import Interlock
from interlock.core.batches import RowInputs
from interlock.core.loader import load_workflow
from interlock.workloads.batches import BatchRunner, record_batch

FLOW = """\
echo:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: only
      workers:
        - role: w
          final: true
          command: [sh, -c, 'echo "Score: $1" > "$2"', sh, "{{ n }}", "{output}"]
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def run_batch(home: Path, folder: Path) -> None:
    """Record and run a batch of three rows in `home`, as `interlock batch` does."""
    (folder / "echo.yaml").write_text(FLOW)
    app = Interlock(home)
    definition = load_workflow(folder / "echo.yaml").get("echo")
    rows = [RowInputs(number=n, topic=f"t{n}", inputs={"n": n}) for n in (1, 2, 3)]
    record_batch(
        app,
        definition,
        rows,
        batch_id="served",
        inputs_file="rows.csv",
        concurrency=2,
        max_cost_usd=None,
        now=time.time(),
    )
    asyncio.run(BatchRunner(app, "served", poll=0.05).run())
    app.close()


def test_batches_are_listed_and_shown(make_server: ServerFactory, tmp_path: Path) -> None:
    """The list gives each batch's counts and spend; the batch its rows with their values;
    an unknown batch is a 404 naming it."""
    run_batch(tmp_path / "home", tmp_path)
    server = make_server()
    listed = server.http.get("/api/batches")
    assert listed.status_code == 200, listed.text
    [summary] = listed.json()
    assert (summary["batch_id"], summary["pipeline"], summary["row_count"]) == ("served", "echo", 3)
    assert summary["counts"] == {"delivered": 3} and summary["settled"] is True
    shown = server.http.get("/api/batches/served").json()
    assert [(r["row"], r["run_id"], r["status"]) for r in shown["rows"]] == [
        (n, f"served-r{n}", "delivered") for n in (1, 2, 3)
    ]
    assert shown["rows"][1]["values"] == {"score": 2.0}
    missing = server.http.get("/api/batches/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "batch_not_found"


def test_a_batch_posted_is_driven_by_the_server(make_server: ServerFactory, tmp_path: Path) -> None:
    """POST /api/batches records the rows and the server runs them; bad rows are refused
    (400, naming the rows) with nothing recorded; a taken id is a 409."""
    (tmp_path / "echo.yaml").write_text(FLOW)
    server = make_server(workflows=[tmp_path / "echo.yaml"])
    bad = server.http.post("/api/batches", json={"pipeline": "echo", "rows": [{"n": 1}, [2]]})
    assert bad.status_code == 400, bad.text
    assert "row 2: is a JSON list, not an object" in bad.json()["error"]["message"]
    with_id = {"pipeline": "echo", "rows": [{"n": 1, "id": "a7"}], "batch_id": "ids"}
    refused = server.http.post("/api/batches", json=with_id)
    assert refused.status_code == 400, refused.text
    assert "pass --ignore-column id" in refused.json()["error"]["message"]
    assert server.http.get("/api/batches").json() == []
    ignored = server.http.post("/api/batches", json={**with_id, "ignore_columns": ["id"]})
    assert ignored.status_code == 201, ignored.text
    rows = [{"topic": f"t{n}", "n": n} for n in range(1, 6)]
    body = {"pipeline": "echo", "rows": rows, "concurrency": 2, "batch_id": "api"}
    started = server.http.post("/api/batches", json=body)
    assert started.status_code == 201, started.text
    assert started.json()["row_count"] == 5
    deadline = time.monotonic() + 30
    while not server.http.get("/api/batches/api").json()["settled"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    shown = server.http.get("/api/batches/api").json()
    assert shown["counts"] == {"delivered": 5}
    assert [r["values"] for r in shown["rows"]] == [{"score": float(n)} for n in range(1, 6)]
    again = server.http.post("/api/batches", json=body)
    assert again.status_code == 409 and again.json()["error"]["code"] == "batch_exists"
    resumed = server.http.post("/api/batches/api/resume")
    assert resumed.status_code == 202


def test_a_batch_posted_with_a_tolerance_fails_past_it(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """`tolerate` in the body is kept with the batch: past it no more rows start and the
    batch is shown failed with its reason; a bad one is a 400 with nothing recorded."""
    failing = FLOW.replace('\'echo "Score: $1" > "$2"\'', "'exit 3'")
    assert failing != FLOW
    (tmp_path / "echo.yaml").write_text(failing)
    server = make_server(workflows=[tmp_path / "echo.yaml"])
    rows = [{"n": n} for n in range(1, 6)]
    for bad, says in ((-1, "tolerate -1 is negative"), ("150%", "more than 100% of the rows")):
        body = {"pipeline": "echo", "rows": rows, "tolerate": bad}
        refused = server.http.post("/api/batches", json=body)
        assert refused.status_code == 400, refused.text
        assert says in refused.json()["error"]["message"]
    assert server.http.get("/api/batches").json() == []
    body = {"pipeline": "echo", "rows": rows, "concurrency": 1, "batch_id": "t", "tolerate": "20%"}
    started = server.http.post("/api/batches", json=body)
    assert started.status_code == 201, started.text
    assert (started.json()["tolerate"], started.json()["allowed_failures"]) == ("20%", 1)
    deadline = time.monotonic() + 30
    while not server.http.get("/api/batches/t").json()["settled"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    shown = server.http.get("/api/batches/t").json()
    assert shown["failed"] is True
    assert shown["failure"] == (
        "batch t failed: 2 of 5 rows failed, past tolerate 20% (1 of 5 rows); failed rows: 1, 2"
    )
    assert shown["counts"] == {"failed": 2, "not started: batch failed": 3}
    [listed] = server.http.get("/api/batches").json()
    assert listed["failure"] == shown["failure"]
