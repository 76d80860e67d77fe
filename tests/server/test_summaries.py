"""`/ws/runs?view=summary` on a real server: run summaries per tick, each frame encoded once
for every client; and stream messages that say `waiting` for a run held by a wait."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import Server
from websockets.frames import Frame
from websockets.sync.client import ClientConnection, connect

from interlock.server import board as board_module


def summaries_until_final(socket: ClientConnection, runs: set[str]) -> list[str]:
    """The frames a summary client receives until every run in `runs` ended."""
    frames: list[str] = []
    ended: set[str] = set()
    while not runs <= ended:
        text = socket.recv(timeout=20)
        assert isinstance(text, str)
        data = json.loads(text)
        if data["type"] == "runs":
            frames.append(text)
            ended |= {s["run_id"] for s in data["runs"] if s["final"]}
    return frames


def twenty_watch_two_runs(server: Server, topic: str) -> list[list[str]]:
    """The summary frames each of twenty clients on the runs list received while two runs
    went from start to end."""
    with contextlib.ExitStack() as stack:
        sockets = [
            stack.enter_context(connect(f"{server.ws_url}/ws/runs?view=summary", open_timeout=5))
            for _ in range(20)
        ]
        for socket in sockets:
            assert json.loads(socket.recv(timeout=10))["type"] == "hello"
        runs = {server.start_run("wide", f"{topic} {n}") for n in range(2)}
        return [summaries_until_final(socket, runs) for socket in sockets]


def test_summary_view_sends_each_runs_latest_state_not_each_event(server: Server) -> None:
    """Three wide runs: the client gets fewer summaries than there were events, each run's
    summaries in order, and each run's final state (delivered, with its last seq)."""
    with connect(f"{server.ws_url}/ws/runs?view=summary", open_timeout=5) as socket:
        hello = json.loads(socket.recv(timeout=10))
        assert hello == {"type": "hello", "view": "summary", "interval": 0.1}
        runs = {server.start_run("wide", f"summary {n}") for n in range(3)}
        frames = summaries_until_final(socket, runs)
    seen: dict[str, list[dict[str, Any]]] = {}
    for frame in frames:
        data = json.loads(frame)
        assert set(data) == {"type", "at", "id", "runs"}
        for summary in data["runs"]:
            seen.setdefault(summary["run_id"], []).append(summary)
    events = 0
    for run_id in runs:
        total = server.http.get(f"/api/runs/{run_id}").json()["events"]
        events += total
        seqs = [s["seq"] for s in seen[run_id]]
        assert seqs == sorted(seqs) and seqs[-1] == total
        last = seen[run_id][-1]
        assert last["state"] == "delivered" and last["final"] and last["progress"] == 1.0
    assert sum(len(v) for v in seen.values()) < events, "one summary per event: not coalesced"


def test_summary_frames_are_encoded_once_for_all_clients(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty summary clients: every frame they receive was built once, not once per client."""
    built: list[str] = []
    real = board_module.frame_of

    def counting(at: float, last_id: int, runs: dict[str, str]) -> str:
        frame = real(at, last_id, runs)
        built.append(frame)
        return frame

    monkeypatch.setattr(board_module, "frame_of", counting)
    received = twenty_watch_two_runs(make_server(), "shared")
    every = [frame for frames in received for frame in frames]
    assert set(every) <= set(built)
    assert len(every) >= 10 * len(built), f"{len(built)} frames built for {len(every)} sent"


def test_summary_frames_are_serialized_once_for_all_clients(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty summary clients: each frame goes out as bytes serialized once and written to
    every client, not framed again for each client by starlette, uvicorn and websockets."""
    serialized: list[bytes] = []
    real = Frame.serialize

    def counting(self: Frame, **kwargs: Any) -> bytes:
        if bytes(self.data).startswith(b'{"type":"runs"'):
            serialized.append(bytes(self.data))
        return real(self, **kwargs)

    monkeypatch.setattr(Frame, "serialize", counting)
    received = twenty_watch_two_runs(make_server(), "wire")
    every = [frame.encode() for frames in received for frame in frames]
    assert set(every) <= set(serialized)
    assert len(every) >= 10 * len(serialized), f"{len(serialized)} serialized, {len(every)} sent"


def test_an_unknown_view_is_refused_with_a_clear_error(server: Server) -> None:
    """`/ws/runs?view=table` answers an error naming the views there are, then closes."""
    with connect(f"{server.ws_url}/ws/runs?view=table", open_timeout=5) as socket:
        message = json.loads(socket.recv(timeout=10))
        assert message["type"] == "error"
        assert "events, summary" in message["error"]["message"]
        with pytest.raises(Exception, match="4400"):
            socket.recv(timeout=10)


def test_stream_says_waiting_while_a_run_waits_for_a_signal(server: Server) -> None:
    """A run waiting for a signal is `waiting` in its stream messages (and in the summaries),
    with the signal it waits for; after the signal it runs again and delivers."""
    with connect(f"{server.ws_url}/ws/runs?view=summary", open_timeout=5) as board:
        assert json.loads(board.recv(timeout=10))["type"] == "hello"
        run_id = server.start_run("signalled", "waits")
        states: list[dict[str, Any]] = []
        for message in server.messages(f"/ws/runs/{run_id}", until_final=False):
            if message["type"] == "event":
                states.append(message)
                if message["kind"] == "wait_started":
                    break
        waiting = states[-1]
        assert waiting["state"] == "waiting"
        assert waiting["waiting"]["for"] == "signal"
        assert waiting["waiting"]["signal"] == "payment"
        summary: dict[str, Any] = {}
        while summary.get("seq") != waiting["seq"]:
            data = json.loads(board.recv(timeout=10))
            summary = next((s for s in data["runs"] if s["run_id"] == run_id), summary)
        assert summary["state"] == "waiting" and summary["waiting"]["signal"] == "payment"
    sent = server.http.post(f"/api/runs/{run_id}/signals/payment", json={"data": {"amount": 3}})
    assert sent.status_code == 202
    after = [
        m
        for m in server.messages(f"/ws/runs/{run_id}?since={waiting['seq']}")
        if m["type"] == "event"
    ]
    assert after[0]["kind"] == "signal_received"
    assert {m["state"] for m in after} == {"waiting", "running", "delivered"}
    assert after[-1]["state"] == "delivered" and after[-1]["waiting"] is None


def test_frames_are_not_compressed_per_client(server: Server) -> None:
    """The server declines permessage-deflate, which a client offers by default: compressing
    each shared frame once per client cost more CPU than everything else fan-out did."""
    with connect(f"{server.ws_url}/ws/runs?view=summary", open_timeout=5) as socket:
        assert socket.request is not None and socket.response is not None
        assert "permessage-deflate" in socket.request.headers["Sec-WebSocket-Extensions"]
        assert "Sec-WebSocket-Extensions" not in socket.response.headers
