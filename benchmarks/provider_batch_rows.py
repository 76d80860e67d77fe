"""Rows through a provider batch: how many provider batches `interlock batch` sends and how
long it takes, for N rows at `--concurrency C` whose model alias says `batch = true`.

    python benchmarks/provider_batch_rows.py --rows 40 --concurrency 4 --window 1
    python benchmarks/provider_batch_rows.py --rows 40 --concurrency 4 --batch-waiting 0

The provider is the local server speaking OpenAI's Batch API that the tests use
(`tests/providers/batch_server.py`), ending a batch on its third status request (polled
every 0.05 s); the batch is the real command (a new process) on a fresh state directory.
Prints one JSON object.
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

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = """\
ask:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: answer
      workers:
        - role: answerer
          final: true
          model: cheap
          task: "row {{ n }}"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--window", default="1", help="batch_window of the alias, in seconds")
    parser.add_argument("--batch-waiting", type=int, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.providers.batch_server import BatchServer, BatchServerState
    from tests.providers.test_provider_batch import write_config

    home = Path(tempfile.mkdtemp(prefix="il-pbrows-"))
    server = BatchServer(BatchServerState(polls_to_end=3)).start()
    try:
        write_config(home, server.url, window=args.window)
        (home / "wf.yaml").write_text(WORKFLOW)
        with (home / "rows.csv").open("w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["topic", "n"])
            writer.writerows([f"Row {n}", n] for n in range(args.rows))
        env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
        env.update(INTERLOCK_HOME=str(home / "state"), TEST_KEY="k", INTERLOCK_BATCH_POLL_S="0.05")
        command = [sys.executable, "-m", "interlock", "batch", "wf.yaml", "--inputs", "rows.csv",
                   "--batch-id", "b", "--concurrency", str(args.concurrency)]  # fmt: skip
        if args.batch_waiting is not None:
            command += ["--batch-waiting", str(args.batch_waiting)]
        began = time.monotonic()
        done = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True)
        took = time.monotonic() - began
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        calls = sum(len(lines) for lines in server.state.inputs.values())
    finally:
        server.stop()
    print(json.dumps({
        "rows": args.rows, "concurrency": args.concurrency, "window_s": args.window,
        "batch_waiting": args.batch_waiting, "provider_batches": server.state.created,
        "calls": calls, "wall_s": round(took, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
