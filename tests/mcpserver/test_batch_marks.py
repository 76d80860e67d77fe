"""The MCP tool batch_status marks the rows of a batch whose driver was killed as `interlock
batch status` does: `running (not driven)`, with how to drive them on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.mcpserver.helpers import call, environment, stdio_session

# Each row runs until its worker is stopped.
FLOW = """\
slow:
  phases:
    - id: only
      workers:
        - {role: w, final: true, command: [sh, -c, 'sleep 60; echo done > "$1"', sh, "{output}"]}
"""


def cli_status(folder: Path, batch_id: str) -> dict[str, Any]:
    """`interlock batch status BATCH --json` in the project folder."""
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "batch", "status", batch_id, "--json"],
        env=environment(folder / ".interlock"), cwd=folder, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_rows_of_a_killed_driver_are_marked_not_driven(tmp_path: Path) -> None:
    """While `interlock batch` drives two of three rows they are `driven`; after kill -9 of
    it, batch_status gives them `running (not driven)` (mark `not_driven`, `driven` false),
    counts them in `undriven` and says `interlock batch resume` drives them on, as the CLI's
    JSON does; the row not started is neither."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "slow.yaml").write_text(FLOW)
    (folder / "rows.csv").write_text("topic\na\nb\nc\n")
    driver = subprocess.Popen(
        [sys.executable, "-m", "interlock", "batch", "slow.yaml", "--inputs", "rows.csv",
         "--batch-id", "k", "--concurrency", "2"],
        env=environment(folder / ".interlock"), cwd=folder,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        shown: dict[str, Any] = {}
        while [r.get("driven") for r in shown.get("rows", [])] != [True, True, None]:
            assert time.monotonic() < deadline and driver.poll() is None, shown
            time.sleep(0.2)
            shown = cli_status(folder, "k") if (folder / ".interlock").exists() else {}
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()

    async def scenario() -> dict[str, Any]:
        async with stdio_session(folder) as client:
            return await call(client, "batch_status", batch_id="k")

    found = asyncio.run(scenario())
    rows = [(r["shown_status"], r["mark"], r["driven"]) for r in found["rows"]]
    assert rows == [
        ("running (not driven)", "not_driven", False),
        ("running (not driven)", "not_driven", False),
        ("waiting", None, None),
    ]
    assert found["undriven"] == 2
    hint = "2 row(s) in flight with no process driving them: 'interlock batch resume k' drives"
    assert found["undriven_hint"].startswith(hint)
    cli = cli_status(folder, "k")
    assert {k: cli[k] for k in ("undriven", "undriven_hint", "spend_capped")} == {
        k: found[k] for k in ("undriven", "undriven_hint", "spend_capped")
    }
    assert cli["rows"] == found["rows"]
