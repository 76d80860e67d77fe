"""The embedded runtime end to end: real files, real subprocesses, the SQLite ledger."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from interlock import Interlock, RunStatus, register
from interlock.core import events as ev
from interlock.errors import LeaseHeld, UsageError
from interlock.runtime.executors import TaskContext
from interlock.runtime.orchestrator import Settings

from .conftest import WriteWorkflow

ROOT = Path(__file__).resolve().parents[2]
RESEARCH = ROOT / "examples" / "research.json"


def kinds(app: Interlock, run_id: str) -> list[str]:
    return [e.kind for e in app.events(run_id)]


def test_research_example_delivers_offline(app: Interlock) -> None:
    """The seed research pipeline runs unchanged with the offline provider and is archived."""
    state = app.run(RESEARCH, "research", topic="FSA architecture")
    assert state.status is RunStatus.DELIVERED and state.archived
    run_dir = app.run_dir(state.run_id)
    assert run_dir.parent.name == "archive"
    assert (run_dir / "final.md").read_text() == (run_dir / "synthesizer.md").read_text()
    synthesis = (run_dir / "synthesizer.md").read_text()
    assert "offline provider" in synthesis and "researcher-a.md" in synthesis
    assert any("offline provider" in w for w in state.warnings)


def test_status_json_has_the_documented_shape(app: Interlock) -> None:
    """status.json carries the fields people read: phases, workers, retries, delivery."""
    state = app.run(RESEARCH, "research", topic="shape")
    view = json.loads((app.run_dir(state.run_id) / "status.json").read_text())
    for key in ("pipeline", "dir", "topic", "current_phase", "retry_count", "phases",
                "result_delivered"):  # fmt: skip
        assert key in view
    assert view["result_delivered"] is True
    assert [p["id"] for p in view["phases"]] == ["collect", "synthesis"]
    worker = view["phases"][0]["workers"]["researcher-a"]
    assert worker["status"] == "completed" and worker["session"]


def test_ledger_view_records_every_task(app: Interlock) -> None:
    """The dispatch ledger lists each task with dispatch and completion times and output."""
    state = app.run(RESEARCH, "research", topic="ledger")
    ledger = app.ledger(state.run_id)
    assert ledger["pipeline_id"] == state.run_id
    assert ledger["coordinator_started"] and ledger["last_coordinator_heartbeat"]
    assert {t["task_id"] for t in ledger["tasks"]} == {
        "researcher-a@1", "researcher-b@1", "synthesizer@1"
    }  # fmt: skip
    for task in ledger["tasks"]:
        assert task["status"] == "COMPLETE" and task["output_path"]
        assert task["dispatched_at"] <= task["completed_at"]


def test_dispatch_is_recorded_before_start(app: Interlock) -> None:
    """Every task_started follows the task_dispatched of the same attempt."""
    state = app.run(RESEARCH, "research", topic="order")
    dispatched: set[tuple[str, int]] = set()
    started: set[tuple[str, int]] = set()
    for stored in app.events(state.run_id):
        event = stored.event
        if isinstance(event, ev.TaskDispatched):
            dispatched.add((event.task_id, event.attempt))
        if isinstance(event, (ev.TaskStarted, ev.TaskCompleted)):
            assert (event.task_id, event.attempt) in dispatched
            started.add((event.task_id, event.attempt))
    every = {("researcher-a@1", 1), ("researcher-b@1", 1), ("synthesizer@1", 1)}
    assert started == dispatched == every  # the loop above saw every task, not none


def test_call_workers_receive_reads(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A registered `call:` worker gets the contents of the files it reads."""
    register("upper", lambda ctx: ctx.read("first.md").upper())
    register("first", lambda ctx: f"about {ctx.topic}")
    path = write_workflow("""
        p:
          phases:
            - id: a
              workers: [{role: first, call: first}]
            - id: b
              workers: [{role: second, call: upper, reads: [first.md], final: true}]
    """)
    state = app.run(path, topic="cats")
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "ABOUT CATS"


