"""What an attacker or a careless client tried: malformed tokens, tokens in URLs, floods,
files beside the outputs, symlinked run directories, cross-origin pages, offline docs."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, Server, token
from websockets.sync.client import connect


def wait_archived(server: Server, run_id: str, timeout: float = 30) -> None:
    """Poll until the delivered run's directory has been moved to the archive."""
    deadline = time.time() + timeout
    while not server.http.get(f"/api/runs/{run_id}").json().get("archived"):
        assert time.time() < deadline, f"run {run_id} was never archived"
        time.sleep(0.05)


def bearer(value: str) -> dict[str, str]:
    """An Authorization header."""
    return {"Authorization": f"Bearer {value}"}


def signed(**claims: Any) -> str:
    """A token signed with the server's real secret, with `claims` over sane defaults."""
    now = int(time.time())
    payload: dict[str, Any] = {"sub": "tester", "scope": "read operate", "exp": now + 600}
    payload.update(claims)
    return jwt.encode(payload, SECRET, algorithm="HS256")


MALFORMED: dict[str, dict[str, Any]] = {
    "scope is a number": {"scope": 5},
    "scope is an object": {"scope": {"read": True}},
    "scope is a list of numbers": {"scope": [1, 2]},
    "sub is a number": {"sub": 42},
    "sub is empty": {"sub": ""},
    "exp is text": {"exp": "tomorrow"},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_claims_are_invalid_tokens(make_server: ServerFactory, case: str) -> None:
    """A well-signed token with a malformed claim gets 401 invalid_token (JSON) on REST routes
    and close code 4401 on WebSockets, never a 500 or a code-less close."""
    server = make_server(auth_secret=SECRET)
    value = signed(**MALFORMED[case])
    for path in ("/api/runs", "/api/workflows", "/metrics", "/api/runs/nope/events"):
        response = server.http.get(path, headers=bearer(value))
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "invalid_token"
    started = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "x"}, headers=bearer(value)
    )
    assert started.status_code == 401 and started.json()["error"]["code"] == "invalid_token"
    with connect(
        f"{server.ws_url}/ws/runs",
        subprotocols=["interlock", f"bearer.{value}"],  # type: ignore[list-item]
    ) as ws:
        message = json.loads(ws.recv(timeout=5))
        assert message["error"]["code"] == "invalid_token"
        with pytest.raises(Exception):  # noqa: B017 - the close, whatever the library calls it
            ws.recv(timeout=5)
    assert ws.close_code == 4401 and ws.close_reason == "invalid_token"


def test_list_of_scope_names_is_accepted(make_server: ServerFactory) -> None:
    """A `scope` claim given as a list of names grants those names."""
    server = make_server(auth_secret=SECRET)
    value = signed(scope=["read"])
    assert server.http.get("/api/runs", headers=bearer(value)).status_code == 200
    assert server.http.get("/api/me", headers=bearer(value)).json()["scopes"] == ["read"]


def test_query_token_only_on_streams_and_downloads(make_server: ServerFactory) -> None:
    """`?token=` is refused on REST routes (with a message saying where to put it) and accepted
    on Server-Sent Events and downloads."""
    server = make_server(auth_secret=SECRET)
    good = token(["read", "operate"])
    run_id = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "q"}, headers=bearer(good)
    ).json()["run_id"]
    deadline = time.time() + 15
    while server.http.get(f"/api/runs/{run_id}", headers=bearer(good)).json()["status"] != (
        "delivered"
    ):
        assert time.time() < deadline
        time.sleep(0.05)
    for path in (
        "/api/runs",
        f"/api/runs/{run_id}",
        f"/api/runs/{run_id}/events",
        f"/api/runs/{run_id}/outputs",
        f"/api/runs/{run_id}/outputs/final.md",
        "/metrics",
    ):
        refused = server.http.get(path, params={"token": good})
        assert refused.status_code == 401, path
        assert "Authorization: Bearer" in refused.json()["error"]["message"]
    action = server.http.post(f"/api/runs/{run_id}/cancel", params={"token": good})
    assert action.status_code == 401
    download = server.http.get(
        f"/api/runs/{run_id}/outputs/final.md", params={"download": 1, "token": good}
    )
    assert download.status_code == 200 and "Notes on **q**" in download.text
    with server.http.stream(
        "GET", f"/api/runs/{run_id}/stream", params={"token": good, "since": 0}
    ) as stream:
        assert stream.status_code == 200
        first = next(line for line in stream.iter_lines() if line.startswith("data: "))
        assert json.loads(first[6:])["type"] == "hello"
    with connect(f"{server.ws_url}/ws/runs?token={good}") as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "hello"


