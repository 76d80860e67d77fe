"""The iteration API: POST /api/runs/{id}/rerun (operate scope) and GET .../diff/{other}."""

from __future__ import annotations

from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, Server, token


def auth(value: str) -> dict[str, str]:
    """A bearer header."""
    return {"authorization": f"Bearer {value}"}


def test_rerun_reuses_the_source_and_the_server_drives_it(server: Server) -> None:
    """A rerun of a delivered run is created (201, naming its source), driven to delivery,
    and its reused task shows as reused; the source is left as it was."""
    source = server.start_run("wide")
    server.wait_status(source, "delivered")
    before = server.http.get(f"/api/runs/{source}/events").json()
    plan = server.http.post(
        f"/api/runs/{source}/rerun", json={"from_phase": "join", "dry_run": True}
    )
    assert plan.status_code == 200, plan.text
    assert [t["action"] for t in plan.json()["tasks"]] == ["reuse"] * 6 + ["run"]
    created = server.http.post(f"/api/runs/{source}/rerun", json={"from_phase": "join"})
    assert created.status_code == 201, created.text
    new = created.json()["run_id"]
    assert created.json()["rerun_of"] == source
    server.wait_status(new, "delivered")
    ledger = server.service.api.ledger(new)
    assert [t["status"] for t in ledger["tasks"]] == ["REUSED"] * 6 + ["COMPLETE"]
    assert server.http.get(f"/api/runs/{source}/events").json() == before
    diff = server.http.get(f"/api/runs/{source}/diff/{new}").json()
    assert {t["b"] for t in diff["tasks"]} == {"reused", "ran"}


def test_bad_reruns_are_clear_errors(server: Server) -> None:
    """A run that has not ended is 409, an unknown phase 400, an unknown run 404."""
    paused = server.start_run("review")
    server.wait_status(paused, "paused")
    answer = server.http.post(f"/api/runs/{paused}/rerun", json={})
    assert answer.status_code == 409 and "still paused" in answer.text
    server.http.post(f"/api/runs/{paused}/cancel")
    server.wait_status(paused, "cancelled")
    answer = server.http.post(f"/api/runs/{paused}/rerun", json={"from_phase": "nope"})
    assert answer.status_code == 400 and "its phases are draft, edit" in answer.text
    assert server.http.post("/api/runs/nothing-here/rerun", json={}).status_code == 404


def test_rerun_needs_the_operate_scope(make_server: ServerFactory) -> None:
    """A reader may plan nothing and start nothing: 403."""
    server = make_server(auth_secret=SECRET)
    operator = auth(token(["read", "operate"]))
    source = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "x"}, headers=operator
    ).json()["run_id"]
    reader = auth(token(["read"]))
    answer = server.http.post(f"/api/runs/{source}/rerun", json={}, headers=reader)
    assert answer.status_code == 403
