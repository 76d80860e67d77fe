"""JSON bodies that parse into trouble are a 400 with the reason, on every route that takes
one, and nothing of them is recorded."""

from __future__ import annotations

import pytest
from tests.server.helpers import Server

DEEP = "[" * 30_000 + "]" * 30_000
CASES = [
    ('{"data": ' + DEEP + "}", "30001 levels deep; at most 64 are accepted"),
    ('{"data": {"amount": NaN}}', "holds NaN, which is not a JSON number"),
    ('{"data": {"amount": -Infinity}}', "holds -Infinity, which is not a JSON number"),
    ('{"data": {"amount": ' + "9" * 5000 + "}}", "holds a number that cannot be read"),
    ('{"data": {"amount": "\\ud800"}}', "lone UTF-16 surrogate"),
    ('{"data": {"\\udfff": 1}}', "lone UTF-16 surrogate"),
]


@pytest.mark.parametrize(("body", "reason"), CASES)
def test_a_hostile_signal_body_is_a_400_with_the_reason(
    server: Server, body: str, reason: str
) -> None:
    """A signal's body nested past the limit, with NaN or Infinity, an unreadable number or a
    lone surrogate is refused with why; the run records no signal and reads as before."""
    run_id = server.start_run("signalled")
    server.wait_status(run_id, "waiting")
    answer = server.http.post(
        f"/api/runs/{run_id}/signals/payment",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert reason in answer.json()["error"]["message"]
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    assert not [e for e in events if e["kind"] == "signal_received"]
    assert server.http.get(f"/api/runs/{run_id}").status_code == 200


@pytest.mark.parametrize("path", ["/api/runs", "/api/runs/r/approve", "/api/runs/r/rerun", "/mcp"])
def test_every_json_route_refuses_a_body_nested_too_deep(server: Server, path: str) -> None:
    """Starting, approving, rerunning and MCP calls answer a body nested 30,000 deep with a
    400 that says so (FastAPI's parser said only "error parsing the body"; MCP's SDK has its
    own words): never a 500."""
    body = '{"pipeline": "quick", "topic": "t", "inputs": {"a": ' + DEEP + "}}"
    answer = server.http.post(path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert "levels deep" in answer.json()["error"]["message"]
