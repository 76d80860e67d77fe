"""Starting command workers: without Python in the child (so CPython uses vfork, whatever the
orchestrator's size), with the parent-death signal still in place, and a missing program
still reported as one that cannot start."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
from pathlib import Path

from interlock.core.workflow import Worker
from interlock.runtime import processes
from interlock.runtime.executors import Outcome, TaskSpec, run_command

PR_GET_PDEATHSIG = 2


def spec_of(tmp_path: Path, command: list[str], task_id: str = "w") -> TaskSpec:
    """A one-attempt spec of a command worker running in `tmp_path`."""
    return TaskSpec(
        run_id="r1",
        task_id=task_id,
        attempt=1,
        worker=Worker.model_validate({"role": task_id, "command": command}),
        task="",
        topic="t",
        inputs={},
        item=None,
        reads=[],
        output=tmp_path / f"{task_id}.part",
        run_dir=tmp_path,
        model=None,
        idempotency_key=task_id,
    )


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_starting_a_command_does_not_copy_the_orchestrator(tmp_path: Path) -> None:
    """With 400 MB of Python objects in the orchestrator, a command worker's whole attempt
    (log files, start, record, wait) costs it under 8 ms of CPU (about 4 measured; 22 with
    fork, which copies its page tables for a child that runs Python before exec)."""
    ballast = [bytearray(4096) for _ in range(100_000)]  # 400 MB, every page touched

    async def many() -> list[Outcome]:
        return [await run_command(spec_of(tmp_path, ["echo", "ok"], f"w{n}")) for n in range(30)]

    asyncio.run(run_command(spec_of(tmp_path, ["echo", "ok"], "warm")))
    before = own_cpu()
    outcomes = asyncio.run(many())
    per_start = (own_cpu() - before) / 30
    assert all(o.ok for o in outcomes)
    assert len(ballast) == 100_000
    assert per_start < 0.008, f"{1000 * per_start:.2f} ms of the orchestrator's CPU per start"


def test_a_worker_gets_the_parent_death_signal(tmp_path: Path) -> None:
    """The command itself (after the wrapper's execs) has SIGKILL as its parent-death signal."""
    probe = (
        "import ctypes, os; s = ctypes.c_int(); "
        f"ctypes.CDLL(None).prctl({PR_GET_PDEATHSIG}, ctypes.byref(s)); "
        "open(os.environ['INTERLOCK_OUTPUT'], 'w').write(str(s.value))"
    )
    outcome = asyncio.run(run_command(spec_of(tmp_path, [sys.executable, "-c", probe])))
    assert outcome.ok, outcome.error
    assert (tmp_path / "w.part").read_text() == "9"


def test_a_start_orphaned_before_the_signal_was_set_never_runs(tmp_path: Path) -> None:
    """A child whose parent died before the death signal was in place (its parent is no
    longer the pid it was given) exits before the command runs."""
    wrapper = processes.death_wrapper()
    assert wrapper is not None, "setpriv with --pdeathsig is part of util-linux"
    marker = tmp_path / "ran"
    command = ["/bin/sh", "-c", f"touch {marker}"]
    # The check reads $PPID: any pid but ours stands for a parent that died meanwhile.
    orphan = subprocess.run([*wrapper, "1", *command], check=False)
    assert orphan.returncode == 1 and not marker.exists()
    own = subprocess.run([*wrapper, str(os.getpid()), *command], check=False)
    assert own.returncode == 0 and marker.exists()


def test_a_missing_program_cannot_start(tmp_path: Path) -> None:
    """A program that is not on PATH, or a file that is not executable, fails as before the
    wrapper: `cannot start`, not retried, and not an exit code of the shell."""
    (tmp_path / "plain.txt").write_text("not a program")
    missing = asyncio.run(run_command(spec_of(tmp_path, ["no-such-program-anywhere"])))
    assert not missing.ok and not missing.retryable
    assert "cannot start 'no-such-program-anywhere'" in missing.error
    assert "No such file or directory" in missing.error
    plain = asyncio.run(run_command(spec_of(tmp_path, ["./plain.txt"])))
    assert not plain.ok and not plain.retryable
    assert "cannot start './plain.txt'" in plain.error and "Permission denied" in plain.error
