"""`interlock batch` over a pipeline whose model alias says `batch = true`: 50 rows through
the provider's batch API, with the orchestrator killed between sending the batch and
recording it, and again while polling: every row delivered, no batch sent twice, at half
price."""

from __future__ import annotations

import csv
import json
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

ROWS = 50
WORKFLOW = """\
ask:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: answer
      workers:
        - role: answerer
          final: true
          model: cheap
          task: "row {{ n }}"
"""


@pytest.fixture
def batch_server() -> Iterator[BatchServer]:
    """The batch server, ending a batch on its third status request."""
    server = BatchServer(BatchServerState(polls_to_end=3)).start()
    try:
        yield server
    finally:
        server.stop()


def interlock(
    env: dict[str, str], cwd: Path, *args: str, crash_at: str = ""
) -> subprocess.CompletedProcess[str]:
    """The real command line, armed to die at `crash_at`."""
    env = {**env, "TEST_KEY": "k", "INTERLOCK_BATCH_POLL_S": "0.05"}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_dataset_through_a_batch_alias_survives_two_kills(
    cli_env: dict[str, str], tmp_path: Path, batch_server: BatchServer
) -> None:
    """Killed after submit, then while polling: the third process delivers all 50 rows,
    no batch is sent twice, and the rows cost half the direct price."""
    config = write_config(tmp_path, batch_server.url, window="3")
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    with (tmp_path / "rows.csv").open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["topic", "n"])
        writer.writerows([f"Row {n}", n] for n in range(ROWS))
    start = ["batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "b", "--concurrency", "50"]
    first = interlock(cli_env, tmp_path, *start, crash_at="after_batch_submit")
    assert first.returncode == -9, first.stderr
    assert batch_server.state.created == 1
    second = interlock(cli_env, tmp_path, "batch", "resume", "b", crash_at="while_batch_poll")
    assert second.returncode == -9, second.stderr
    third = interlock(cli_env, tmp_path, "batch", "resume", "b")
    assert third.returncode == 0, third.stderr
    # Rows that reached the model after the first batch went out come in a later one; no
    # batch went out twice, and each row's call is in exactly one batch.
    sent = [b["metadata"]["interlock_batch"] for b in batch_server.state.batches.values()]
    ledger = SQLiteBatches(Path(cli_env["INTERLOCK_HOME"]) / "ledger.db")
    recorded = ledger.batches()
    assert sorted(sent) == sorted(b.tag for b in recorded)
    assert len(set(sent)) == len(sent) == batch_server.state.created
    assert sum(b.requests for b in recorded) == ROWS
    assert {b.state for b in recorded} == {BatchState.ENDED}
    ledger.close()
    shown = json.loads(interlock(cli_env, tmp_path, "batch", "status", "b", "--json").stdout)
    assert shown["counts"] == {"delivered": ROWS}
    direct = ModelConfig.load([config], env={"TEST_KEY": "k"}).resolve("direct")
    assert sum(r["cost_usd"] for r in shown["rows"]) == pytest.approx(
        ROWS * direct.cost_usd(100, 20) / 2
    )
    listed = interlock(cli_env, tmp_path, "batches", "--provider")
    assert listed.stdout.count("completed") == len(recorded), listed.stdout


SLOW_WORKFLOW = WORKFLOW.replace(
    'task: "row {{ n }}"', 'task: "row {{ n }}"\n          timeout: 1\n          grace: 1'
)


def test_calls_waiting_in_a_batch_hold_no_task_place_and_no_timeout(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """50 rows at once in a process that runs 16 tasks at a time: a call waiting in a
    provider batch gives its place up, so all 50 gather into one batch; and the batch takes
    longer than the worker's timeout and grace (2 s), which cover the call's own work, not
    the wait."""
    server = BatchServer(BatchServerState(polls_to_end=80)).start()  # 80 polls of 0.05 s
    try:
        write_config(tmp_path, server.url, window="1")
        (tmp_path / "wf.yaml").write_text(SLOW_WORKFLOW)
        with (tmp_path / "rows.csv").open("w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["topic", "n"])
            writer.writerows([f"Row {n}", n] for n in range(ROWS))
        started = interlock(cli_env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.csv",
                            "--batch-id", "b", "--concurrency", "50")  # fmt: skip
        assert started.returncode == 0, started.stderr
        created = server.state.created
    finally:
        server.stop()
    shown = json.loads(interlock(cli_env, tmp_path, "batch", "status", "b", "--json").stdout)
    assert shown["counts"] == {"delivered": ROWS}
    assert created == 1
    ledger = SQLiteBatches(Path(cli_env["INTERLOCK_HOME"]) / "ledger.db")
    [batch] = ledger.batches()
    assert batch.requests == ROWS and batch.ended_at is not None
    assert batch.ended_at - (batch.submitted_at or 0) > 2  # longer than timeout + grace
    ledger.close()


WORKER_BATCH = """\
ask:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: answer
      workers:
        - role: answerer
          final: true
          model: direct
          batch: true
          batch_window: 1s
          task: "row {{ n }}"
"""


def test_a_worker_with_batch_true_sends_a_direct_alias_in_batches(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`batch: true` on the worker: the calls of alias `direct` (no batch in interlock.toml)
    go out as one provider batch, at the batch price."""
    server = BatchServer(BatchServerState(polls_to_end=2)).start()
    try:
        config = write_config(tmp_path, server.url, window="600")
        (tmp_path / "wf.yaml").write_text(WORKER_BATCH)
        with (tmp_path / "rows.csv").open("w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["topic", "n"])
            writer.writerows([f"Row {n}", n] for n in range(10))
        started = interlock(cli_env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.csv",
                            "--batch-id", "w", "--concurrency", "10")  # fmt: skip
        assert started.returncode == 0, started.stderr
        assert server.state.created == 1
    finally:
        server.stop()
    shown = json.loads(interlock(cli_env, tmp_path, "batch", "status", "w", "--json").stdout)
    assert shown["counts"] == {"delivered": 10}
    direct = ModelConfig.load([config], env={"TEST_KEY": "k"}).resolve("direct")
    assert sum(r["cost_usd"] for r in shown["rows"]) == pytest.approx(
        10 * direct.cost_usd(100, 20) / 2
    )
