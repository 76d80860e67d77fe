"""Secrets never leave the server: not in API responses, streams, metrics or the dashboard."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import token

API_KEY = "canary-server-api-key-91c4e7a2d0"
JWT_SECRET = "canary-jwt-secret-5e8b1f3c7a9d2e4f6b8c0a1d3e5f7b9c"
CONFIG = """
[providers.fake]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "SERVER_CANARY_KEY"
max_attempts = 1

[models.m]
provider = "fake"
model = "x"
"""
FLOW = """
leaky:
  phases:
    - id: one
      workers:
        - {role: caller, model: m, task: "hello", timeout: 5, final: true}
"""


def test_canaries_appear_in_no_response_stream_or_page(
    make_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that fails calling a provider with a canary key, on a server whose JWT secret is
    a canary, shows neither canary in any endpoint (the attempt detail with its exact prompt
    included), WebSocket message or dashboard file."""
    monkeypatch.setenv("SERVER_CANARY_KEY", API_KEY)
    (tmp_path / "interlock.toml").write_text(CONFIG)
    flow = tmp_path / "leaky.yaml"
    flow.write_text(FLOW)
    server = make_server(workflows=[flow], auth_secret=JWT_SECRET)
    bearer = token(["read", "operate"], secret=JWT_SECRET)
    client = httpx.Client(
        base_url=server.url, timeout=10, headers={"Authorization": f"Bearer {bearer}"}
    )
    started = client.post("/api/runs", json={"pipeline": "leaky", "topic": "t"})
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    deadline = time.time() + 20
    while client.get(f"/api/runs/{run_id}").json().get("status") != "failed":
        assert time.time() < deadline, "the run did not fail"
        time.sleep(0.1)
    seen: list[str] = []
    for path in (
        "/api/runs", f"/api/runs/{run_id}", f"/api/runs/{run_id}/events",
        f"/api/runs/{run_id}/outputs", f"/api/runs/{run_id}/notifications", "/api/workflows",
        "/metrics", "/api/openapi.json", "/ui/", "/ui/app.js",
        f"/api/runs/{run_id}/attempts", f"/api/runs/{run_id}/graph",
        *(f"/api/runs/{run_id}/attempts/{a['seq']}"
          for a in client.get(f"/api/runs/{run_id}/attempts").json()["attempts"]),
    ):  # fmt: skip
        response = client.get(path)
        seen.append(f"{path} {response.status_code} {response.text}")
    subprotocols = ["interlock", f"bearer.{bearer}"]
    messages = list(server.messages(f"/ws/runs/{run_id}?since=0", subprotocols=subprotocols))
    seen.append(json.dumps(messages))
    assert all(" 200 " in text for text in seen[:-1]), [t[:60] for t in seen]
    assert any("failed" in text for text in seen)
    for canary in (API_KEY, JWT_SECRET):
        for text in seen:
            assert canary not in text, f"{canary} leaked in {text[:80]}"
    client.close()
