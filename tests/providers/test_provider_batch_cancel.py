"""A run cancelled while its model call waits in a provider batch withdraws the call, and
the provider's batch, left with nothing waiting, is cancelled at the provider."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Interlock, RunStatus
from interlock.core.provider_batches import BatchState, RequestState
from interlock.runtime.orchestrator import Settings
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
