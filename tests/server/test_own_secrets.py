"""The server's own secrets (its token secret, its hooks' secrets, its webhooks' URLs) reach
no `command:` worker that does not name them, and no view a `read` token gets, in any form."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from tests.mcpserver.helpers import call
from tests.server.conftest import ServerFactory
from tests.server.helpers import token
from tests.server.test_mcp_http import http_session
from tests.server.test_notify_schedule import Receiver

from interlock.server.hooks import load_hooks

JWT_SECRET = "own-jwt-secret-7f3a9c1e5b2d4f6a8c0e1b3d5f7a9c2e"
HOOK_SECRET = "own-hook-secret-2b4d6f8a0c1e3g5h"
HOOKS = """
[hooks.pay]
signal = "payment"
run_id = "run"
secret_env = "PAY_HOOK_SECRET"
"""
# Prints the whole environment to stdout, and on stderr (whose last line becomes the
# attempt's error) every variable of the server whose name says it is a secret.
DUMP = (
    "import os, sys; print(dict(os.environ)); "
    "print('secrets:', *(v for k, v in os.environ.items() if 'SECRET' in k), "
    "file=sys.stderr); sys.exit(3)"
)
# A command given the secrets by name prints each in the forms a program may use.
ENCODE = (
    "import base64, os, sys; vs = [os.environ[n] for n in ('INTERLOCK_AUTH_SECRET', "
    "'PAY_HOOK_SECRET')]; "
    "forms = [f(v) for v in vs for f in (str, str.upper, lambda v: v.encode().hex(), "
    "lambda v: base64.b64encode(v.encode()).decode(), "
    "lambda v: base64.urlsafe_b64encode(v.encode()).decode().rstrip('='))]; "
    "print(*forms); print(*forms, file=sys.stderr); sys.exit(3)"
)
FLOW = f"""
dump:
  phases:
    - id: one
      workers:
        - role: dumper
          command: ["{{python}}", "-c", {json.dumps(DUMP)}]
          final: true
named:
  env: [INTERLOCK_AUTH_SECRET, PAY_HOOK_SECRET]
  phases:
    - id: one
      workers:
        - role: printer
          command: ["{{python}}", "-c", {json.dumps(ENCODE)}]
          final: true
