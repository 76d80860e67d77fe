"""Reads of a long history are folded on read threads, once per new event, and paged: a read
that waits on the store never holds up the server, and a repeated poll reads nothing again."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.server.conftest import ServerFactory
from tests.server.helpers import WORKFLOW, Server

from interlock.api import Interlock
from interlock.core import events as ev
from interlock.core.state import artifact_name, task_id_for
from interlock.storage.base import AppendBatch, NewEvent, RunSummary

LOOP = """
loop:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: drafter, call: srv.slow, output: draft.md}
      next:
        - {goto: draft, max_visits: 1000, if: "false"}
    - id: ship
      workers:
        - {role: shipper, call: srv.slow, final: true}
"""


def long_run(home: Path, workflow: Path, visits: int) -> str:
    """A paused run of `loop` whose history of `visits` loop visits is written straight
    through the store (six events a visit), its lease handed back."""
    api = Interlock(home)
    run_id = api.start(workflow, "loop", topic="a long history")
    owner = api.orchestrator.drivers[run_id].lease.owner
    lease = api.store.acquire_lease(run_id, owner, 600, time.time())
    at = time.time()
    history: list[ev.Event] = []
    for visit in range(1, visits + 1):
        task = task_id_for("drafter", visit, None)
        history += [
            ev.PhaseStarted(at=at, phase="draft", visit=visit),
            ev.TaskDispatched(
                at=at,
                task_id=task,
                phase="draft",
                role="drafter",
                visit=visit,
                item=None,
                attempt=1,
            ),
            ev.TaskStarted(at=at, task_id=task, attempt=1, worker="test"),
            ev.TaskCompleted(
                at=at,
                task_id=task,
                attempt=1,
                artifact=artifact_name("draft.md", visit, None),
                sha256="0" * 64,
                size=2,
            ),
            ev.PhaseCompleted(at=at, phase="draft", visit=visit),
            ev.BranchTaken(at=at, phase="draft", visit=visit, goto="draft", rule=1),
        ]
    history.append(ev.Paused(at=at, phase="draft", visit=visits))
    summary = RunSummary(status="paused", phase="draft", updated_at=at)
    events = [NewEvent(event=e) for e in history]
    api.store.append(AppendBatch(lease=lease, events=events, summary=summary), at)
    api.store.release_lease(lease)
    api.store.close()
    return run_id


class Gate:
    """The server's `store.events`, held at a gate for one run until `open` is set, and a
    record of where the read threads started reading it (`since`)."""

    def __init__(self, server: Server, run_id: str) -> None:
        self.store, self.run_id = server.service.store, run_id
        self.real = self.store.events
        self.open = threading.Event()
        self.open.set()
        self.reads: list[int] = []
        self.store.events = self.events

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> Any:
        reader = threading.current_thread().name.startswith("interlock-read")
        # Reads of its history, not of one event (the run view's recorded config reads the
        # first event alone).
        if run_id == self.run_id and reader and limit != 1:
            self.reads.append(since)
            self.open.wait(30)
        return self.real(run_id, since, limit)


def test_a_read_waiting_on_the_store_holds_up_nothing_else(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """While a graph read of a run waits on the store, the health check, another run's graph
    and the first run's other reads are answered; then it is answered too."""
    workflow = tmp_path / "loop.yaml"
    workflow.write_text(WORKFLOW + LOOP)
    run_id = long_run(tmp_path / "home", workflow, 50)
    server = make_server(workflows=[workflow])
    other = server.start_run("quick")
    server.wait_status(other, "delivered")
    gate = Gate(server, run_id)
    gate.open.clear()
    answers: list[int] = []
    reader = threading.Thread(
        target=lambda: answers.append(server.http.get(f"/api/runs/{run_id}/graph").status_code)
    )
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while not gate.reads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gate.reads, "the read never reached the store"
        assert server.http.get("/api/health", timeout=5).json() == {"ok": True}
        assert server.http.get(f"/api/runs/{other}/graph", timeout=5).status_code == 200
        assert server.http.get(f"/api/runs/{other}", timeout=5).status_code == 200
    finally:
        gate.open.set()
    reader.join(30)
    assert answers == [200]


