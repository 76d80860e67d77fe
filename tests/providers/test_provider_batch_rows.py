"""`interlock batch --concurrency 4` over a pipeline whose calls go to a provider batch: a
row whose run only waits for its provider-batch answer does not count against
`--concurrency` (up to `--batch-waiting` rows), so the rows' calls gather into one provider
batch instead of one batch per four rows; and a batch driver killed while rows wait there
is resumed without sending or paying any call twice."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from interlock.core.provider_batches import BatchState
from interlock.providers.config import ModelConfig
from interlock.storage.provider_batches_sqlite import SQLiteBatches

from .batch_server import BatchServer, BatchServerState
from .test_provider_batch import write_config
from .test_provider_batch_cli import WORKFLOW, interlock

ROWS = 40
START = ["batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "b", "--concurrency", "4"]


def project(tmp_path: Path, url: str, *, window: str, size: int = 1000) -> Path:
    """The workflow, its interlock.toml and ROWS rows; the config's path."""
    config = write_config(tmp_path, url, window=window, size=size)
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    with (tmp_path / "rows.csv").open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["topic", "n"])
        writer.writerows([f"Row {n}", n] for n in range(ROWS))
    return config


def status(env: dict[str, str], cwd: Path, *, yet: bool = False) -> dict[str, Any]:
    """`interlock batch status b --json` (with `yet`, {} while the batch is not recorded)."""
    shown = interlock(env, cwd, "batch", "status", "b", "--json")
    if yet and "no batch 'b'" in shown.stderr:
        return {}
    assert shown.returncode == 0, shown.stderr
    found: dict[str, Any] = json.loads(shown.stdout)
    return found


def check_delivered_once(env: dict[str, str], cwd: Path, config: Path, server: BatchServer) -> None:
    """Every row delivered by its one run, each call in exactly one provider batch, each
    paid once at the batch price."""
    shown = status(env, cwd)
    assert shown["counts"] == {"delivered": ROWS}
    assert sorted((r["run_id"], r["try"]) for r in shown["rows"]) == sorted(
        (f"b-r{n}", 1) for n in range(1, ROWS + 1)
    )
    sent = [line["custom_id"] for lines in server.state.inputs.values() for line in lines]
    assert len(sent) == len(set(sent)) == ROWS
    ledger = SQLiteBatches(Path(env["INTERLOCK_HOME"]) / "ledger.db")
    try:
        recorded = ledger.batches()
    finally:
        ledger.close()
    assert sum(b.requests for b in recorded) == ROWS
    assert {b.state for b in recorded} == {BatchState.ENDED}
    direct = ModelConfig.load([config], env={"TEST_KEY": "k"}).resolve("direct")
    assert sum(r["cost_usd"] for r in shown["rows"]) == pytest.approx(
        ROWS * direct.cost_usd(100, 20) / 2
    )


def test_rows_waiting_in_a_provider_batch_leave_room_for_more_rows(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """40 rows, 4 at a time, a 3 s batch window: the rows parked in the provider batch do
    not count, so all 40 calls go out as one provider batch (4 at a time, 10 batches)."""
    server = BatchServer(BatchServerState(polls_to_end=3)).start()
    try:
        config = project(tmp_path, server.url, window="3")
        began = time.monotonic()
        done = interlock(cli_env, tmp_path, *START)
        took = time.monotonic() - began
        assert done.returncode == 0, done.stderr
        # 10 batches in 35 s (4 rows each) when every row in flight counts.
        assert server.state.created == 1, f"{server.state.created} batches in {took:.1f} s"
        check_delivered_once(cli_env, tmp_path, config, server)
    finally:
        server.stop()


def test_rows_wait_in_a_provider_batch_up_to_batch_waiting_and_survive_a_kill(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """--concurrency 4 --batch-waiting 20, a batch sent at 40 calls: 24 rows gather and no
    more start (the cap); `batch status` shows them in the provider batch. The driver killed
    with SIGKILL there, `batch resume --batch-waiting 1000` reads them from the ledger as
    waiting, starts the other 16 beside them, and all 40 calls go out as one batch: every
    row delivered once, no call sent or paid twice."""
    server = BatchServer(BatchServerState(polls_to_end=3)).start()
    try:
        config = project(tmp_path, server.url, window="600", size=ROWS)
        env = {**cli_env, "TEST_KEY": "k", "INTERLOCK_BATCH_POLL_S": "0.05"}
        said = tmp_path / "first.err"
        with said.open("w") as stream:
            first = subprocess.Popen(
                [sys.executable, "-m", "interlock", *START, "--batch-waiting", "20"],
                env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stream,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            shown: dict[str, Any] = {}
            while shown.get("in_provider_batch") != 24:
                assert first.poll() is None, said.read_text()
                assert time.monotonic() < deadline, f"rows never parked: {shown.get('counts')}"
                time.sleep(0.2)
                shown = status(cli_env, tmp_path, yet=True)
            time.sleep(1.0)  # room for rows past the cap to start, were any let start
            shown = status(cli_env, tmp_path)
            assert (shown["running"], shown["in_provider_batch"], shown["waiting"]) == (24, 24, 16)
            assert shown["counts"] == {"in provider batch": 24, "waiting": 16}
        finally:
            if first.poll() is None:
                os.kill(first.pid, signal.SIGKILL)
            first.wait()
        assert server.state.created == 0  # 24 calls gathered, the batch not full
        table = interlock(cli_env, tmp_path, "batch", "status", "b").stdout
        assert "24 running (24 in provider batch)" in table, table
        assert table.count("in provider batch") == 25, table
        resumed = interlock(cli_env, tmp_path, "batch", "resume", "b", "--batch-waiting", "1000")
        assert resumed.returncode == 0, resumed.stderr
        assert server.state.created == 1
        check_delivered_once(cli_env, tmp_path, config, server)
    finally:
        server.stop()
