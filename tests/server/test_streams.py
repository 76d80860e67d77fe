"""Live streams: WebSocket and SSE messages, reconnecting with since, tokens, backpressure."""

from __future__ import annotations

import json
from typing import Any

import httpx
from tests.server.conftest import ServerFactory
from tests.server.helpers import Server


def events_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Only the event messages."""
    return [m for m in messages if m["type"] == "event"]


def test_run_stream_has_every_event_in_order(server: Server) -> None:
    """One message per event, numbered without gaps, with state, progress and a final flag."""
    run_id = server.start_run("quick", "streams")
    messages = list(server.messages(f"/ws/runs/{run_id}"))
    assert messages[0] == {"type": "hello", "run_id": run_id, "since": 0}
    events = events_of(messages)
    assert [m["seq"] for m in events] == list(range(1, len(events) + 1))
    assert [m["final"] for m in events] == [False] * (len(events) - 1) + [True]
    last = events[-1]
    assert last["state"] == "delivered" and last["progress"] == 1.0
    assert all(isinstance(m["message"], str) and m["message"] for m in events)
    assert all(0.0 <= m["progress"] <= 1.0 for m in events)
    delivered = next(m for m in events if m["kind"] == "delivered")
    assert delivered["notification"]["kind"] == "delivered"
    assert "Notes on **streams**" in delivered["notification"]["text"]


def test_reconnect_with_since_has_no_gaps_or_duplicates(server: Server) -> None:
    """A client that disconnects mid-run and resumes with since sees each event exactly once."""
    run_id = server.start_run("review", "resume")
    seen: list[int] = []
    for message in server.messages(f"/ws/runs/{run_id}", until_final=False):
        if message["type"] == "event":
            seen.append(message["seq"])
            if message["kind"] == "paused":
                break
    server.http.post(f"/api/runs/{run_id}/approve")
    for message in server.messages(f"/ws/runs/{run_id}?since={seen[-1]}"):
        if message["type"] == "event":
            seen.append(message["seq"])
    total = server.http.get(f"/api/runs/{run_id}").json()["events"]
    assert seen == list(range(1, total + 1))


def test_all_runs_stream_resumes_by_global_id(server: Server) -> None:
    """/ws/runs replays every event after a global id, across runs, in commit order."""
    first = server.start_run("quick", "one")
    server.wait_status(first, "delivered")
    second = server.start_run("quick", "two")
    server.wait_status(second, "delivered")
    ids: list[int] = []
    runs: set[str] = set()
    for message in server.messages("/ws/runs?since=0", until_final=False):
        if message["type"] == "event":
            ids.append(message["id"])
            runs.add(message["run_id"])
            if message["run_id"] == second and message["final"]:
                break
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    assert runs == {first, second}
    middle = ids[len(ids) // 2]
    rest = []
    for message in server.messages(f"/ws/runs?since={middle}", until_final=False):
        if message["type"] == "event":
            rest.append(message["id"])
            if message["id"] == ids[-1]:
                break
    assert rest == [i for i in ids if i > middle]


def test_sse_stream(server: Server) -> None:
    """The SSE endpoint sends the same events, each with an id to resume from."""
    run_id = server.start_run("quick", "sse")
    server.wait_status(run_id, "delivered")
    seqs = []
    with httpx.stream(
        "GET", f"{server.url}/api/runs/{run_id}/stream?since=2", timeout=10
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        ident = None
        for line in response.iter_lines():
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("data: ") and ident is not None:
                message = json.loads(line[6:])
                assert message["seq"] == ident
                seqs.append(ident)
                ident = None
    total = server.http.get(f"/api/runs/{run_id}").json()["events"]
    assert seqs == list(range(3, total + 1))


def test_model_tokens_stream_live(server: Server) -> None:
    """A model worker's streamed text arrives as token messages, not counted as events."""
    tokens, kinds = [], []
    stream = server.messages("/ws/runs", until_final=False)
    assert next(stream)["type"] == "hello"
    run_id = server.start_run("modelled", "tides")
    for message in stream:
        if message["type"] == "token":
            tokens.append(message["text"])
        elif message["type"] == "event":
            kinds.append(message["kind"])
            if message["final"]:
                break
    assert tokens and "".join(tokens).strip()
    assert all(k != "token" for k in kinds)
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    assert len(events) == len(kinds)


def test_slow_client_is_dropped_and_can_resume(make_server: ServerFactory) -> None:
    """Past its queue a client is told it fell behind and disconnected; since resumes it."""
    server = make_server(queue_size=2)
    stream = server.messages("/ws/runs", until_final=False)
    hello = next(stream)
    run_id = server.start_run("wide", "burst")
    received = []
    dropped = None
    for message in stream:
        if message["type"] == "dropped":
            dropped = message
            break
        if message["type"] == "event":
            received.append(message["id"])
    assert dropped is not None and "since" in dropped
    assert server.wait_status(run_id, "delivered")  # the orchestrator was not held up
    resumed = []
    for message in server.messages(f"/ws/runs?since={dropped['since']}", until_final=False):
        if message["type"] == "event":
            resumed.append(message["id"])
            if message["final"]:
                break
    everything = received + resumed
    assert everything == sorted(set(everything))
    assert dropped["since"] == (received[-1] if received else hello["since"])
    total = server.http.get(f"/api/runs/{run_id}").json()["events"]
    assert len(everything) == total
