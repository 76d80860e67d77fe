"""Experiments: the model calls of `interlock experiment` over N rows of the research
pipeline (two researchers, then a synthesis) with a variant whose synthesis prompt differs.

    python benchmarks/experiment.py --rows 50

Each row of the base makes 3 calls and each row of the variant 1 (its researchers are
reused from the base row), so 3N + N, not 6N. The model is a local OpenAI-wire server that
counts the requests it answers (`tests/providers/fake_llm_server.py`); the experiment is the
real command (a new process) on a fresh state directory. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-bench-experiment-0123456789"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from providers.fake_llm_server import FakeServer, FakeState

    state = FakeState(api_key=KEY, models={"model-s", "model-o"}, reply=["Find", "ings", "."])
    server = FakeServer(state)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as folder:
        here = Path(folder)
        shutil.copy(ROOT / "examples" / "research.json", here / "research.json")
        edited = json.loads((here / "research.json").read_text())
        edited["research"]["phases"][1]["workers"][0]["task"] = "Synthesize in three bullets"
        (here / "edited.json").write_text(json.dumps(edited))
        rows = "\n".join(f"topic {n}" for n in range(1, args.rows + 1))
        (here / "rows.csv").write_text(f"topic\n{rows}\n")
        (here / "interlock.toml").write_text(
            f'[providers.local]\nkind = "openai"\nbase_url = "{server.url}/v1"\n'
            'api_key_env = "BENCH_API_KEY"\n'
            '[models.sonnet]\nprovider = "local"\nmodel = "model-s"\n'
            '[models.opus]\nprovider = "local"\nmodel = "model-o"\n'
        )
        env = {**os.environ, "BENCH_API_KEY": KEY}
        for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
            env.pop(name, None)
        command = [
            sys.executable, "-m", "interlock", "--home", str(here / "home"), "experiment",
            "research.json", "research", "--inputs", "rows.csv", "--variant",
            "edited=edited.json", "--concurrency", str(args.concurrency), "--batch-id", "bench",
        ]  # fmt: skip
        started = time.monotonic()
        done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
    server.shutdown()
    calls = [r.body.get("model") for r in server.requests]
    print(
        json.dumps(
            {
                "rows": args.rows,
                "exit_code": done.returncode,
                "calls": len(calls),
                "calls_by_model": {m: calls.count(m) for m in sorted(set(map(str, calls)))},
                "without_reuse": 6 * args.rows,
                "seconds": round(seconds, 1),
            }
        )
    )
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)


if __name__ == "__main__":
    main()
