"""Two `interlock run` processes on one PostgreSQL ledger under a daily spend cap of USD 1.00,
calling a local OpenAI-wire server priced in `interlock.toml`: what they record stays within
the cap, every run past it is listed `waiting` on the cap (none fails), and raising the cap in
the file while they wait lets both deliver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.providers.fake_llm_server import FakeServer
from tests.storage.test_spend_fleet import KEY, config, server

from interlock.storage.spend_pg import PostgresSpend

__all__ = ["server"]  # the fixture, used by name
ROOT = Path(__file__).resolve().parents[2]
WORKERS = 30  # model calls per run at USD 0.04 a call: each run alone passes USD 1.00
TEXT = "waiting: spend cap 'daily' (USD 1.00) until 00:00 UTC"


def workflow(path: Path) -> None:
    """One phase of `WORKERS` model calls at once."""
    workers = "\n".join(
        f"        - {{role: w{n}, model: main, timeout: 60, task: 'Note {n} on {{{{ topic }}}}'"
        + (", final: true}" if n == WORKERS - 1 else "}")
        for n in range(WORKERS)
    )
    path.write_text(f"""
capped:
  description: many calls under a spend cap
  phases:
    - id: calls
      workers:
{workers}
""")


def runs(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """`interlock runs --json` of a third process."""
    listed = subprocess.run(
        [sys.executable, "-m", "interlock", "runs", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout))


@pytest.mark.timeout(300)
def test_two_interlock_runs_wait_on_a_daily_cap_and_deliver_once_it_is_raised(
    tmp_path: Path, server: FakeServer, pg_database: str
) -> None:
    """Spend <= USD 1.00 while both runs are listed waiting on 'daily'; USD 5.00 lets both
    deliver with every call made once."""
    config(tmp_path / "interlock.toml", server, 1.00)
    workflow(tmp_path / "wf.yaml")
    env = {
        **os.environ,
        "FAKE_KEY": KEY,
        "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
        "INTERLOCK_STORE": pg_database,
        "INTERLOCK_HOME": str(tmp_path / "home"),
    }
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        env.pop(name, None)
    command = [sys.executable, "-m", "interlock", "run", "wf.yaml", "capped", "--topic"]
    processes = [
        subprocess.Popen(
            [*command, f"topic {n}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for n in range(2)
    ]
    ledger = PostgresSpend(pg_database)
    try:
        deadline = time.monotonic() + 120
        while True:
            listed = runs(env, tmp_path)
            waiting = [r for r in listed if r["status"] == "waiting"]
            if len(listed) == 2 and len(waiting) == 2:
                break
            assert all(r["status"] in ("running", "waiting") for r in listed), listed
            assert time.monotonic() < deadline, listed
            for process in processes:
                assert process.poll() is None, process.communicate()[1]
            time.sleep(0.2)
        assert {r["waiting"]["text"] for r in waiting} == {TEXT}
        [usage] = ledger.usage(now=time.time())
        assert usage.spent_usd + usage.held_usd <= 1.00 + 1e-9
        shown = subprocess.run(
            [sys.executable, "-m", "interlock", "status", listed[0]["run_id"]],
            capture_output=True,
            text=True,
            env={**env, "COLUMNS": "200"},
            cwd=tmp_path,
            timeout=60,
        )
        assert TEXT in shown.stdout, shown.stdout
        config(tmp_path / "interlock.toml", server, 5.00)
        for process in processes:
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
        listed = runs(env, tmp_path)
        assert [r["status"] for r in listed] == ["delivered", "delivered"]
        assert all(r["waiting"] is None for r in listed)
        [usage] = ledger.usage(now=time.time())
        recorded = sum(r["cost_usd"] for r in listed)
        assert usage.spent_usd == pytest.approx(recorded) == pytest.approx(2 * WORKERS * 0.04)
        assert len(server.state.requests) == 2 * WORKERS
    finally:
        ledger.close()
        for process in processes:
            process.kill()
            process.wait()