def test_flood_of_submits_does_not_block_approve(make_server: ServerFactory) -> None:
    """Without auth every loopback client is one caller; a script flooding submits exhausts the
    start bucket only, and the dashboard's Approve still goes through."""
    server = make_server(rate_limit=6.0, rate_burst=3)
    run_id = server.start_run("review", "flood")
    server.wait_status(run_id, "paused")
    codes = [
        server.http.post("/api/runs", json={"pipeline": "nope", "topic": "x"}).status_code
        for _ in range(8)
    ]
    assert codes[-1] == 429, codes
    approved = server.http.post(f"/api/runs/{run_id}/approve", json={"message": "ok"})
    assert approved.status_code == 200, approved.text
    server.wait_status(run_id, "delivered")
    cancels = [server.http.post("/api/runs/none-here/cancel").status_code for _ in range(5)]
    assert cancels[:3] == [404, 404, 404] and cancels[-1] == 429


def test_outputs_serve_only_outputs_and_final(server: Server) -> None:
    """Logs, prompts, status.json and other files of the run's directory are not served; the
    committed outputs and final.md are."""
    run_id = server.start_run("review", "files")
    server.wait_status(run_id, "paused")
    server.http.post(f"/api/runs/{run_id}/approve")
    server.wait_status(run_id, "delivered")
    wait_archived(server, run_id)  # archiving moves the directory once delivered
    run_dir = server.service.home.run_dir(run_id)
    (run_dir / "logs").mkdir(exist_ok=True)
    (run_dir / "logs" / "editor.1.log").write_text("agent said: sk-secret")
    (run_dir / "prompts").mkdir(exist_ok=True)
    (run_dir / "prompts" / "editor.1.md").write_text("the exact prompt")
    (run_dir / "notes.txt").write_text("stray file")
    listed = server.http.get(f"/api/runs/{run_id}/outputs").json()
    assert sorted(o["name"] for o in listed) == ["draft.md", "editor.md", "final.md"]
    for name in ("draft.md", "editor.md", "final.md"):
        assert server.http.get(f"/api/runs/{run_id}/outputs/{name}").status_code == 200
    for name in (
        "logs/editor.1.log",
        "prompts/editor.1.md",
        "status.json",
        "notes.txt",
        "logs",
    ):
        response = server.http.get(f"/api/runs/{run_id}/outputs/{name}")
        assert response.status_code in (400, 404), (name, response.text)
        assert "sk-secret" not in response.text and "exact prompt" not in response.text


def test_symlinked_run_directory_is_refused(server: Server, tmp_path: Path) -> None:
    """A run directory that is a symlink out of the state directory is not served."""
    run_id = server.start_run("quick", "inside")
    server.wait_status(run_id, "delivered")
    wait_archived(server, run_id)
    run_dir = server.service.home.run_dir(run_id)
    outside = tmp_path / "elsewhere" / run_id
    outside.parent.mkdir()
    shutil.move(str(run_dir), str(outside))
    (outside / "final.md").write_text("OUTSIDE the state directory")
    run_dir.symlink_to(outside, target_is_directory=True)
    response = server.http.get(f"/api/runs/{run_id}/outputs/final.md")
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "outside_home"
    assert "OUTSIDE" not in response.text
    listing = server.http.get(f"/api/runs/{run_id}/outputs")
    assert listing.status_code == 403
    download = server.http.get(f"/api/runs/{run_id}/outputs/final.md", params={"download": 1})
    assert download.status_code == 403


def test_cors_preflight_for_allowed_origins(make_server: ServerFactory) -> None:
    """A preflight from an --allow-origin origin is answered with the CORS grant; another
    origin gets none, and a cross-origin call with a token works."""
    app = "https://ops.example"
    server = make_server(auth_secret=SECRET, allowed_origins=[app + "/"])
    preflight = server.http.options(
        "/api/runs/abc/approve",
        headers={
            "Origin": app,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == app
    allowed = preflight.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in preflight.headers
    foreign = server.http.options(
        "/api/runs",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in foreign.headers
    listed = server.http.get(
        "/api/runs", headers={"Origin": app, **bearer(token(["read", "operate"]))}
    )
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == app
    started = server.http.post(
        "/api/runs",
        json={"pipeline": "quick", "topic": "x"},
        headers={"Origin": app, **bearer(token(["read", "operate"]))},
    )
    assert started.status_code == 201
    assert started.headers["access-control-allow-origin"] == app


def test_api_docs_assets_come_from_the_server(server: Server) -> None:
    """The docs page names only assets of this server, and each of them is served."""
    page = server.http.get("/api/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", page.text)
    found = [a or b for a, b in urls]
    assert found, page.text
    for url in found:
        assert url.startswith("/"), f"{url} is not served here"
        assert server.http.get(url).status_code == 200, url
    assert "cdn" not in page.text.lower()
    script = next(u for u in found if u.endswith(".js"))
    assert "SwaggerUIBundle" in server.http.get(script).text
