"""CPU instructions per research-3 run, counted by valgrind: a figure that does not move with
the machine's load, for comparing two versions of the code on a noisy machine.

    python benchmarks/instructions.py                      # this checkout, 200 runs
    python benchmarks/instructions.py --src ../old/src     # another checkout's code
    python benchmarks/instructions.py --modes llm --runs 100   # runs of three model calls

Wall-clock figures on a shared 2-core machine move by 20-50% from one minute to the next, so a
change worth 10% cannot be seen in them. Valgrind's callgrind counts every instruction the
process executes instead, the same count on every run of the same code and inputs (to within
about 1%: run ids, clocks and temporary paths differ). Each mode is counted twice, with
`--runs` runs and with 20, and the difference is divided by the extra runs, so that start-up
and imports drop out. Sequential runs use `synchronous=NORMAL` (fsync waits are not
instructions anyway); concurrent runs are all created at once, as in `run.py`; both read a
clock that moves one microsecond per reading (`counting_clock`), so that the loop's work by
the clock does not grow with valgrind's slowness and the machine's load. `llm` runs are the
`llm` section's (three model calls each, to its local server, which runs outside valgrind and
answers after 0.2 s), all created at once, on the real clock.
Needs `valgrind` (Debian: `apt-get install valgrind`); each count takes a minute or two.

    python benchmarks/instructions.py --profile --modes sequential --runs 300   # where it goes

`--profile` runs the same workload under cProfile instead (no valgrind), in two processes of
`--runs` and 20 runs, and prints the difference per run: calls, self and cumulative time of
the top `--top` functions, the event loop's and every thread's (pool workers, the status
writer, the lease keeper). Times are wall-clock and include waits (`epoll`, `acquire`, a
queue's `get`: idle, not work); calls per run are exact, and a run costs about 2,000
instructions per call, so the calls column is the one to compare. With `--calls` the
profiler's clock counts calls instead of time: a function's cumulative figure is then the
calls made under it per run, exact and the same whatever the load.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BASE_RUNS = 20


def drive(mode: str, runs: int) -> None:
    """The measured work: `runs` research-3 runs (run inside valgrind)."""
    sys.path.insert(0, str(HERE))
    import run as suite  # the suite's workload, workers and settings

    if mode == "llm":
        import llm

        with llm.model_server(0.2, 20) as url, tempfile.TemporaryDirectory() as home:
            llm.interlock_runs(url, runs, 2000, Path(home))
        return
    if mode == "concurrent":
        app = suite.fresh_app(concurrency=256)

        async def go() -> None:
            app.orchestrator.create_runs([(suite.DEFINITION, "bench", None, None)] * runs)
            await app.orchestrator.run_until_settled()

    else:
        app = suite.fresh_app(synchronous="NORMAL")

        async def go() -> None:
            for _ in range(runs):
                app.orchestrator.create_run(suite.DEFINITION, topic="bench")
                await app.orchestrator.run_until_settled()

    app.orchestrator.clock = app.orchestrator.cost_timer = counting_clock()
    asyncio.run(go())


def counting_clock() -> Callable[[], float]:
    """A clock that moves one microsecond per reading, whatever the wall clock does.

    The loop does some work by the clock: it looks at commands every heartbeat, rewrites a
    running run's status.json when `status_interval` has passed, spaces rewrites by what the
    last one took. Under valgrind a run lasts fifty times longer, and longer again on a busy
    machine, so with the real clock that work grows with the load and two counts of the same
    code differ by 10-30%. On this clock a run's work is what its events call for.
    """
    ticks = itertools.count()
    return lambda: 1.8e9 + next(ticks) * 1e-6


def count(mode: str, runs: int, src: str | None) -> int:
    """Instructions executed by a whole process driving `runs` runs."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as scratch:
        env["TMPDIR"] = scratch  # the runs' folders go with it (not removed while counting)
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={scratch}/out",
            sys.executable,
            __file__,
            "--drive",
            mode,
            "--runs",
            str(runs),
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"valgrind failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1))


def _profiler(calls: bool) -> cProfile.Profile:
    """A profiler on the wall clock, or with `calls` on a clock that moves by one at each call
    and each return the profiler sees (its own: one per thread): a function's cumulative
    figure is then the calls made under it, plus a half for its own, the same on every run."""
    if calls:
        return cProfile.Profile(itertools.count().__next__, 0.5)
    return cProfile.Profile()


