"""Two processes on one PostgreSQL ledger under a daily spend cap of USD 1.00, calling a
local OpenAI-wire server priced in `interlock.toml`: what they spend stays within the cap,
every call past it waits (none fails), and raising the cap in the file lets them finish."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

from interlock.storage.spend_pg import PostgresSpend

KEY = "test-key-0123456789"
WORKER = Path(__file__).with_name("spend_worker.py")
ROOT = Path(__file__).resolve().parents[2]
CALLS = 20  # per process


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-wire server answering 1000 prompt and 250 output tokens a call."""
    state = FakeState(
        api_key=KEY, models={"gpt-test"}, reply=["Hello", "."], input_tokens=1000, output_tokens=250
    )
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()
    thread.join()


def config(path: Path, server: FakeServer, cap: float) -> None:
    """The configuration both processes read; its mtime moves on every write."""
    path.write_text(
        f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_KEY"

[models.main]
provider = "local"
model = "gpt-test"
max_output_tokens = 500

[prices.gpt-test]
input_price_per_mtok = 20.0
output_price_per_mtok = 80.0

[limits]
max_cost_usd_per_day = {cap}
"""
    )
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output lines, read in a thread (so the test can wait with a limit)."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            found.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    return found


def test_two_processes_stay_under_a_daily_cap_and_finish_once_it_is_raised(
    tmp_path: Path, server: FakeServer, pg_database: str
) -> None:
    """Spend <= USD 1.00 with every call past the cap waiting; USD 5.00 lets all 40 end."""
    path = tmp_path / "interlock.toml"
    config(path, server, 1.00)
    env = {**os.environ, "FAKE_KEY": KEY, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(path), pg_database, str(CALLS)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [lines_of(p) for p in processes]
    ledger = PostgresSpend(pg_database)
    try:
        for output in outputs:
            assert output.get(timeout=60) == "waiting"
        # The calls under way settle, and a waiting call tries again every few seconds, so
        # the spend climbs until no worst case fits under the cap; it never passes it.
        deadline = time.monotonic() + 90
        while True:
            [usage] = ledger.usage(now=time.time())
            assert usage.spent_usd + usage.held_usd <= 1.00 + 1e-9
            full = usage.holds == 0 and usage.spent_usd > 1.00 - 0.06
            if full or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        sent = len(server.state.requests)
        print(f"before the raise: {sent} calls sent, USD {usage.spent_usd:.4f} spent")
        assert usage.holds == 0
        assert 1.00 - 0.06 < usage.spent_usd <= 1.00 + 1e-9  # within one worst case of it
        assert sent == round(usage.spent_usd / 0.04) < 2 * CALLS
        config(path, server, 5.00)
        results = [json.loads(output.get(timeout=60)) for output in outputs]
        assert [r["failed"] for r in results] == [[], []]
        assert [r["ok"] for r in results] == [CALLS, CALLS]
        [usage] = ledger.usage(now=time.time())
        assert usage.spent_usd == pytest.approx(2 * CALLS * 0.04)
    finally:
        ledger.close()
        for process in processes:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
