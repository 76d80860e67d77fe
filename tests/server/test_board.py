"""The runs board on its own: summaries coalesced per tick, catch-up frames for clients that
were busy, and stalled clients dropped, all without a server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from interlock.server.board import Board, BoardDropped

START = 1_800_000_000.0


def event(run_id: str, seq: int, ident: int, state: str = "running") -> dict[str, Any]:
    """An event's stream message, as the hub hands it to the board."""
    return {
        "type": "event",
        "id": ident,
        "run_id": run_id,
        "seq": seq,
        "at": START + ident,
        "kind": "task_started",
        "data": {"task_id": "t"},
        "state": state,
        "waiting": None,
        "phase": "p",
        "progress": 0.5,
        "cost_usd": 0.0,
        "estimated": False,
        "message": "t started",
        "final": state == "delivered",
    }


def parse(frame: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(frame)
    return data


def test_a_tick_holds_each_runs_latest_summary() -> None:
    """Three events of one run and one of another, noted in one round, make one frame with two
    summaries: the first run's latest state; `at` is the oldest event's time."""

    async def scenario() -> None:
        board = Board(interval=0.05)
        watcher = board.watch()
        for ident, (run, seq) in enumerate([("a", 1), ("a", 2), ("b", 1), ("a", 3)], start=1):
            board.note(event(run, seq, ident, "delivered" if seq == 3 else "running"))
        board.flush()  # the first change after a quiet spell goes out at once
        frame, last = await asyncio.wait_for(board.next_frame(watcher), 1)
        data = parse(frame)
        assert frame.startswith('{"type":"runs","at":')
        assert data["at"] == START + 1 and data["id"] == 4 == last
        by_run = {s["run_id"]: s for s in data["runs"]}
        assert by_run["a"]["seq"] == 3 and by_run["a"]["state"] == "delivered"
        assert by_run["a"]["final"] is True and by_run["b"]["seq"] == 1
        assert "data" not in by_run["a"] and "message" not in by_run["a"]

    asyncio.run(scenario())


def test_ticks_are_spaced_by_the_interval() -> None:
    """A change right after a tick waits for the interval to pass, then is sent."""

    async def scenario() -> None:
        board = Board(interval=0.3)
        watcher = board.watch()
        board.note(event("a", 1, 1))
        board.flush()
        await board.next_frame(watcher)
        board.note(event("a", 2, 2))
        board.flush()
        loop = asyncio.get_running_loop()
        began = loop.time()
        frame, _ = await asyncio.wait_for(board.next_frame(watcher), 2)
        assert loop.time() - began >= 0.2
        assert parse(frame)["runs"][0]["seq"] == 2

    asyncio.run(scenario())


def test_a_busy_client_gets_one_merged_frame_shared_with_its_peers() -> None:
    """Two clients that missed three ticks each get one frame with every run's newest state
    (the same text, built once); a level client gets the newest tick alone."""

    async def scenario() -> None:
        board = Board(interval=0.0)
        behind = [board.watch(), board.watch()]
        level = board.watch()
        for ident, run in enumerate(["a", "b", "a"], start=1):
            board.note(event(run, ident, ident))
            board.flush()
            await board.next_frame(level)
        first, _ = await board.next_frame(behind[0])
        second, _ = await board.next_frame(behind[1])
        assert first is second
        data = parse(first)
        assert data["at"] == START + 1 and data["id"] == 3
        assert [(s["run_id"], s["seq"]) for s in data["runs"]] == [("b", 2), ("a", 3)]
        board.note(event("c", 1, 4))
        board.flush()
        latest, _ = await board.next_frame(level)
        assert [s["run_id"] for s in parse(latest)["runs"]] == ["c"]

    asyncio.run(scenario())


def test_a_stalled_client_is_dropped_and_others_go_on() -> None:
    """A client that has not taken a frame while `keep` ticks went by is dropped; the others
    keep receiving every tick."""

    async def scenario() -> None:
        board = Board(interval=0.0, keep=3)
        stalled, reader = board.watch(), board.watch()
        for ident in range(1, 5):
            board.note(event("a", ident, ident))
            board.flush()
            frame, _ = await board.next_frame(reader)
            assert parse(frame)["runs"][0]["seq"] == ident
        assert stalled.dropped.is_set() and stalled not in board.watchers
        with pytest.raises(BoardDropped):
            await board.next_frame(stalled)

    asyncio.run(scenario())


def test_nothing_is_kept_without_clients() -> None:
    """With no client watching, events are not summarised and no tick is made."""

    async def scenario() -> None:
        board = Board(interval=0.0)
        board.note(event("a", 1, 1))
        board.flush()
        assert board.head == 0 and not board.ticks

    asyncio.run(scenario())


def test_many_watchers_space_the_ticks_to_a_send_budget() -> None:
    """With more watchers than the send budget allows at `interval`, ticks are spaced so that
    all of them together get about `sends` frames a second."""

    async def scenario() -> None:
        board = Board(interval=0.1, sends=1000)
        watchers = [board.watch() for _ in range(50)]
        assert board.spacing() == 0.1
        watchers += [board.watch() for _ in range(250)]
        assert board.spacing() == 0.3
        board.note(event("a", 1, 1))
        board.flush()
        await board.next_frame(watchers[0])
        board.note(event("a", 2, 2))
        board.flush()
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(board.next_frame(watchers[0]), 2)
        assert loop.time() - began >= 0.2

    asyncio.run(scenario())