"""


def forms(secret: str) -> list[str]:
    """A secret as written and in the encodings a program may print it in."""
    data = secret.encode()
    return [
        secret,
        secret.upper(),
        data.hex(),
        data.hex().upper(),
        base64.b64encode(data).decode(),
        base64.urlsafe_b64encode(data).decode().rstrip("="),
    ]


def read_views(url: str, run_id: str, bearer: str) -> list[str]:
    """Everything a `read` token can see of a run: its detail, events, attempts and each
    attempt's detail (logs included), its notifications, and MCP's run_status."""
    client = httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {bearer}"})
    seen = []
    paths = [f"/api/runs/{run_id}", f"/api/runs/{run_id}/events", f"/api/runs/{run_id}/attempts"]
    attempts = client.get(f"/api/runs/{run_id}/attempts").json()["attempts"]
    paths += [f"/api/runs/{run_id}/attempts/{a['seq']}" for a in attempts]
    paths += [f"/api/runs/{run_id}/notifications", "/api/runs"]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        seen.append(response.text)
    client.close()

    async def status() -> dict[str, Any]:
        async with http_session(url, bearer) as reader:
            return await call(reader, "run_status", run_id=run_id)

    seen.append(json.dumps(asyncio.run(status())))
    return seen


def test_a_failing_command_that_prints_its_environment_shows_no_server_secret(
    make_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a server with a token secret and a hook secret in its environment, a failing
    command that prints its environment gets neither (nor any other variable off the
    allow-list); one that names them under `env:` and prints them plain, upper-case, hex and
    base64 leaves none of those forms in a read token's views (run detail, events, attempts,
    logs, MCP run_status) or in the state directory's files."""
    monkeypatch.setenv("INTERLOCK_AUTH_SECRET", JWT_SECRET)
    monkeypatch.setenv("PAY_HOOK_SECRET", HOOK_SECRET)
    monkeypatch.setenv("UNRELATED_TOKEN_OF_THE_SHELL", "shell-token-0123456789abcdef")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "interlock.toml").write_text(HOOKS)
    hooks = load_hooks(tmp_path / "conf" / "interlock.toml")
    flow = tmp_path / "flows" / "leaky.yaml"
    flow.parent.mkdir()
    flow.write_text(FLOW)
    server = make_server(workflows=[flow], auth_secret=JWT_SECRET, hooks=hooks)
    operate = token(["read", "operate"], secret=JWT_SECRET)
    server.http.headers["Authorization"] = f"Bearer {operate}"
    reader = token(["read"], secret=JWT_SECRET)

    dumped = server.start_run("dump", "env")
    server.wait_status(dumped, "failed")
    views = read_views(server.url, dumped, reader)
    detail = json.loads(views[3])  # the attempt's detail, with its logs
    assert "PATH" in detail["logs"]["stdout"] and "INTERLOCK_RUN_ID" in detail["logs"]["stdout"]
    for name in ("INTERLOCK_AUTH_SECRET", "PAY_HOOK_SECRET", "UNRELATED_TOKEN_OF_THE_SHELL"):
        assert name not in detail["logs"]["stdout"], f"the command got {name}"
    assert "secrets:" in json.loads(views[0])["failure"]

    named = server.start_run("named", "env")
    server.wait_status(named, "failed")
    views += read_views(server.url, named, reader)
    assert "[redacted]" in json.loads(views[-1])["failure"]
    stored = [p.read_bytes() for p in (tmp_path / "home").rglob("*") if p.is_file()]
    for secret in (JWT_SECRET, HOOK_SECRET):
        for form in forms(secret):
            for text in views:
                assert form not in text, f"{form} is in {text[:100]}"
            for data in stored:
                assert form.encode() not in data


def test_webhook_urls_are_shown_and_logged_without_their_path(
    make_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A webhook whose path and query are its key (a Slack-style URL) is listed by
    `/notifications` and logged on each failed attempt with its scheme and host alone; an
    error quoting the URL is recorded masked."""
    from interlock.server.notify import masked_error, sink_label

    receiver = Receiver()
    receiver.fail = True
    key_path = "services/T0AAAA/B0BBBB/XyZsecretPathPart0123"
    url = f"{receiver.url}/{key_path}?token=query-secret-0123456789"
    host = receiver.url.rsplit("/", 1)[0]
    caplog.set_level(logging.WARNING, logger="interlock.server")
    try:
        server = make_server(webhooks=[url])
        run_id = server.start_run("quick", "hooks")
        server.wait_status(run_id, "delivered")
        receiver.wait(lambda: len(receiver.attempts) >= 1)
        deadline = time.time() + 10
        while (
            not (notes := server.http.get(f"/api/runs/{run_id}/notifications").json())
            or not (notes[0]["last_error"])
        ):
            assert time.time() < deadline, notes
            time.sleep(0.05)
    finally:
        receiver.httpd.shutdown()
        receiver.httpd.server_close()
    assert notes[0]["sink"] == f"{host}/[redacted]"
    assert notes[0]["last_error"] == "HTTP 503"
    logged = [r.getMessage() for r in caplog.records if r.name == "interlock.server"]
    assert any(f"webhook {host}/[redacted]: HTTP 503" in m for m in logged), logged
    for text in [json.dumps(notes), *logged]:
        assert "XyZsecretPathPart0123" not in text and "query-secret-0123456789" not in text
    quoted = f"ConnectError: cannot reach {url} (or {urlsplit(url).path})"
    assert masked_error(quoted, url) == "ConnectError: cannot reach [redacted] (or [redacted])"
    assert sink_label("https://hooks.example.com/") == "https://hooks.example.com/"
    assert sink_label("https://u:p@hooks.example.com:8443/x?y=1") == (
        "https://hooks.example.com:8443/[redacted]"
    )
