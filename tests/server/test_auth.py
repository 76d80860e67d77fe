"""Tokens, scopes, Origin checks, rate limits, and refusing to serve openly off loopback."""

from __future__ import annotations

import json

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, token
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from interlock.errors import UsageError
from interlock.server.config import ServerConfig


def auth(value: str) -> dict[str, str]:
    """An Authorization header."""
    return {"Authorization": f"Bearer {value}"}


def test_http_tokens_and_scopes(make_server: ServerFactory) -> None:
    """No token, a bad signature or an expired token get 401; a read token cannot act."""
    server = make_server(auth_secret=SECRET)
    assert server.http.get("/api/runs").json()["error"]["code"] == "unauthorized"
    forged = token(["read", "operate"], secret="another-secret-of-enough-length-for-hs256")
    assert (
        server.http.get("/api/runs", headers=auth(forged)).json()["error"]["code"]
        == "invalid_token"
    )
    expired = server.http.get("/api/runs", headers=auth(token(["read"], ttl=-60)))
    assert expired.status_code == 401 and expired.json()["error"]["code"] == "token_expired"
    reader = auth(token(["read"]))
    assert server.http.get("/api/runs", headers=reader).status_code == 200
    denied = server.http.post("/api/runs", json={"pipeline": "quick", "topic": "x"}, headers=reader)
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    operator = auth(token(["read", "operate"]))
    started = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "x"}, headers=operator
    )
    assert started.status_code == 201
    assert server.http.get("/metrics").status_code == 401


def test_websocket_auth_and_origin(make_server: ServerFactory) -> None:
    """WebSocket tokens come in the subprotocol or the query; foreign origins are refused."""
    server = make_server(auth_secret=SECRET, allowed_origins=["https://ops.example"])
    good = token(["read"])
    with connect(f"{server.ws_url}/ws/runs", subprotocols=["interlock", f"bearer.{good}"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "interlock"
        assert json.loads(ws.recv(timeout=5))["type"] == "hello"
    with connect(
        f"{server.ws_url}/ws/runs?token={good}", origin=Origin("https://ops.example")
    ) as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "hello"
    with connect(f"{server.ws_url}/ws/runs") as ws:
        message = json.loads(ws.recv(timeout=5))
        assert message["error"]["code"] == "unauthorized"
    bad = token(["read"], ttl=-5)
    with connect(f"{server.ws_url}/ws/runs?token={bad}") as ws:
        assert json.loads(ws.recv(timeout=5))["error"]["code"] == "token_expired"
    with connect(f"{server.ws_url}/ws/runs?token={token(['operate'])}") as ws:
        assert json.loads(ws.recv(timeout=5))["error"]["code"] == "forbidden"
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{server.ws_url}/ws/runs?token={good}", origin=Origin("https://evil.example"))
    assert refused.value.response.status_code == 403


def test_cross_origin_actions_are_refused(server: object) -> None:
    """Without auth on loopback, a web page of another origin still cannot act."""
    from tests.server.helpers import Server

    assert isinstance(server, Server)
    response = server.http.post(
        "/api/runs",
        json={"pipeline": "quick", "topic": "x"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "bad_origin"
    same = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "x"}, headers={"Origin": server.url}
    )
    assert same.status_code == 201


def test_rate_limit_per_token(make_server: ServerFactory) -> None:
    """Mutating requests beyond the burst get 429 with Retry-After; other tokens are unaffected."""
    server = make_server(auth_secret=SECRET, rate_limit=6.0, rate_burst=3)
    first = auth(token(["read", "operate"]))
    codes = [
        server.http.post("/api/runs/none-here/cancel", headers=first).status_code for _ in range(5)
    ]
    assert codes[:3] == [404, 404, 404] and codes[3:] == [429, 429]
    limited = server.http.post("/api/runs/none-here/cancel", headers=first)
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limited"
    other = auth(token(["read", "operate"], ttl=700))
    assert server.http.post("/api/runs/none-here/cancel", headers=other).status_code == 404
    assert server.http.get("/api/runs", headers=first).status_code == 200  # reads are not limited


def test_refuses_open_network_serving(tmp_path: object) -> None:
    """Binding a non-loopback address without auth needs --insecure."""
    config = ServerConfig(home=tmp_path, host="0.0.0.0")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="needs auth"):
        config.check()
    ServerConfig(home=tmp_path, host="0.0.0.0", insecure=True).check()  # type: ignore[arg-type]
    ServerConfig(home=tmp_path, host="0.0.0.0", auth_secret=SECRET).check()  # type: ignore[arg-type]
    ServerConfig(home=tmp_path, host="::1").check()  # type: ignore[arg-type]


def test_a_malformed_token_gets_a_plain_401(make_server: ServerFactory) -> None:
    """A bearer token that is not a JWT (bytes no decoder can read) gets 401 'the token is
    not a valid JWT', without the decoding library's text."""
    server = make_server(auth_secret=SECRET)
    for bad in ("t7W8.abc.def", "not-a-jwt", "eyJhbGciOiJIUzI1NiJ9.e30"):
        answer = server.http.get("/api/runs", headers=auth(bad))
        assert answer.status_code == 401
        error = answer.json()["error"]
        assert error == {
            **error,
            "code": "invalid_token",
            "message": "the token is not a valid JWT",
        }
