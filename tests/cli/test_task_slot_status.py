"""`interlock status` of a run whose task waits for a task slot says so on the worker's row."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.cli.test_cli import cli

FLOW = """
job:
  inputs:
    customer: acme
  phases:
    - id: work
      workers:
        - role: w
          command:
            - "{python}"
            - "-c"
            - "{gate_code}"
            - "{output}"
            - "{gate}"
          concurrency: {key: inputs.customer, limit: 1}
          final: true
"""
# The worker holds its slot until the test has seen the second run wait, however slowly a
# loaded machine starts the second `interlock run`.
GATE_CODE = (
    "import os, sys, time; "
    "[time.sleep(0.05) for _ in range(2400) if not os.path.exists(sys.argv[2])]; "
    "open(sys.argv[1], 'w').write('ok')"
)


def test_a_worker_waiting_for_a_task_slot_says_so_in_status(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Two runs share a task key with limit 1: the second's worker row reads "pending
    (waiting for a slot of 'acme')" rather than a bare "pending", and both deliver."""
    flow = tmp_path / "flow.yaml"
    gate = tmp_path / "gate"
    flow.write_text(FLOW.replace("{gate_code}", GATE_CODE).replace("{gate}", str(gate)))
    command = [sys.executable, "-m", "interlock", "run", str(flow), "job", "--topic"]
    quiet: dict[str, Any] = {
        "env": cli_env,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
    }
    runs = [subprocess.Popen([*command, "a"], **quiet)]
    waiting: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while not [r for r in json.loads(cli(cli_env, "runs", "--json").stdout or "[]")
                   if r["status"] == "running"]:  # fmt: skip
            assert time.monotonic() < deadline, "the first run never started"
            time.sleep(0.1)
        runs.append(subprocess.Popen([*command, "b"], **quiet))
        while not waiting:
            assert time.monotonic() < deadline, "the second run never waited for a slot"
            listed = json.loads(cli(cli_env, "runs", "--status", "waiting", "--json").stdout)
            waiting = [r["run_id"] for r in listed]
            time.sleep(0.1)
        shown = cli(cli_env, "status", waiting[0])
        row = next(line for line in shown.stdout.splitlines() if line.split()[:2] == ["work", "w"])
        assert "pending (waiting for a slot of 'acme')" in row, shown.stdout
    finally:
        gate.touch()
        codes = [run.wait(timeout=60) for run in runs]
    assert codes == [0, 0]
