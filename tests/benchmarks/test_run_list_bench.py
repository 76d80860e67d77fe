"""The runs-list benchmark keeps working: it runs here at a tiny size (no figure is judged)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_list_benchmark_runs_on_both_backends(tmp_path: Path) -> None:
    """benchmarks/run_list.py fills SQLite and PostgreSQL with 300 runs, times every query
    of the list and drops its database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "benchmarks/run_list.py", "--runs", "300", "--repeat", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["runs"] == 300
    assert set(figures["ms"]) == {"sqlite", "postgres"}
    assert all(len(by_query) == 11 for by_query in figures["ms"].values())
    assert list(tmp_path.iterdir()) == []
