"""The real `interlock signal` command: to a run driven elsewhere, to a run nobody drives,
from a file, twice with one key, and to a run that ended."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_cli import cli

WRITE_ARG = "import os, sys; open(os.environ['INTERLOCK_OUTPUT'], 'w').write(sys.argv[1])"
PY = sys.executable
FLOW = f"""
shipping:
  phases:
    - id: ship
      wait_for:
        signal: payment
        schema: {{type: object, required: [amount]}}
      workers:
        - role: shipper
          final: true
          command: ['{PY}', '-c', "{WRITE_ARG}", 'paid {{{{ signals.payment.amount }}}}']
"""


def _flow(tmp_path: Path) -> str:
    path = tmp_path / "shipping.yaml"
    path.write_text(FLOW)
    return str(path)


def _runs(env: dict[str, str]) -> list[dict[str, object]]:
    listed = cli(env, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, object]] = json.loads(listed.stdout)
    return rows


def test_signal_reaches_a_run_driven_by_another_process(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A foreground `run` waits; `status` and `runs` say for what; `signal` lets it deliver."""
    running = subprocess.Popen(
        [sys.executable, "-m", "interlock", "run", _flow(tmp_path), "shipping", "--topic", "o"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            rows = [r for r in _runs(cli_env) if r["status"] == "waiting"]
            if rows and rows[0]["driven_by"]:
                break
            time.sleep(0.5)
        assert rows, "the run never showed as waiting"
        run_id = str(rows[0]["run_id"])
        assert rows[0]["waiting"]["signal"] == "payment"  # type: ignore[index]
        status = cli(cli_env, "status", run_id)
        assert "waiting for signal 'payment'" in status.stdout
        assert f"interlock signal {run_id} payment" in status.stdout
        sent = cli(cli_env, "signal", run_id, "payment", "--data", '{"amount": 9}')
        assert sent.returncode == 0, sent.stderr
        assert "the orchestrator driving it records it" in sent.stdout
        stdout, stderr = running.communicate(timeout=30)
    finally:
        running.kill()
    assert running.returncode == 0, stdout + stderr
    assert (tmp_path / "home" / "archive").exists() or "delivered" in stdout


def test_signal_to_a_run_nobody_drives_continues_it_here(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`signal` from a file to a submitted run drives it to delivery; the key is then spent:
    its retry is a duplicate, a new signal to the ended run an error."""
    submitted = cli(cli_env, "submit", _flow(tmp_path), "shipping", "--topic", "o")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    data = tmp_path / "pay.json"
    data.write_text('{"amount": 4}')
    sent = cli(cli_env, "signal", run_id, "payment", "--data-file", str(data), "--key", "p1")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "delivered" in sent.stdout
    final = next((tmp_path / "home").rglob("final.md"))
    assert final.read_text() == "paid 4"
    # A retry with the spent key is acknowledged as the same signal, even after the end;
    # a new signal to the delivered run is refused.
    again = cli(cli_env, "signal", run_id, "payment", "--data", "{}", "--key", "p1")
    assert again.returncode == 0 and "already received a signal with key 'p1'" in again.stdout
    late = cli(cli_env, "signal", run_id, "payment", "--data", "{}", "--key", "p2")
    assert late.returncode == 2
    assert "running, waiting or paused" in late.stdout + late.stderr


def test_signal_data_must_be_json_from_one_place(tmp_path: Path) -> None:
    """--data and --data-file are JSON, one of them at most, with errors naming the fix."""
    import pytest

    from interlock.cli.signals import signal_data
    from interlock.errors import UsageError

    assert signal_data(None, None) is None
    assert signal_data('{"a": 1}', None) == {"a": 1}
    with pytest.raises(UsageError, match="not JSON"):
        signal_data("yes", None)
    with pytest.raises(UsageError, match="not both"):
        signal_data("1", "f.json")
    with pytest.raises(UsageError, match="cannot read"):
        signal_data(None, str(tmp_path / "missing.json"))
