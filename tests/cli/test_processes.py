"""Worker processes and the orchestrator that owns them, with real processes: nothing
outlives a killed orchestrator, a resume never runs an agent beside an orphan and records
the second start, and an agent's exit decides even when a helper holds its output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_cli import cli

AGENT = """
import os, subprocess, sys, time
here = sys.argv[1]
first = not os.path.exists(os.path.join(here, "ran-once"))
if first:
    open(os.path.join(here, "ran-once"), "w").close()
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(os.path.join(here, "helper.pid"), "w").write(str(helper.pid))
    open(os.path.join(here, "agent.pid"), "w").write(str(os.getpid()))
    time.sleep(120)
else:
    helper = open(os.path.join(here, "helper.pid")).read()
    try:  # a zombie waiting for init to collect it is not running
        running = open(f"/proc/{helper}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        running = False
    alone = "an orphan of the first run is still running" if running else "alone"
    open(os.environ["INTERLOCK_OUTPUT"], "w").write(alone)
"""


def flow(tmp_path: Path) -> Path:
    """A one-task pipeline whose agent starts a helper and hangs the first time it runs."""
    (tmp_path / "agent.py").write_text(AGENT)
    path = tmp_path / "flow.yaml"
    path.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      command: ['{sys.executable}', '{tmp_path / 'agent.py'}', '{tmp_path}']\n"
    )
    return path


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate: object, timeout: float = 30.0) -> bool:
    """Poll `predicate` until it holds or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def start_and_kill(env: dict[str, str], tmp_path: Path, *, guard_too: bool) -> tuple[str, int, int]:
    """Start a run, wait for its agent and helper, then SIGKILL the orchestrator (and its
    guard first, when asked); returns the run id and the two pids."""
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", "run", str(flow(tmp_path)), "p", "--topic", "x"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    seen = ""
    while "task_started" not in seen:  # the start is recorded: a restart is a second one
        line = process.stdout.readline()
        assert line, "the run ended early"
        seen += line
    pids = (tmp_path / "agent.pid", tmp_path / "helper.pid")
    assert wait_for(lambda: all(p.exists() for p in pids))
    agent, helper = (int(p.read_text()) for p in pids)
    if guard_too:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        guards = [c for c in children if b"-I\0-S\0-c" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(guards) == 1
        os.kill(int(guards[0]), signal.SIGKILL)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    run_id = seen.split("run_id=")[1].split()[0]
    return run_id, agent, helper


def test_nothing_outlives_a_killed_orchestrator(cli_env: dict[str, str], tmp_path: Path) -> None:
    """SIGKILL of `interlock run` takes its agent and the helper the agent started with it;
    the resume records the second start, and every view shows both."""
    run_id, agent, helper = start_and_kill(cli_env, tmp_path, guard_too=False)
    assert wait_for(lambda: not alive(agent) and not alive(helper), timeout=10)
    resumed = cli(cli_env, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    final = Path(resumed.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text() == "alone"
    ledger = json.loads(cli(cli_env, "ledger", run_id).stdout)
    starts = ledger["tasks"][0]["starts"]
    assert [s["attempt"] for s in starts] == [1, 1] and starts[0]["by"] != starts[1]["by"]
    events = cli(cli_env, "events", run_id).stdout
    assert events.count("task_started") == 2
    assert "started again" in cli(cli_env, "explain", run_id).stdout


def test_resume_reaps_what_a_dead_orchestrator_left(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """With the orchestrator and its guard both killed, the helper survives; `resume` kills
    it before it runs the agent again, so the agent never runs beside an orphan."""
    run_id, agent, helper = start_and_kill(cli_env, tmp_path, guard_too=True)
    assert wait_for(lambda: not alive(agent), timeout=10)  # the parent-death signal
    assert alive(helper)  # only the record in the run directory can find it now
    resumed = cli(cli_env, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    final = Path(resumed.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text() == "alone"
    assert not alive(helper)


def test_sigterm_leaves_no_worker_behind(cli_env: dict[str, str], tmp_path: Path) -> None:
    """SIGTERM stops the agent and its helper before `interlock run` exits 130."""
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", "run", str(flow(tmp_path)), "p", "--topic", "x"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wait_for(lambda: (tmp_path / "helper.pid").exists())
    helper = int((tmp_path / "helper.pid").read_text())
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 130
    assert not alive(helper)


HELPER_HOLDS_OUTPUT = (
    "import subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print('the answer')"
)


def test_a_command_exit_decides(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A command that prints and exits 0 while a helper holds its stdout is delivered at
    once, and the helper is stopped with it."""
    path = tmp_path / "flow.yaml"
    path.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      timeout: 20\n      command: ['{sys.executable}', '-c', \"{HELPER_HOLDS_OUTPUT}\"]\n"
    )
    result = cli(cli_env, "run", str(path), "p", "--topic", "x")
    assert result.returncode == 0, result.stdout
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text().strip() == "the answer"
    leftover = subprocess.run(
        ["pgrep", "-f", "import time; time.sleep(60)"], capture_output=True, text=True
    )
    assert leftover.stdout == ""


def test_an_agent_exit_decides(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A command-line agent that answers and exits 0 while a helper holds its stdout is
    delivered with its answer well within its timeout, not timed out."""
    (tmp_path / "interlock.toml").write_text(
        "[providers.agent]\nkind = 'cli'\n"
        f"command = ['{sys.executable}', '-c', \"{HELPER_HOLDS_OUTPUT}\"]\n"
        "[models.m]\nprovider = 'agent'\nmodel = 'x'\n"
    )
    path = tmp_path / "flow.yaml"
    path.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, final: true, model: m, timeout: 30}\n"
    )
    started = time.monotonic()
    result = cli(cli_env, "run", str(path), "p", "--topic", "x")
    assert result.returncode == 0, result.stdout
    assert time.monotonic() - started < 25
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert "the answer" in final.read_text()


def test_a_worker_is_stopped_at_its_timeout(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A command past its `timeout` is stopped then and reported timed out by its worker; the
    engine's own `timeout + grace` deadline is only the backstop for a silent worker."""
    path = tmp_path / "flow.yaml"
    path.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      timeout: 1\n      grace: 600\n"
        f"      command: ['{sys.executable}', '-c', 'import time; time.sleep(300)']\n"
    )
    started = time.monotonic()
    result = cli(cli_env, "run", str(path), "p", "--topic", "x")
    assert result.returncode == 1
    assert time.monotonic() - started < 60
    assert "timed out after 1s" in result.stdout
    assert "within timeout + grace" not in result.stdout


GUARDED_EXIT = """
import os
from interlock.runtime.processes import GUARD
quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
def group():  # a process group of its own, as a command worker's
    return os.posix_spawnp("sleep", ["sleep", "60"], os.environ, setsid=True, file_actions=quiet)
released, left = group(), group()
GUARD.watch(released)
GUARD.watch(left)
GUARD.release(released)
print(GUARD._process.pid, released, left, flush=True)
"""


def test_the_guard_ends_with_the_program_and_kills_only_what_was_left_running(
    tmp_path: Path,
) -> None:
    """A program that used the guard exits without a warning about a process left running
    (the guard is reaped at exit, where before Python warned of it), and the guard still
    does its job as the program ends: the group left watched is killed, the released one
    is not."""
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", GUARDED_EXIT],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
    guard, released, left = (int(word) for word in done.stdout.split())
    assert not alive(guard)
    assert wait_for(lambda: not alive(left))
    assert alive(released)
    os.killpg(released, signal.SIGKILL)
