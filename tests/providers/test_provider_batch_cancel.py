"""A run whose model call waits in a provider batch: status.json and `interlock status` say
which batch, since when and what the provider says of it; cancelled, the run withdraws the
call, and the provider's batch, left with nothing waiting, is cancelled at the provider."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from interlock import Interlock, RunStatus
from interlock.cli.main import cli
from interlock.core.provider_batches import BatchState, RequestState
from interlock.runtime.orchestrator import Settings
from interlock.server.views import run_detail
from interlock.storage.provider_batches_sqlite import SQLiteBatches

from .batch_server import BatchServer, BatchServerState
from .test_provider_batch import write_config

WORKFLOW = """\
ask:
  phases:
    - id: answer
      workers:
        - role: answerer
          final: true
          model: cheap
          timeout: 172800
          task: "answer {{ topic }}"
"""


@pytest.fixture
def batch_server() -> Iterator[BatchServer]:
    """The batch server, with batches that never end by themselves."""
    server = BatchServer(BatchServerState(never_end=True)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def project(tmp_path: Path, batch_server: BatchServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pipeline whose one worker calls a batch alias of the batch server."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEST_KEY", "k")
    monkeypatch.setenv("INTERLOCK_BATCH_POLL_S", "0.05")
    write_config(tmp_path, batch_server.url, window="0.1")
    (tmp_path / "ask.yaml").write_text(WORKFLOW)
    return tmp_path


def test_cancelling_a_run_cancels_the_provider_batch_its_call_waits_in(
    project: Path, batch_server: BatchServer
) -> None:
    """The call was sent in a batch the provider is running; the run is cancelled: its
    request is withdrawn, the batch is cancelled at the provider and recorded cancelled."""
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))

    async def cancel_while_batched() -> str:
        run_id = app.start(project / "ask.yaml", topic="t")
        driving = asyncio.ensure_future(app.drive_async(run_id))
        for _ in range(200):
            await asyncio.sleep(0.05)
            if any(polls >= 2 for polls in batch_server.state.polls.values()):
                break
        assert batch_server.state.created == 1
        app.cancel(run_id, "enough")
        await asyncio.wait_for(driving, 30)
        return run_id

    run_id = asyncio.run(cancel_while_batched())
    assert app.state(run_id).status is RunStatus.CANCELLED
    assert batch_server.state.cancelled == 1
    [batch] = batch_server.state.batches.values()
    assert batch["status"] == "cancelled"
    ledger = SQLiteBatches(project / "home" / "ledger.db")
    try:
        [recorded] = ledger.batches()
        assert recorded.state is BatchState.CANCELLED
        assert [r.state for r in ledger.requests_of_run(run_id)] == [RequestState.WITHDRAWN]
    finally:
        ledger.close()


def test_a_call_in_a_provider_batch_shows_its_batch_in_status(
    project: Path, batch_server: BatchServer
) -> None:
    """While the call waits in a batch the provider runs, status.json and `interlock status`
    show the worker running in that batch, with when it was sent and the provider's status;
    so do the API's run view and `Interlock.status`; once the run ended, nothing says so."""
    home = project / "home"
    app = Interlock(home, settings=Settings(heartbeat=0.05, status_interval=0.05))

    async def look_while_batched() -> tuple[
        str, dict[str, Any], str, dict[str, Any], dict[str, Any]
    ]:
        run_id = app.start(project / "ask.yaml", topic="t")
        driving = asyncio.ensure_future(app.drive_async(run_id))
        view: dict[str, Any] = {}
        for _ in range(200):
            await asyncio.sleep(0.05)
            try:
                view = json.loads((app.run_dir(run_id) / "status.json").read_bytes())
            except (OSError, ValueError):
                continue
            waits = view.get("provider_batches") or {}
            if any(w["status"] == "in_progress" for w in waits.values()):
                break
        detail = run_detail(app, run_id)
        folded = app.status(run_id)  # from the history, then the orchestrator's file
        shown = CliRunner().invoke(cli, ["--home", str(home), "status", run_id],
                                   terminal_width=200)  # fmt: skip
        assert shown.exit_code == 0, shown.output
        app.cancel(run_id, "enough")
        await asyncio.wait_for(driving, 30)
        return run_id, view, shown.output, detail, folded

    run_id, view, shown, detail, folded = asyncio.run(look_while_batched())
    [batch_id] = batch_server.state.batches
    wait = view["provider_batches"]["answerer@1"]
    assert wait["batch_id"] == batch_id and wait["alias"] == "cheap"
    assert wait["status"] == "in_progress" and wait["submitted_at"].endswith("Z")
    text = wait["text"]
    assert re.fullmatch(
        rf"in provider batch {batch_id}, submitted \d\d:\d\d UTC, in_progress", text
    )
    [phase] = view["phases"]
    assert phase["workers"]["answerer"]["provider_batch"] == text
    assert view["status"] == "running"
    assert f"running ({text})" in shown
    [task] = detail["tasks"]  # the API's run view
    assert task["provider_batch"] == text and detail["provider_batches"] == view["provider_batches"]
    assert folded["phases"][0]["workers"]["answerer"]["provider_batch"] == text
    after = CliRunner().invoke(cli, ["--home", str(home), "status", run_id, "--json"])
    ended = json.loads(after.output)
    assert ended["status"] == "cancelled" and ended["provider_batches"] == {}


def test_a_call_stopped_by_shutdown_stays_in_its_batch_for_the_resumed_run(
    project: Path, batch_server: BatchServer
) -> None:
    """The process stops driving the run while its call waits in a batch: nothing is
    withdrawn or cancelled, and the run driven again is answered from that same batch."""
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))

    async def stop_while_batched() -> str:
        run_id = app.start(project / "ask.yaml", topic="t")
        driving = asyncio.ensure_future(app.drive_async(run_id))
        for _ in range(200):
            await asyncio.sleep(0.05)
            if any(polls >= 2 for polls in batch_server.state.polls.values()):
                break
        driving.cancel()  # as an interrupted process: its orchestrator shuts down
        with contextlib.suppress(asyncio.CancelledError):
            await driving
        return run_id

    run_id = asyncio.run(stop_while_batched())
    assert batch_server.state.cancelled == 0
    ledger = SQLiteBatches(project / "home" / "ledger.db")
    try:
        assert [r.state for r in ledger.requests_of_run(run_id)] == [RequestState.BATCHED]
    finally:
        ledger.close()
    batch_server.state.never_end = False
    again = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    again.drive(run_id)
    assert again.state(run_id).status is RunStatus.DELIVERED
    assert batch_server.state.created == 1 and batch_server.state.cancelled == 0
