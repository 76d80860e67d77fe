"""Batch mode survives SIGKILL: killed between sending a batch and recording its id, and
again while polling, the process started anew adopts the provider's batch by its tag and
goes on polling: one batch sent, every row answered once, at the batch price."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.core.provider_batches import BatchState
from interlock.providers.config import ModelConfig
from interlock.storage.provider_batches_sqlite import SQLiteBatches

from .batch_server import BatchServer, BatchServerState
from .test_provider_batch import write_config

SCRIPT = Path(__file__).with_name("batch_script.py")
SRC = Path(__file__).parents[2] / "src"
ROWS = 50


@pytest.fixture
def batch_server() -> Iterator[BatchServer]:
    """The batch server, ending a batch on its third status request."""
    server = BatchServer(BatchServerState(polls_to_end=3)).start()
    try:
        yield server
    finally:
        server.stop()


def run_script(config: Path, ledger: Path, crash_at: str = "") -> subprocess.CompletedProcess[str]:
    """The script sending ROWS calls of alias `cheap`, armed to die at `crash_at`."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "INTERLOCK_BATCH_POLL_S": "0.05"}
    env.pop("INTERLOCK_CRASH_AT", None)
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(config), str(ledger), str(ROWS), "cheap"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_kills_after_submit_and_while_polling_send_one_batch(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """SIGKILL after the batch is sent (before its id is recorded), then SIGKILL while
    polling: the provider got one batch, and the third process delivers every row at half
    the direct price."""
    config = write_config(tmp_path, batch_server.url)
    ledger = tmp_path / "ledger.db"

    first = run_script(config, ledger, "after_batch_submit")
    assert first.returncode == -9, first.stderr
    assert batch_server.state.created == 1
    [batch] = SQLiteBatches(ledger).batches()
    assert batch.state == BatchState.SUBMITTING and not batch.provider_batch_id

    second = run_script(config, ledger, "while_batch_poll")
    assert second.returncode == -9, second.stderr
    [batch] = SQLiteBatches(ledger).batches()
    assert batch.state == BatchState.SUBMITTED and batch.provider_batch_id
    assert batch_server.state.created == 1

    third = run_script(config, ledger)
    assert third.returncode == 0, third.stderr
    out = json.loads(third.stdout)
    assert out["texts"] == [f"answer: row {i}" for i in range(ROWS)]
    assert batch_server.state.created == 1
    direct = ModelConfig.load([config], env={"TEST_KEY": "k"}).resolve("direct")
    assert out["cost"] == pytest.approx(ROWS * direct.cost_usd(100, 20) / 2)
    [batch] = SQLiteBatches(ledger).batches()
    assert batch.state == BatchState.ENDED and batch.requests == ROWS