def profiled_drive(mode: str, runs: int, out: str, calls: bool = False) -> None:
    """`drive` under cProfile, the threads it starts included; the stats go to `out`."""
    sys.path.insert(0, str(HERE))
    import run  # noqa: F401 - imported before profiling, as the counts leave imports out

    profiles: list[cProfile.Profile] = []
    thread_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        profile = _profiler(calls)
        profiles.append(profile)
        profile.enable()
        try:
            thread_run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main_profile = _profiler(calls)
    main_profile.enable()
    drive(mode, runs)
    main_profile.disable()
    stats = pstats.Stats(main_profile)
    for profile in profiles:
        stats.add(profile)
    stats.dump_stats(out)


def profile(mode: str, runs: int, src: str | None, top: int, calls: bool = False) -> None:
    """Print the per-run profile of `mode`: `runs` runs less `BASE_RUNS`, per run (with
    `calls`, the self and cumulative columns count calls instead of microseconds)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    found: list[dict[Any, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        env["TMPDIR"] = scratch
        for count_ in (runs, BASE_RUNS):
            out = f"{scratch}/{count_}.prof"
            command = [sys.executable, __file__, "--drive", mode, "--runs", str(count_)]
            command += ["--calls"] if calls else []
            done = subprocess.run(
                [*command, "--profile-out", out], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise SystemExit(f"the profiled run failed: {done.stderr[-2000:]}")
            found.append(pstats.Stats(out).stats)  # type: ignore[attr-defined]
    more, base = found
    extra = runs - BASE_RUNS
    rows = []
    for key, (_, made, own, total, _) in more.items():
        _, made0, own0, total0, _ = base.get(key, (0, 0, 0.0, 0.0, None))
        rows.append(((made - made0) / extra, (own - own0) / extra, (total - total0) / extra, key))
    unit, scale = ("calls", 1.0) if calls else ("microseconds", 1e6)
    print(
        f"{mode}: {sum(r[0] for r in rows):,.0f} calls per run "
        f"({runs} runs less {BASE_RUNS}; times in {unit} per run)"
    )
    for title, column in (("self time", 1), ("cumulative time", 2), ("calls", 0)):
        print(f"\n  by {title}:\n  {'calls':>8} {'self':>9} {'cumul.':>9}  function")
        for made, own, total, key in sorted(rows, key=lambda r: -r[column])[:top]:
            print(f"  {made:8.1f} {own * scale:9.1f} {total * scale:9.1f}  {_where(key)}")
    print(flush=True)


def _where(key: tuple[str, int, str]) -> str:
    """A profile entry's function, its file shortened to what follows site-packages, src or
    the standard library's folder."""
    path, line, name = key
    if path == "~":
        return name
    for marker in (
        "/site-packages/",
        "/src/",
        f"/python{sys.version_info[0]}.{sys.version_info[1]}/",
    ):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line} {name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--modes", default="sequential,concurrent")
    parser.add_argument("--src", help="import interlock from this source folder instead")
    parser.add_argument(
        "--profile", action="store_true", help="print the per-run cProfile instead of counting"
    )
    parser.add_argument("--top", type=int, default=25, help="functions shown per --profile list")
    parser.add_argument(
        "--calls",
        action="store_true",
        help="with --profile: count calls (cumulative: the calls made under each function)",
    )
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        if args.profile_out:
            profiled_drive(args.drive, args.runs, args.profile_out, args.calls)
        else:
            drive(args.drive, args.runs)
        return
    if args.runs <= BASE_RUNS:
        raise SystemExit(f"--runs must be more than {BASE_RUNS}")
    if args.profile:
        for mode in args.modes.split(","):
            profile(mode, args.runs, args.src, args.top, args.calls)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    for mode in args.modes.split(","):
        per_run = (count(mode, args.runs, args.src) - count(mode, BASE_RUNS, args.src)) / (
            args.runs - BASE_RUNS
        )
        print(f"{mode:<12} {per_run / 1e6:7.3f} M instructions per run", flush=True)


if __name__ == "__main__":
    main()
