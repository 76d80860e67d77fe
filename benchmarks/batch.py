"""Batches: rows per second of `interlock batch` with no-op command workers, its peak memory,
and how long `batch status` and `batch export` take for the batch.

    python benchmarks/batch.py --rows 1000 --concurrency 16
    python benchmarks/run.py --only batch            # the same, 10,000 rows (--batch-rows)

Prints one JSON object. Each step is the real command (a new process), on a fresh state
directory in a temporary folder, with the default SQLite ledger (synchronous=FULL).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKFLOW = """\
noop:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: work
      workers:
        - role: w
          final: true
          command: [sh, -c, 'echo "Score: $1" > "$2"', sh, "{{ n }}", "{output}"]
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def timed(folder: Path, *args: str) -> tuple[float, float]:
    """Seconds the command took and its peak resident memory (MiB); it must succeed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", "--home", str(folder / "home"), *args],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # wait4 gives this one process's own peak, not the largest of every child so far.
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"interlock {' '.join(args)} exited {process.returncode}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def measure(rows: int, concurrency: int) -> dict[str, float | int]:
    """Run a batch of `rows` no-op rows, then status and export of it; the figures."""
    with tempfile.TemporaryDirectory(prefix="il-batch-") as scratch:
        folder = Path(scratch)
        (folder / "noop.yaml").write_text(WORKFLOW)
        with (folder / "rows.csv").open("w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["n"])
            writer.writerows([n] for n in range(1, rows + 1))
        batch = ["batch", "noop.yaml", "--inputs", "rows.csv", "--batch-id", "bench"]
        seconds, batch_mib = timed(folder, *batch, "--concurrency", str(concurrency))
        status, status_mib = timed(folder, "batch", "status", "bench")
        status_json, _ = timed(folder, "batch", "status", "bench", "--json")
        export, _ = timed(folder, "batch", "export", "bench", "-o", "results.csv")
        lines = (folder / "results.csv").read_text().count("Score:")
    return {
        "rows": rows,
        "concurrency": concurrency,
        "batch_seconds": round(seconds, 2),
        "rows_per_second": round(rows / seconds, 1),
        "batch_peak_rss_mib": round(batch_mib, 1),
        "status_seconds": round(status, 2),
        "status_peak_rss_mib": round(status_mib, 1),
        "status_json_seconds": round(status_json, 2),
        "export_seconds": round(export, 2),
        "exported_outputs": lines,
    }


def main() -> None:
    """Run the batch, then status and export, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    options = parser.parse_args()
    print(json.dumps(measure(options.rows, options.concurrency)))


if __name__ == "__main__":
    main()
