"""`benchmarks/batch.py` keeps working: a batch of a few rows, status and export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_batch_benchmark_runs(tmp_path: Path) -> None:
    """Three rows are run, shown and exported, and the figures printed as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["TMPDIR"] = str(tmp_path)
    script = str(ROOT / "benchmarks" / "batch.py")
    result = subprocess.run(
        [sys.executable, script, "--rows", "3", "--concurrency", "2"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert (figures["rows"], figures["exported_outputs"]) == (3, 3)