def test_a_repeated_read_folds_only_what_was_recorded_since(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Polling a run's graph, attempts and detail reads its history once; after an approval
    the next read reads only the events after the last one folded."""
    workflow = tmp_path / "loop.yaml"
    workflow.write_text(WORKFLOW + LOOP)
    run_id = long_run(tmp_path / "home", workflow, 50)
    server = make_server(workflows=[workflow])
    gate = Gate(server, run_id)
    for _ in range(3):
        for path in ("graph", "attempts", ""):
            assert server.http.get(f"/api/runs/{run_id}/{path}".rstrip("/")).status_code == 200
    assert gate.reads == [0], gate.reads
    first = server.http.get(f"/api/runs/{run_id}/graph").json()
    last_seq = server.http.get(f"/api/runs/{run_id}").json()["last_seq"]
    assert server.http.post(f"/api/runs/{run_id}/approve").status_code == 200
    server.wait_status(run_id, "delivered")
    after = server.http.get(f"/api/runs/{run_id}/graph").json()
    assert gate.reads[1] == last_seq and gate.reads == sorted(gate.reads), gate.reads
    assert after["taken"]["ship->end"] == 1 and "ship->end" not in first["taken"]


def test_attempts_come_a_page_at_a_time(make_server: ServerFactory, tmp_path: Path) -> None:
    """`/attempts` gives 1000 attempts by default and `next_since` for the next page; the
    pages together are every attempt once, in dispatch order, and the costs cover them all."""
    workflow = tmp_path / "loop.yaml"
    workflow.write_text(WORKFLOW + LOOP)
    run_id = long_run(tmp_path / "home", workflow, 1200)
    server = make_server(workflows=[workflow])
    first = server.http.get(f"/api/runs/{run_id}/attempts").json()
    total = first["total"]  # the 1200 written, and the one the run's start dispatched
    assert len(first["attempts"]) == 1000 and total == 1201
    assert first["costs"]["run"]["attempts"] == total
    seen = [a["seq"] for a in first["attempts"]]
    since = first["next_since"]
    while since is not None:
        page = server.http.get(
            f"/api/runs/{run_id}/attempts", params={"since": since, "limit": 150}
        )
        assert page.status_code == 200, page.text
        seen += [a["seq"] for a in page.json()["attempts"]]
        since = page.json()["next_since"]
    assert len(seen) == total and seen == sorted(set(seen))
    too_big = server.http.get(f"/api/runs/{run_id}/attempts", params={"limit": 10_001})
    assert too_big.status_code == 422


def test_a_cancelled_read_keeps_its_run_locked_until_its_thread_is_done(tmp_path: Path) -> None:
    """A read whose request is cancelled while its thread folds keeps the run's lock until the
    thread finishes, so a second read never folds the same run at the same time."""
    import asyncio

    from interlock.server.reads import Reads

    workflow = tmp_path / "loop.yaml"
    workflow.write_text(WORKFLOW + LOOP)
    run_id = long_run(tmp_path / "home", workflow, 20)
    api = Interlock(tmp_path / "home")
    reads = Reads(api)
    started: list[int] = []
    gate = threading.Event()
    real = api.store.events

    def events(run_id: str, since: int = 0, limit: int | None = None) -> Any:
        started.append(since)
        gate.wait(30)
        return real(run_id, since, limit)

    api.store.events = events  # type: ignore[method-assign]

    async def scenario() -> int:
        first = asyncio.create_task(reads.call(run_id, lambda f: f.seq))
        while not started:
            await asyncio.sleep(0.01)
        first.cancel()
        second = asyncio.create_task(reads.call(run_id, lambda f: f.seq))
        await asyncio.sleep(0.3)
        assert len(started) == 1, "a second thread folded the run while the first did"
        gate.set()
        return await second

    try:
        assert asyncio.run(scenario()) > 100
    finally:
        gate.set()
        reads.close()
        api.store.close()
