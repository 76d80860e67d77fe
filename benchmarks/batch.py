"""Batches: rows per second of `interlock batch` with no-op command workers, and how long
`batch status` and `batch export` take for the batch.

    python benchmarks/batch.py --rows 1000 --concurrency 16

Prints one JSON object. Each step is the real command (a new process), on a fresh state
directory in a temporary folder, with the default SQLite ledger (synchronous=FULL).
"""

from __future__ import annotations

import argparse
import csv
import json
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


def timed(folder: Path, *args: str) -> float:
    """Seconds the command took; it must succeed."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(folder / "home"), *args],
        cwd=folder, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    """Run the batch, then status and export, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="il-batch-") as scratch:
        folder = Path(scratch)
        (folder / "noop.yaml").write_text(WORKFLOW)
        with (folder / "rows.csv").open("w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["n"])
            writer.writerows([n] for n in range(1, options.rows + 1))
        batch = ["batch", "noop.yaml", "--inputs", "rows.csv", "--batch-id", "bench"]
        seconds = timed(folder, *batch, "--concurrency", str(options.concurrency))
        status = timed(folder, "batch", "status", "bench")
        export = timed(folder, "batch", "export", "bench", "-o", "results.csv")
        lines = (folder / "results.csv").read_text().count("Score:")
    print(
        json.dumps(
            {
                "rows": options.rows,
                "concurrency": options.concurrency,
                "batch_seconds": round(seconds, 2),
                "rows_per_second": round(options.rows / seconds, 1),
                "status_seconds": round(status, 2),
                "export_seconds": round(export, 2),
                "exported_outputs": lines,
            }
        )
    )


if __name__ == "__main__":
    main()
