"""The REST API: runs, events, outputs, commands, errors and limits."""

from __future__ import annotations

import httpx
from tests.server.helpers import Server

from interlock.errors import UsageError


def test_run_to_delivery_through_the_api(server: Server) -> None:
    """A run started over HTTP is driven by the server, paused, approved and delivered."""
    run_id = server.start_run("review", "solar sails")
    paused = server.wait_status(run_id, "paused")
    assert paused["phases"][0]["status"] == "paused"
    assert paused["tasks"][0]["status"] == "completed"
    response = server.http.post(f"/api/runs/{run_id}/approve", json={"message": "looks fine"})
    assert response.status_code == 200
    done = server.wait_status(run_id, "delivered")
    assert done["progress"] == 1.0
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_created" and "approved" in kinds and "delivered" in kinds
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    approved = next(e for e in events if e["kind"] == "approved")
    assert approved["data"]["message"] == "looks fine"
    assert any(e["rule"] for e in events)


def test_list_filter_and_outputs(server: Server) -> None:
    """Runs are listed with filters, and outputs are readable and downloadable."""
    run_id = server.start_run("quick", "lists")
    server.wait_status(run_id, "delivered")
    listed = server.http.get("/api/runs", params={"status": "delivered"}).json()
    assert [r["run_id"] for r in listed] == [run_id]
    assert server.http.get("/api/runs", params={"pipeline": "review"}).json() == []
    names = [o["name"] for o in server.http.get(f"/api/runs/{run_id}/outputs").json()]
    assert "final.md" in names
    text = server.http.get(f"/api/runs/{run_id}/outputs/final.md")
    assert "Notes on **lists**" in text.text
    download = server.http.get(f"/api/runs/{run_id}/outputs/final.md", params={"download": 1})
    assert "attachment" in download.headers["content-disposition"]


def test_errors_use_the_cli_messages(server: Server) -> None:
    """Errors come as {"error": {code, message}} with the messages the CLI prints."""
    missing = server.http.get("/api/runs/nope-123")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no run matches 'nope-123' (see 'interlock runs')"
    run_id = server.start_run("quick")
    server.wait_status(run_id, "delivered")
    again = server.http.post(f"/api/runs/{run_id}/approve")
    assert again.status_code == 409
    assert again.json()["error"] == {
        "code": "wrong_state",
        "message": f"run {run_id} is not paused (it is delivered); nothing to approve",
    }
    unknown = server.http.post("/api/runs", json={"pipeline": "nope", "topic": "x"})
    assert unknown.status_code == 404 and "registered: broken" in unknown.json()["error"]["message"]
    invalid = server.http.post("/api/runs", json={"topic": "no pipeline"})
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_request"
    inputs = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "x", "inputs": {"a": 1}}
    )
    assert "has no input 'a'" in inputs.json()["error"]["message"]


def test_cancel_and_resume(server: Server) -> None:
    """A running run is cancelled with a reason; resuming an ended run is refused."""
    run_id = server.start_run("gated")
    server.wait_status(run_id, "running")
    cancelled = server.http.post(f"/api/runs/{run_id}/cancel", json={"message": "not needed"})
    assert cancelled.status_code == 200
    run = server.wait_status(run_id, "cancelled")
    assert run["failure"] == "not needed"
    resumed = server.http.post(f"/api/runs/{run_id}/resume")
    assert resumed.status_code == 409


def test_path_traversal_is_refused(server: Server) -> None:
    """Run ids and file names cannot reach outside the run's directory."""
    run_id = server.start_run("quick")
    server.wait_status(run_id, "delivered")
    secret = server.config.home / "ledger.db"
    assert secret.exists()
    for name in (
        "..%2F..%2Fledger.db",
        "%2E%2E/%2E%2E/ledger.db",
        "%2Fetc%2Fpasswd",
        "..%5C..%5Cledger.db",
    ):
        response = server.http.get(f"/api/runs/{run_id}/outputs/{name}")
        assert response.status_code in (400, 404), name
        assert "SQLite" not in response.text and "root:" not in response.text
    bad_id = server.http.get("/api/runs/..%2F..%2Fetc/outputs")
    assert bad_id.status_code in (400, 404)
    upper = server.http.get("/api/runs/ABC/events")
    assert upper.status_code == 400
    assert upper.json()["error"]["message"] == str(
        UsageError("run id 'ABC' is not valid: lowercase letters, digits and '-' only")
    )


def test_limits_and_openapi(server: Server) -> None:
    """Large bodies get 413, foreign Host headers 403, and the OpenAPI document lists routes."""
    big = server.http.post(
        "/api/runs", content=b"x" * 70_000, headers={"content-type": "application/json"}
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "too_large"

    def chunks():  # no Content-Length: the limit still holds
        for _ in range(20):
            yield b"y" * 8192

    chunked = server.http.post(
        "/api/runs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413
    rebinding = httpx.get(f"{server.url}/api/runs", headers={"host": "evil.example:80"})
    assert rebinding.status_code == 403 and rebinding.json()["error"]["code"] == "bad_host"
    spec = server.http.get("/api/openapi.json").json()
    assert "/api/runs/{run_id}/approve" in spec["paths"] and "/api/runs" in spec["paths"]
    metrics = server.http.get("/metrics").text
    assert "interlock_runs" in metrics and "interlock_orchestrator_tick_seconds" in metrics
