"""Fan-out to many watchers: each message is encoded once, and a client that stops reading is
dropped without delaying anyone else."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import threading
import time
from typing import Any

import pytest
from tests.server.conftest import ServerFactory
from websockets.sync.client import connect

from interlock.server import hub as hub_module

TOKENS = 300
BODY = "x" * 60_000  # large enough that a client that never reads fills every buffer on the way


def stalled_client(port: int) -> socket.socket:
    """A WebSocket client of every run that completes the handshake, then never reads."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: fills fast
    raw.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall(
        (
            f"GET /ws/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    answer = raw.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return raw


def subscribers(server: Any) -> int:
    return len(server.service.hub._everyone)


def test_a_stalled_client_is_dropped_and_does_not_delay_others(
    make_server: ServerFactory,
) -> None:
    """While one client never reads, another receives every message promptly, and the stalled
    one is dropped once it is `queue_size` messages behind."""
    server = make_server(queue_size=100)
    port = int(server.url.rsplit(":", 1)[1])
    stalled = stalled_client(port)
    deadline = time.monotonic() + 10
    while subscribers(server) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    (stuck,) = server.service.hub._everyone
    arrived: dict[int, float] = {}
    ready = threading.Event()

    def read() -> None:
        with connect(f"{server.ws_url}/ws/runs?batch=1", max_size=None) as client:
            ready.set()
            while len(arrived) < TOKENS:
                data = json.loads(client.recv(timeout=30))
                for message in data if isinstance(data, list) else [data]:
                    if message["type"] == "token":
                        arrived[int(message["task_id"])] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(10)
    deadline = time.monotonic() + 10
    while subscribers(server) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert subscribers(server) == 2
    sent: dict[int, float] = {}
    for number in range(TOKENS):
        sent[number] = time.monotonic()
        server.service.hub.on_progress("some-run", str(number), BODY)
        time.sleep(0.002)
    reader.join(30)
    assert len(arrived) == TOKENS
    lag = max(arrived[n] - sent[n] for n in range(TOKENS))
    assert lag < 2.0, f"the reading client waited {lag:.2f}s for a message"
    assert stuck.dropped.is_set()
    deadline = time.monotonic() + 10
    metrics = ""
    while "interlock_stream_dropped_total 1.0" not in metrics and time.monotonic() < deadline:
        metrics = server.http.get("/metrics").text  # told it fell behind, then closed
        time.sleep(0.1)
    assert "interlock_stream_dropped_total 1.0" in metrics
    stalled.close()


def test_each_live_message_is_encoded_once_for_all_clients(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty clients of every run: a run's live events are encoded once each, not per client."""
    encoded: list[str] = []
    real = hub_module.encode

    def counting(message: dict[str, Any]) -> hub_module.Encoded:
        if message.get("type") == "event":
            encoded.append(f"{message['run_id']}/{message['seq']}")
        return real(message)

    monkeypatch.setattr(hub_module, "encode", counting)
    server = make_server()
    with contextlib.ExitStack() as stack:
        clients = [
            stack.enter_context(connect(f"{server.ws_url}/ws/runs?batch=1")) for _ in range(20)
        ]
        for client in clients:
            assert json.loads(client.recv(timeout=10))["type"] == "hello"
        run_id = server.start_run("quick")
        for client in clients:
            final = False
            while not final:
                data = json.loads(client.recv(timeout=20))
                final = any(m.get("final") for m in (data if isinstance(data, list) else [data]))
    total = server.http.get(f"/api/runs/{run_id}").json()["events"]
    assert sorted(encoded) == sorted({f"{run_id}/{seq}" for seq in range(1, total + 1)})