def test_an_event_loop_a_plain_call_worker_leaves_on_its_thread_is_closed(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A plain function that runs async code on a loop of its own and keeps it set (as
    Pydantic AI's `run_sync` does): once it returns, that loop is closed, so its sockets are
    not left to the pool thread for good."""
    loops: list[asyncio.AbstractEventLoop] = []

    def keeps_a_loop(ctx: TaskContext) -> str:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loops.append(loop)
        return loop.run_until_complete(asyncio.sleep(0, result="ran"))

    register("keeps_a_loop", keeps_a_loop)
    path = write_workflow("""
        p:
          phases:
            - id: a
              workers: [{role: w, call: keeps_a_loop, final: true}]
    """)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.DELIVERED
    [loop] = loops
    assert loop.is_closed()


def test_call_worker_may_write_its_output_file_itself(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A function that writes `output_path` and returns None has that file committed, however
    often it asks for the path."""

    def write_it(ctx: TaskContext) -> None:
        ctx.output_path.write_text("written by hand\n")
        assert ctx.output_path.read_text() == "written by hand\n"

    register("write_it", write_it)
    path = write_workflow("""
        p:
          phases:
            - id: a
              workers: [{role: w, call: write_it, final: true}]
    """)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.DELIVERED
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "written by hand\n"


def test_pause_then_approve_delivers(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A pause_after phase stops the run until a person approves, exactly once."""
    register("const", lambda ctx: "text")
    path = write_workflow("""
        p:
          phases:
            - id: draft
              pause_after: true
              workers: [{role: drafter, call: const}]
            - id: final
              workers: [{role: editor, call: const, reads: [drafter.md], final: true}]
    """)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.PAUSED
    app.approve(state.run_id, "looks good")
    with pytest.raises(UsageError, match="already has an approval waiting"):
        app.approve(state.run_id)
    state = app.resume(state.run_id)
    assert state.status is RunStatus.DELIVERED
    assert kinds(app, state.run_id).count("approved") == 1
    with pytest.raises(UsageError, match="not paused"):
        app.approve(state.run_id)


def test_failing_command_records_stderr_and_fails(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A command that exits non-zero fails with its stderr tail; retries are used up first."""
    path = write_workflow(f"""
        p:
          phases:
            - id: a
              workers:
                - role: w
                  final: true
                  retries: 1
                  backoff: {{initial: 0.01}}
                  command: ["{sys.executable}", "-c", "import sys; sys.exit('disk on fire')"]
    """)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.FAILED
    failures = [e.event for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert len(failures) == 2 and all("disk on fire" in f.error for f in failures)  # type: ignore[attr-defined]
    assert "disk on fire" in (state.failure or "")


HANG = """
import os, subprocess, sys, time
marker = sys.argv[1]
if os.environ["INTERLOCK_ATTEMPT"] == "1":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
    time.sleep(300)
open(os.environ["INTERLOCK_OUTPUT"], "w").write("done on attempt 2")
"""


def test_hanging_worker_is_killed_and_retried(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A worker past its timeout has its whole process group killed and is retried."""
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    marker = f"marker-{time.time_ns()}"
    path = write_workflow(f"""
        p:
          phases:
            - id: a
              workers:
                - role: w
                  final: true
                  timeout: 1
                  retries: 1
                  backoff: {{initial: 0.01}}
                  command: ["{sys.executable}", "{script}", "{marker}"]
    """)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.DELIVERED
    assert "task_timed_out" in kinds(app, state.run_id)
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "done on attempt 2"
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
    assert leftovers == []


PARTIAL = """
import os, signal
with open(os.environ["INTERLOCK_OUTPUT"], "w") as out:
    out.write("half of the ")
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_partial_output_is_never_adopted(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A worker that dies after writing part of its output leaves nothing at the final path."""
    script = tmp_path / "partial.py"
    script.write_text(PARTIAL)
    path = write_workflow(f"""
        p:
          phases:
            - id: a
              workers: [{{role: w, final: true, command: ["{sys.executable}", "{script}"]}}]
    """)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.FAILED
    run_dir = app.run_dir(state.run_id)
    assert not (run_dir / "w.md").exists()
    assert "task_completed" not in kinds(app, state.run_id)


def test_output_committed_while_down_is_adopted(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """An output found at its final path after a restart is adopted, and not run again."""
    release = threading.Event()
    calls: list[str] = []

    def slow(ctx: TaskContext) -> str:
        calls.append(ctx.spec.task_id)
        release.wait(10)
        return "from the slow worker"

    register("slow", slow)
    path = write_workflow("""
        p:
          phases:
            - id: a
              workers: [{role: w, call: slow, final: true}]
    """)
    settings = Settings(heartbeat=0.05, lease_ttl=0.5)
    first = Interlock(tmp_path / "home", settings=settings)
    run_id = first.start(path, topic="t")

    async def drive_until_dispatched() -> None:
        task = asyncio.create_task(first.drive_async(run_id))
        while not calls:
            await asyncio.sleep(0.01)
        task.cancel()  # the orchestrator "dies" with the task in flight

    asyncio.run(drive_until_dispatched())
    release.set()
    run_dir = first.run_dir(run_id)
    (run_dir / "w.md").write_text("committed before the crash")
    time.sleep(0.6)  # let the dead orchestrator's lease expire
    second = Interlock(tmp_path / "home", settings=settings)
    state = second.resume(run_id)
    assert state.status is RunStatus.DELIVERED
    completed = [e.event for e in second.events(run_id) if e.kind == "task_completed"]
    assert len(completed) == 1 and completed[0].adopted  # type: ignore[attr-defined]
    assert calls == ["w@1"]
    assert (second.run_dir(run_id) / "final.md").read_text() == "committed before the crash"


def test_second_orchestrator_cannot_drive_a_held_run(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """While one orchestrator holds a run's lease, another gets LeaseHeld."""
    register("const", lambda ctx: "x")
    path = write_workflow("""
        p:
          phases:
            - id: a
              workers: [{role: w, call: const, final: true}]
    """)
    first = Interlock(tmp_path / "home")
    run_id = first.start(path, topic="t")
    second = Interlock(tmp_path / "home")
    with pytest.raises(LeaseHeld, match="being driven by"):
        second.resume(run_id)
    assert first.drive(run_id).status is RunStatus.DELIVERED


def test_lease_of_a_dead_local_process_is_taken_over(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """A lease held by a process of this host that no longer exists does not block resume."""
    register("const", lambda ctx: "x")
    path = write_workflow("""
        p:
          phases:
            - id: a
              workers: [{role: w, call: const, final: true}]
    """)
    app = Interlock(tmp_path / "home")
    run_id = app.start(path, topic="t")
    app.orchestrator.drivers.clear()  # forget it, as a killed process would
    dead = psutil.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    holder = f"{socket.gethostname()}:{dead.pid}:deadbeef"
    app.store.acquire_lease(run_id, holder, 60, time.time(), take_over_from=app.orchestrator.owner)
    assert app.resume(run_id).status is RunStatus.DELIVERED


def test_cancel_stops_running_tasks(tmp_path: Path, write_workflow: WriteWorkflow) -> None:
    """Cancelling a run kills its command workers and ends it cancelled."""
    marker = f"cancel-{time.time_ns()}"
    path = write_workflow(f"""
        p:
          phases:
            - id: a
              workers:
                - role: w
                  final: true
                  command: ["{sys.executable}", "-c", "import time; time.sleep(60)", "{marker}"]
    """)
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05))
    run_id = app.start(path, topic="t")

    def running() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

    async def scenario() -> None:
        task = asyncio.create_task(app.drive_async(run_id))
        deadline = time.monotonic() + 60  # generous: the machine may be busy
        while not running():
            assert time.monotonic() < deadline, "the command worker never started"
            await asyncio.sleep(0.05)
        app.cancel(run_id, "changed my mind")
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert app.state(run_id).status is RunStatus.CANCELLED
    deadline = time.monotonic() + 30  # the kill is sent; wait until the process is gone
    while running():
        assert time.monotonic() < deadline, f"the cancelled command still runs: {running()}"
        time.sleep(0.05)


def test_each_loop_visit_keeps_its_output(app: Interlock) -> None:
    """The translation example polishes twice and keeps every visit's files."""
    state = app.run(ROOT / "examples" / "translate.yaml", "translate", topic="Durable workflows")
    assert state.status is RunStatus.DELIVERED
    run_dir = app.run_dir(state.run_id)
    for name in ("reviewer.md", "reviewer.v2.md", "reviewer.v3.md", "polisher.md",
                 "polisher.v2.md"):  # fmt: skip
        assert (run_dir / name).is_file(), name
    scores = [json.loads((run_dir / n).read_text())["score"]
              for n in ("reviewer.md", "reviewer.v2.md", "reviewer.v3.md")]  # fmt: skip
    assert scores[0] < scores[1] < 8.0 <= scores[2]


def test_fan_out_example_assembles_every_section(app: Interlock) -> None:
    """The fan-out example writes one section per planned item and assembles them in order."""
    state = app.run(ROOT / "examples" / "fanout.yaml", "article", topic="Queues",
                    inputs={"sections": "4"})  # fmt: skip
    assert state.status is RunStatus.DELIVERED
    final = (app.run_dir(state.run_id) / "final.md").read_text()
    assert final.count("## ") == 4
    writers = [t for t in state.tasks.values() if t.role == "writer"]
    assert sorted(t.item for t in writers) == [0, 1, 2, 3]  # type: ignore[type-var]


class _Crash(Exception):
    """Stands in for a kill at a crash point."""


async def _alpha(ctx: TaskContext) -> str:
    return "alpha\n"


async def _shout(ctx: TaskContext) -> str:
    return ctx.read("a.md").upper()


register("test_alpha", _alpha)
register("test_shout", _shout)


def test_output_damaged_after_its_completion_was_recorded_is_restored(
    tmp_path: Path, write_workflow: WriteWorkflow
) -> None:
    """A small output is written after its completion is recorded; a crash that leaves it
    missing or damaged is repaired on resume from the body the ledger holds, and the next
    worker reads the recorded text."""
    from interlock.runtime import faults

    path = write_workflow("""
        p:
          phases:
            - id: one
              workers: [{role: a, call: test_alpha}]
            - id: two
              workers: [{role: s, call: test_shout, reads: [a.md], final: true}]
    """)
    settings = Settings(heartbeat=0.05, lease_ttl=0.5)
    first = Interlock(tmp_path / "home", settings=settings)
    run_id = first.start(path, topic="t")

    def crash_once_a_is_recorded(name: str) -> None:
        if name == "after_append" and "task_completed" in kinds(first, run_id):
            raise _Crash(name)

    previous = faults.set_hook(crash_once_a_is_recorded)
    try:
        with pytest.raises(_Crash):
            first.drive(run_id)
    finally:
        faults.set_hook(previous)
    run_dir = first.run_dir(run_id)
    assert not (run_dir / "a.md").exists()  # recorded, not yet written
    (run_dir / "a.md").write_text("ALPH!\n")  # a torn write of the same size
    time.sleep(0.6)  # the crashed orchestrator's lease expires
    second = Interlock(tmp_path / "home", settings=settings)
    state = second.resume(run_id)
    assert state.status is RunStatus.DELIVERED
    archived = second.run_dir(run_id)
    assert (archived / "a.md").read_text() == "alpha\n"
    assert (archived / "final.md").read_text() == "ALPHA\n"
    assert kinds(second, run_id).count("task_completed") == 2


def test_status_refreshes_slow_down_when_many_runs_are_held(app: Interlock) -> None:
    """A running run's status.json is refreshed every `status_interval` while few runs are
    held; with thousands, less often, so that refreshes stay near 100 per second in all."""
    orchestrator = app.orchestrator
    base = orchestrator.settings.status_interval
    assert orchestrator.status_interval() == base
    orchestrator.drivers.update({f"held-{i}": None for i in range(2000)})  # type: ignore[misc]
    try:
        assert orchestrator.status_interval() == base * 20
    finally:
        orchestrator.drivers.clear()


def test_a_delivered_run_s_status_json_waits_for_its_archive_unless_that_is_late(
    app: Interlock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivered run is archived once its files are durable, and status.json is written
    into the archive then: it is not also written in `runs/` at the delivery. Should the
    archive be late (here each sync fails for 1.5 s), the delivered state is written there
    after `status_interval` (1 s) all the same."""
    from interlock.runtime import artifacts

    sync, shown = artifacts.sync_files, []
    began: list[float] = []

    def failing_for_a_while(paths: list[str | os.PathLike[str]]) -> None:
        began.append(began[0] if began else time.monotonic())
        run_dir = Path(paths[0]).parent
        view = json.loads((run_dir / "status.json").read_text())
        shown.append((time.monotonic() - began[0], view["result_delivered"]))
        if time.monotonic() - began[0] < 1.5:
            raise OSError(5, "Input/output error")
        sync(paths)

    monkeypatch.setattr(artifacts, "sync_files", failing_for_a_while)
    state = app.run(RESEARCH, "research", topic="late archive")
    assert state.status is RunStatus.DELIVERED and state.archived
    early = [delivered for at, delivered in shown if at < 0.9]
    late = [delivered for at, delivered in shown if at > 1.2]
    assert early and not any(early), shown  # the delivery alone rewrote nothing
    assert late and all(late), shown  # the late archive did not keep it behind
    archived = json.loads((app.run_dir(state.run_id) / "status.json").read_text())
    assert archived["result_delivered"] is True


def _record_syncs_and_commits(app: Interlock, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What happens to the ledger and to durability, in order: ("sync", names of the files
    made durable; each sync takes a while), ("append", kinds of the events committed),
    ("let go", whether the run's files were durable then), ("release", run ids)."""
    from interlock.runtime import artifacts

    seen: list[Any] = []
    sync, append, release = artifacts.sync_files, app.store.append_many, app.store.release_leases
    let_go = app.orchestrator.release

    def synced(paths: list[str | os.PathLike[str]]) -> None:
        time.sleep(0.2)
        sync(paths)
        seen.append(("sync", {Path(p).name for p in paths}))

    def going(driver: Any) -> None:
        seen.append(("let go", driver.durable()))
        let_go(driver)

    def appended(batches: Any, *args: Any, **kwargs: Any) -> Any:
        result = append(batches, *args, **kwargs)
        seen.append(("append", [n.event.kind for b in batches for n in b.events]))
        return result

    def released(leases: Any) -> None:
        release(leases)
        seen.append(("release", [lease.run_id for lease in leases]))

    monkeypatch.setattr(artifacts, "sync_files", synced)
    monkeypatch.setattr(app.store, "append_many", appended)
    monkeypatch.setattr(app.store, "release_leases", released)
    monkeypatch.setattr(app.orchestrator, "release", going)
    return seen


def test_a_run_is_archived_only_after_its_outputs_are_durable(
    app: Interlock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outputs written from the ledger wait for no fsync while the run goes on; every one of
    them, final.md included, is fsynced before the commit that records the run archived (an
    archived run is never resumed, so nothing would repair it after a power loss)."""
    seen = _record_syncs_and_commits(app, monkeypatch)
    state = app.run(RESEARCH, "research", topic="durable")
    assert state.archived
    archived = next(i for i, (what, kinds) in enumerate(seen) if "archived" in kinds)
    delivered = next(i for i, (what, kinds) in enumerate(seen) if "delivered" in kinds)
    made_durable = set().union(
        *(names for what, names in seen[delivered:archived] if what == "sync")
    )
    outputs = {"researcher-a.md", "researcher-b.md", "synthesizer.md", "final.md"}
    assert outputs <= made_durable, seen


def test_an_ended_run_is_let_go_only_after_its_outputs_are_durable(
    app: Interlock, write_workflow: WriteWorkflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that failed is never resumed either: its lease, which tells every orchestrator
    that nothing is left to do for it, is released only after its outputs were fsynced."""
    path = write_workflow(f"""
        p:
          phases:
            - id: one
              workers: [{{role: a, call: test_alpha}}]
            - id: two
              workers:
                - role: w
                  final: true
                  command: ["{sys.executable}", "-c", "import sys; sys.exit('no')"]
    """)
    seen = _record_syncs_and_commits(app, monkeypatch)
    state = app.run(path, topic="t")
    assert state.status is RunStatus.FAILED
    released = next(i for i, (what, ids) in enumerate(seen) if what == "release")
    failed = next(i for i, (what, kinds) in enumerate(seen) if "run_failed" in kinds)
    assert ("sync", {"a.md"}) in seen[failed:released], seen
    assert [durable for what, durable in seen if what == "let go"] == [True]


def test_a_sync_that_fails_is_tried_again_and_holds_the_archive_back(
    app: Interlock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """fsync failing (an I/O error) is logged and tried again a heartbeat later, not in a
    tight loop; the run is archived only once a sync went through."""
    import errno

    from interlock.runtime import artifacts

    sync, tries = artifacts.sync_files, []

    def failing_twice(paths: list[Path]) -> None:
        tries.append(time.monotonic())
        if len(tries) <= 2:
            raise OSError(errno.EIO, "Input/output error")
        sync(paths)

    monkeypatch.setattr(artifacts, "sync_files", failing_twice)
    state = app.run(RESEARCH, "research", topic="eio")
    assert state.status is RunStatus.DELIVERED and state.archived
    assert len(tries) == 3
    assert all(b - a >= 0.04 for a, b in itertools.pairwise(tries))  # the heartbeat is 0.05 s
    failed = [r for r in caplog.records if "cannot make the files" in r.getMessage()]
    assert len(failed) == 2 and "Input/output error" in failed[0].getMessage()
