"""Clients that leave in the middle, clients that never finish a request, idle streams."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import time
from pathlib import Path

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import WORKFLOW, Server, write_workflow
from websockets.sync.client import connect

from interlock.server import ws as ws_module

WORKERS = "\n".join(f"        - {{role: w{i}, call: srv.many}}" for i in range(120))
LONG = f"""
long:
  phases:
    - id: fan
      pause_after: true
      workers:
{WORKERS}
    - id: join
      workers:
        - {{role: joiner, call: srv.many, final: true}}
"""


def stream_tasks(server: Server) -> list[str]:
    """Names of the server loop's tasks that belong to stream clients."""
    loop = server.service.hub._loop
    names = [t.get_coro().__qualname__ for t in asyncio.all_tasks(loop)]  # type: ignore[union-attr]
    return [n for n in names if n in ("Queue.get", "_serve.<locals>.pump")]


def test_closing_during_replay_ends_promptly_and_cleanly(
    make_server: ServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that closes during its since= replay, or right after it, gets a 1000 close at
    once; the server lets go of it and leaves no task pending to be destroyed later."""
    caplog.set_level(logging.WARNING)
    (tmp_path / "long").mkdir()
    flow = write_workflow(tmp_path / "long", WORKFLOW + LONG)
    server = make_server(workflows=[flow])
    run_id = server.start_run("long", "history")
    server.wait_status(run_id, "paused", timeout=60)
    total = server.http.get(f"/api/runs/{run_id}").json()["events"]
    assert total > 300
    for cut in (1, 30, 250, total + 1):  # the last one: the whole replay, then waiting live
        started = time.monotonic()
        with connect(
            f"{server.ws_url}/ws/runs/{run_id}?since=0", max_queue=None, close_timeout=10
        ) as socket:
            for _ in range(cut):
                json.loads(socket.recv(timeout=10))
            closing = time.monotonic()
        took = time.monotonic() - closing
        assert socket.close_code == 1000, (cut, socket.close_code)
        # Generous bounds (a busy machine is slow): a close that waited for the server's
        # close timeout (10 s) or a replay that was not cut short would still exceed them.
        assert took < 8.0, f"closing after {cut} messages took {took:.1f}s"
        deadline = time.monotonic() + 30
        while server.service.hub._subscribers and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not server.service.hub._subscribers, f"the server kept the client ({cut})"
        assert time.monotonic() - started < 60
    loop = server.service.hub._loop

    async def collect() -> None:
        gc.collect()

    asyncio.run_coroutine_threadsafe(collect(), loop).result(timeout=30)
    deadline = time.monotonic() + 30
    while stream_tasks(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stream_tasks(server) == []
    destroyed = [r.getMessage() for r in caplog.records if "destroyed" in r.getMessage()]
    assert destroyed == []


def test_idle_sse_stream_sends_keepalives_and_stays_open(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SSE stream with nothing to say sends keepalive comments and still delivers the next
    event: waiting for a message is not cancelled by the keepalive tick."""
    monkeypatch.setattr(ws_module, "KEEPALIVE", 0.2)
    run_id = server.start_run("review", "idle")
    server.wait_status(run_id, "paused")
    last = server.http.get(f"/api/runs/{run_id}").json()["events"]
    keepalives, kinds = 0, []
    with server.http.stream("GET", f"/api/runs/{run_id}/stream", params={"since": last}) as sse:
        lines = sse.iter_lines()
        while keepalives < 2:  # the stream stays open through several keepalives
            line = next(lines)
            keepalives += line.startswith(": keepalive")
        server.http.post(f"/api/runs/{run_id}/approve")
        for line in lines:
            if line.startswith("data: "):
                message = json.loads(line[6:])
                if message["type"] == "event":
                    kinds.append(message["kind"])
                    if message["final"]:
                        break
    assert keepalives >= 2
    assert kinds[0] == "approved" and "delivered" in kinds


def slow_socket(server: Server) -> socket.socket:
    """A raw TCP connection to the server."""
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def answer(sock: socket.socket, trickle: bytes = b"", every: float = 0.2) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took; `trickle` is sent a
    byte at a time meanwhile, as a slow client would."""
    started = time.monotonic()
    sock.settimeout(every)
    received = b""
    pending = list(trickle)
    while time.monotonic() - started < 8:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            if pending:
                with contextlib.suppress(OSError):
                    sock.sendall(bytes([pending.pop(0)]))
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received, time.monotonic() - started


def test_slow_headers_and_bodies_are_cut_off(make_server: ServerFactory) -> None:
    """Connections that send nothing, trickle their headers or trickle their body get 408 and
    are closed once their deadline passes, while other clients are served meanwhile; a
    WebSocket outlives the header deadline."""
    server = make_server(header_timeout=1.0, body_timeout=1.0)
    head = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    body = b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    body += b'Content-Length: 200\r\n\r\n{"pipeline": '
    silent = [slow_socket(server) for _ in range(4)]
    heads = [slow_socket(server) for _ in range(4)]
    bodies = [slow_socket(server) for _ in range(2)]
    for sock in heads:
        sock.sendall(head)
    for sock in bodies:
        sock.sendall(body)
    with connect(f"{server.ws_url}/ws/runs") as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "hello"
        results = [answer(s) for s in silent]
        results += [answer(s, trickle=b"X-Slow: " + b"a" * 100) for s in heads]
        results += [answer(s, trickle=b'"quick", ' * 30) for s in bodies]
        assert server.http.get("/api/health").status_code == 200
        run_id = server.start_run("quick", "after the deadline")
        message = json.loads(ws.recv(timeout=5))  # the socket is older than the deadline
        assert message["run_id"] == run_id
    for received, took in results:
        assert received.startswith(b"HTTP/1.1 408 "), received[:200]
        assert b'"request_timeout"' in received
        # The deadline is 1 s; the trickles would last 20 s and more: 6 s leaves room for a
        # busy machine and still tells a cut-off from a client that finished on its own.
        assert took < 6.0, took
    for sock in silent + heads + bodies:
        sock.close()
    polite = slow_socket(server)
    polite.sendall(head)
    time.sleep(0.4)
    polite.sendall(b"\r\n")
    polite.settimeout(5)
    assert polite.recv(4096).startswith(b"HTTP/1.1 200 ")
    polite.close()


def test_timeouts_must_be_positive(tmp_path: Path) -> None:
    """A zero or negative deadline is refused with the option's name."""
    from interlock.errors import UsageError
    from interlock.server.config import ServerConfig

    with pytest.raises(UsageError, match="--body-timeout"):
        ServerConfig(home=tmp_path, body_timeout=0).check()
