"""How long `interlock --help`, `interlock runs`, `interlock status RUN`, `interlock check`
of each example and a whole `interlock run` take.

    python benchmarks/startup.py                    # wall time, 15 runs of each
    python benchmarks/startup.py --instructions     # and instructions counted by valgrind

Each command runs as a user runs it (the console script, a fresh interpreter), with stdout to
/dev/null, against a state directory holding three delivered runs of examples/research.json;
`interlock run` runs examples/research.json once more to its end (its models have no provider
here: the offline provider answers at once, so the figure is the command's own cost).
Prints the fastest and the median wall time of each, its median CPU time (user and system, the
figure the target of 0.3 s for `check`, `runs` and `status` is about, which a busy machine moves
less than wall time), and `python -c pass` for the floor of any Python command on this machine.
Wall time moves with the machine's load; the instruction
count (valgrind's callgrind, --instructions) does not, and compares two versions of the code
on a busy machine. The last line is the figures as JSON.

Each command runs once before it is timed, as a user's second command would: Python's
bytecode is kept (in the scratch folder, whatever PYTHONDONTWRITEBYTECODE says: an installed
interlock has its bytecode), and so are CEL's parse tables (`XDG_CACHE_HOME`, the scratch
folder too). Then a line per command of the target says its CPU time against the 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESEARCH = ROOT / "examples" / "research.json"
# The workflows the README shows (and fanout.yaml, the docs' fan-out), each as the README
# checks it: taste.yaml with its cost quote as well.
EXAMPLES = {
    f"interlock check {' '.join(args)}": [str(ROOT / "examples" / args[0]), *args[1:]]
    for args in (
        ("research.json",),
        ("fanout.yaml",),
        ("taste.yaml",),
        ("taste.yaml", "--cost"),
        ("translate.yaml",),
        ("translate-plain.yaml",),
    )
}
TARGET_CPU_MS = 300  # `check` of the README's examples, `runs` and `status`: CPU per command
CHECKS = tuple(EXAMPLES)
TARGETED = ("interlock runs", "interlock status RUN", *CHECKS)


def interlock() -> list[str]:
    """The console script beside this interpreter, or the module when it is not installed."""
    script = Path(sys.executable).with_name("interlock")
    return [str(script)] if script.exists() else [sys.executable, "-m", "interlock"]


def wall(command: list[str], env: dict[str, str], repeat: int) -> dict[str, float]:
    """Fastest and median wall time of `command`, and its median CPU time, in milliseconds."""
    times, cpu = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {
        "min_ms": round(1000 * min(times), 1),
        "median_ms": round(1000 * statistics.median(times), 1),
        "cpu_ms": round(1000 * statistics.median(cpu), 1),
    }


def instructions(command: list[str], env: dict[str, str]) -> int | None:
    """Instructions the process executes, counted by valgrind (None without valgrind)."""
    if shutil.which("valgrind") is None:
        return None
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    return int(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs of each command")
    parser.add_argument("--instructions", action="store_true", help="count with valgrind too")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="interlock-startup-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
        env["INTERLOCK_HOME"] = str(home / "home")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(home / "bytecode")
        env["XDG_CACHE_HOME"] = str(home / "cache")
        base = interlock()
        for n in range(3):
            subprocess.run(
                [*base, "run", str(RESEARCH), "research", "--topic", f"start-up {n}"],
                env=env,
                cwd=home,
                capture_output=True,
                check=True,
            )
        listing = subprocess.run(
            [*base, "runs", "--json"], env=env, capture_output=True, text=True, check=True
        )
        run_id = json.loads(listing.stdout)[0]["run_id"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "interlock --help": [*base, "--help"],
            "interlock runs": [*base, "runs"],
            "interlock status RUN": [*base, "status", run_id],
            **{name: [*base, "check", *args] for name, args in EXAMPLES.items()},
            "interlock run": [*base, "run", str(RESEARCH), "research", "--topic", "start-up"],
        }
        figures = {}
        for name, command in commands.items():
            subprocess.run(command, env=env, capture_output=True, check=False)  # bytecode kept
            figures[name] = wall(command, env, args.repeat)
            if args.instructions:
                figures[name]["instructions"] = instructions(command, env)
            shown = ", ".join(f"{k} {v:,}" for k, v in figures[name].items() if v is not None)
            print(f"{name:<38} {shown}", flush=True)
        for name in TARGETED:
            cpu = figures[name]["cpu_ms"]
            verdict = "met" if cpu <= TARGET_CPU_MS else f"over by {cpu - TARGET_CPU_MS:,.1f} ms"
            ratio = cpu / TARGET_CPU_MS
            print(
                f"target {name:<38} CPU {cpu:,.1f} ms of {TARGET_CPU_MS} ms"
                f" ({ratio:.2f} of the target): {verdict}"
            )
        print(json.dumps(figures))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
