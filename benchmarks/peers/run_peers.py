#!/usr/bin/env python3
"""Run the "research-3" peer benchmarks, each in its own virtualenv.

Each peer has a script ``<script>_research3.py`` beside this file that is run
with the interpreter of ``benchmarks/.envs/<env>/`` and prints one JSON object
on the last line of its stdout.  This driver only uses the standard library.

    python3 benchmarks/peers/run_peers.py [--runs N] [--concurrent M] [peer ...]

``run_all`` is the entry point used by the main benchmark suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENVS = HERE.parent / ".envs"

# name reported/selected -> (venv name, script, extra args)
PEERS: dict[str, tuple[str, str, list[str]]] = {
    "dbos-sqlite": ("dbos", "dbos_research3.py", ["--backend", "sqlite"]),
    "dbos-postgres": ("dbos", "dbos_research3.py", ["--backend", "postgres"]),
    "prefect": ("prefect", "prefect_research3.py", []),
    "langgraph": ("langgraph", "langgraph_research3.py", []),
    "celery": ("celery", "celery_research3.py", []),
}

# A peer name given to run_all may also be a venv name ("dbos" -> both backends).
ALIASES: dict[str, list[str]] = {"dbos": ["dbos-sqlite", "dbos-postgres"]}

RESULT_KEYS = (
    "peer",
    "backend",
    "version",
    "sequential_runs_per_s",
    "ms_per_step",
    "concurrent_runs_per_s",
    "error",
)


def _failed(name: str, reason: str) -> dict:
    env = PEERS.get(name, (name, "", []))[0]
    return {
        "peer": name,
        "backend": None,
        "version": None,
        "sequential_runs_per_s": None,
        "ms_per_step": None,
        "concurrent_runs_per_s": None,
        "error": reason,
        "env": env,
    }


# Seconds allowed per run, by peer; generous (several times what was measured
# here).  Each script also gets its own hard timeout, 15 s below this one.
SECONDS_PER_RUN = {"prefect": 4.0}


def _timeout_for(name: str, runs: int, concurrent: int) -> float:
    per_run = SECONDS_PER_RUN.get(name, 0.5)
    return 120.0 + per_run * (runs + concurrent)


def _last_json_line(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def run_one(name: str, runs: int, concurrent: int, timeout: float | None = None) -> dict:
    """Run one peer's script in its venv; never raises."""
    if name not in PEERS:
        return _failed(name, f"unknown peer (known: {', '.join(PEERS)})")
    env, script, extra = PEERS[name]
    python = ENVS / env / "bin" / "python"
    if not python.exists():
        return _failed(name, f"venv missing: run benchmarks/peers/setup.sh {env}")
    script_path = HERE / script
    if not script_path.exists():
        return _failed(name, f"script missing: {script_path.name}")
    if timeout is None:
        timeout = _timeout_for(name, runs, concurrent)
    cmd = [
        str(python),
        str(script_path),
        "--runs",
        str(runs),
        "--concurrent",
        str(concurrent),
        "--timeout",
        str(int(max(30, timeout - 15))),
        *extra,
    ]
    child_env = dict(os.environ)
    child_env.pop("PYTHONPATH", None)
    child_env.pop("VIRTUAL_ENV", None)
    child_env["PYTHONUNBUFFERED"] = "1"
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(HERE),
            env=child_env,
            start_new_session=True,  # so a timeout can end its whole group
        )
    except OSError as exc:
        return _failed(name, f"could not start: {exc}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return _failed(name, f"timed out after {timeout:.0f}s")
    result = _last_json_line(out or "")
    if result is None:
        tail = " | ".join((err or out or "").strip().splitlines()[-3:])
        return _failed(name, f"exit {proc.returncode}, no JSON result: {tail[-400:]}")
    for key in RESULT_KEYS:
        result.setdefault(key, None)
    result["peer"] = name
    result["env"] = env
    result["wall_s"] = round(time.monotonic() - started, 1)
    if proc.returncode != 0 and not result.get("error"):
        result["error"] = f"exit {proc.returncode}"
    return result


def _expand(peers: list[str] | None) -> list[str]:
    if not peers:
        return list(PEERS)
    out: list[str] = []
    for p in peers:
        for name in ALIASES.get(p, [p]):
            if name not in out:
                out.append(name)
    return out


def run_all(runs: int, concurrent: int, peers: list[str] | None) -> list[dict]:
    """Run the research-3 benchmark for each peer (all when ``peers`` is None).

    Returns one dict per peer with the keys of RESULT_KEYS (plus ``env`` and,
    when the script ran, ``wall_s``).  A peer that is not installed or fails
    has ``error`` set and null figures; this function does not raise for that.
    """
    return [run_one(name, runs, concurrent) for name in _expand(peers)]


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(results: list[dict]) -> str:
    headers = ["peer", "backend", "version", "seq runs/s", "ms/step", "conc runs/s", "error"]
    rows = [
        [
            r.get("peer"),
            r.get("backend"),
            r.get("version"),
            _fmt(r.get("sequential_runs_per_s")),
            _fmt(r.get("ms_per_step"), 2),
            _fmt(r.get("concurrent_runs_per_s")),
            (r.get("error") or "")[:70],
        ]
        for r in results
    ]
    cells = [headers] + [[_fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "peers", nargs="*", help=f"peers to run (default all): {', '.join(PEERS)}, dbos"
    )
    ap.add_argument("--runs", type=int, default=200, help="sequential runs (default 200)")
    ap.add_argument(
        "--concurrent", type=int, default=200, help="runs started at once (default 200)"
    )
    ap.add_argument(
        "--json", action="store_true", help="print the results as a JSON list instead of a table"
    )
    args = ap.parse_args(argv)
    results = []
    for name in _expand(args.peers or None):
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(run_one(name, args.runs, args.concurrent))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
