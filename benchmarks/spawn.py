"""What starting one command worker costs, by the way it is started, in a process as large
as a busy orchestrator.

    python benchmarks/spawn.py                 # 300 starts each way, twice, 100 MB held
    python benchmarks/spawn.py --starts 50 --megabytes 400

Each way starts `echo ok` in a new session and waits for it, alternated `--rounds` times:
`fork` with a `preexec_fn` setting the parent-death signal (how command workers were
started), `vfork` through `setpriv --pdeathsig KILL` and the shell's parent check (how they
are started now, `processes.spawn`), and a bare `vfork` without the signal (the floor).
CPU per start, of this process and of the children, from `getrusage`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from interlock.runtime import processes


def cpu() -> tuple[float, float]:
    """CPU seconds used so far by this process and by its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def measure(starts: int, start: Any) -> dict[str, float]:
    """Milliseconds of CPU per start, this process's and the children's."""
    before = cpu()
    for _ in range(starts):
        start().wait()
    after = cpu()
    return {
        "parent_ms": round(1000 * (after[0] - before[0]) / starts, 2),
        "child_ms": round(1000 * (after[1] - before[1]) / starts, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--megabytes", type=int, default=100, help="memory this process holds")
    args = parser.parse_args()
    held = [bytearray(1 << 20) for _ in range(args.megabytes)]
    echo = shutil.which("echo") or "echo"
    env = dict(os.environ)
    folder = Path(tempfile.mkdtemp(prefix="interlock-spawn-"))
    quiet = subprocess.DEVNULL

    def forked() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [echo, "ok"], stdout=quiet, cwd=folder, start_new_session=True,
            preexec_fn=processes.die_with_parent,
        )  # fmt: skip

    def wrapped() -> subprocess.Popen[bytes]:
        return processes.spawn([echo, "ok"], env=env, cwd=folder, stdout=quiet, stderr=quiet)

    def bare() -> subprocess.Popen[bytes]:
        return subprocess.Popen([echo, "ok"], stdout=quiet, cwd=folder, start_new_session=True)

    ways = {"fork + preexec_fn": forked, "vfork + setpriv + sh": wrapped, "vfork bare": bare}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    try:
        for _ in range(args.rounds):
            for name, start in ways.items():
                results[name].append(measure(args.starts, start))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"megabytes_held": len(held), "per_start": results}, indent=2))


if __name__ == "__main__":
    main()
