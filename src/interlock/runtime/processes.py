"""Worker processes never outlive the orchestrator that owns them.

Each command worker (and command-line agent) runs in a process group of its own, so that
stopping it stops everything it started. Three layers make sure no group is left behind:

- The child asks the kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`, Linux):
  through `setpriv --pdeathsig KILL` (util-linux), then a shell that exits if the parent
  died before the request was in place, then the command. No Python runs in the child, so
  CPython starts it with vfork instead of copying the orchestrator with fork (`spawn`);
  without setpriv, a `preexec_fn` makes the same request after a fork.
- A guard process, one per orchestrator, holds the list of running groups. It reads them
  from a pipe whose only writer is the orchestrator: when the orchestrator dies, even by
  SIGKILL, the pipe reaches end of file and the guard kills every group still listed (the
  parent-death signal reaches only the direct child, not what it started).
- Each group is recorded in the run directory (`.tmp/<task>.<attempt>.pgid`); the next
  orchestrator to take the run kills what a dead one left (`reap`) before it starts the
  task again, so a resumed run never runs a second agent beside an orphan.

No module of interlock is imported here: providers use it too.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1

# The guard: started with -I -S so that it costs a bare interpreter. It ignores the signals
# a terminal or a service manager sends to everything; end of file on stdin is its only cue.
_GUARD = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line.startswith("-"):
        groups.discard(int(line[1:]))
    elif line:
        groups.add(int(line))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the parent dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request was in place
        os._exit(1)


# Run by /bin/sh after setpriv asked for the death signal: $1 is the orchestrator's pid; a
# parent that died before the request was in place left the shell another parent.
_PARENT_CHECK = '[ "$PPID" = "$1" ] || exit 1; shift; exec "$@"'


@functools.cache
def death_wrapper() -> tuple[str, ...] | None:
    """The argv prefix that gives a command the parent-death signal without Python in the
    child (`setpriv --pdeathsig KILL -- /bin/sh -c CHECK`), or None where there is none
    (not Linux, no setpriv, or one too old for `--pdeathsig`). Checked once per process."""
    if not sys.platform.startswith("linux") or not os.access("/bin/sh", os.X_OK):
        return None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = (setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _PARENT_CHECK, "interlock")
    try:
        probe = subprocess.run(  # noqa: S603 (fixed argv)
            [*prefix, str(os.getpid()), "/bin/sh", "-c", ":"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return prefix if probe.returncode == 0 else None


def find_program(program: str, path: str, cwd: Path) -> str:
    """Where `program` would be executed from (as exec looks it up: a name on `path`, or a
    path relative to `cwd`), so that a missing one fails here as it would without the
    wrapper, not as the shell's exit code.

    Raises:
        FileNotFoundError: there is no such program.
        PermissionError: it is not an executable file.
    """
    if os.sep not in program:
        found = shutil.which(program, path=path)
        if found is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        return found
    candidate = cwd / program
    if not candidate.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if not candidate.is_file() or not os.access(candidate, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    return str(candidate)


def spawn(
    argv: list[str], *, env: dict[str, str], cwd: Path, stdout: int, stderr: int
) -> subprocess.Popen[bytes]:
    """Start `argv` in a process group of its own that gets SIGKILL when this process dies.

    With the wrapper (`death_wrapper`) no Python runs between fork and exec, so CPython
    uses vfork: the cost no longer grows with the orchestrator's memory (about 3 ms of CPU
    per `echo` instead of 16 ms for a 100 MB orchestrator).

    Raises:
        OSError: the command cannot be started.
    """
    wrapper = death_wrapper()
    if wrapper is None:
        command, preexec = argv, die_with_parent
    else:
        find_program(argv[0], env.get("PATH", os.defpath), cwd)
        command, preexec = [*wrapper, str(os.getpid()), *argv], None
    return subprocess.Popen(  # noqa: S603 (the workflow's own command, never a shell)
        command,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=cwd,
        start_new_session=True,  # its own process group: stopped as a whole
        preexec_fn=preexec,
    )


async def exit_code(process: subprocess.Popen[bytes]) -> int:
    """Wait for `process` to end without a thread: its pidfd is read by the event loop
    (Linux 5.3+; elsewhere a thread waits).

    asyncio is imported here, not with the module: `interlock status` reads lease holders
    through this module and starts without it."""
    import asyncio

    try:
        descriptor = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        return await asyncio.to_thread(process.wait)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(descriptor, readable)
    try:
        await ended
    finally:
        loop.remove_reader(descriptor)
        os.close(descriptor)
    return process.wait()


class Guard:
    """The guard process of this orchestrator (started on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def _send(self, line: str) -> None:
        with self._lock:
            for _ in range(2):
                process = self._process
                if process is None or process.poll() is not None:
                    process = self._process = self._start()
                if process is None or process.stdin is None:
                    return
                try:
                    process.stdin.write(line.encode() + b"\n")
                    process.stdin.flush()
                    return
                except (BrokenPipeError, OSError):
                    self._process = None  # it died: start another and tell it again

    @staticmethod
    def _start() -> subprocess.Popen[bytes] | None:
        try:
            return subprocess.Popen(  # noqa: S603 (this interpreter, our own code)
                [sys.executable, "-I", "-S", "-c", _GUARD],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of reach of the terminal's Ctrl-C
                close_fds=True,
            )
        except OSError:
            return None  # the parent-death signal and `reap` still apply

    def watch(self, pgid: int) -> None:
        """Kill process group `pgid` if this process dies before `release(pgid)`."""
        self._send(str(pgid))

    def release(self, pgid: int) -> None:
        """The group ended (or was killed) here."""
        self._send(f"-{pgid}")

    def close(self, wait: float = 2.0) -> None:
        """End the guard as this process's end would: its stdin closes, it kills the groups
        still watched (none after a clean shutdown) and exits; then it is reaped, so that no
        process of ours is left behind unwaited (Python warns of one at exit)."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)


GUARD = Guard()
atexit.register(GUARD.close)


def record(run_dir: Path, task_id: str, attempt: int, run_id: str, pgid: int) -> Path:
    """Note a running group in the run directory, for `reap` after a crash."""
    path = run_dir / ".tmp" / f"{task_id}.{attempt}.pgid"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"pgid": pgid, "host": socket.gethostname(), "run_id": run_id, "task_id": task_id}
    path.write_text(json.dumps(entry))
    return path


def begun_attempts(run_dir: Path) -> set[tuple[str, int]]:
    """(task id, attempt) of every attempt a worker of this run began, by what it left in
    the run's folder: the record of its process group (`record`), its temporary output
    (`.tmp/<task>.<attempt>.part`), or its prompt record (`prompts/<task>.<attempt>.md`,
    written before a model is called). Read at resume, before `reap` removes the first: an
    attempt found here ran when the orchestrator that started it stopped, even if its start
    was never recorded."""
    found: set[tuple[str, int]] = set()
    tmp, prompts = run_dir / ".tmp", run_dir / "prompts"
    for folder, suffix in ((tmp, ".pgid"), (tmp, ".part"), (prompts, ".md")):
        if not folder.is_dir():
            continue
        for path in folder.glob(f"*{suffix}"):
            task_id, _, attempt = path.name.removesuffix(suffix).rpartition(".")
            if task_id and attempt.isdigit():
                found.add((task_id, int(attempt)))
    return found


def kill_group(pgid: int) -> None:
    """SIGKILL a process group; nothing to do when it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def reap(run_dir: Path, run_id: str, *, wait: float = 5.0) -> list[int]:
    """Kill the groups a dead orchestrator left running for this run; returns their ids.

    A group is killed only when one of its processes still carries the run's id in its
    environment, so a process group id reused by an unrelated program is left alone.
    """
    folder = run_dir / ".tmp"
    if not folder.is_dir():
        return []
    killed = []
    for path in sorted(folder.glob("*.pgid")):
        try:
            entry = json.loads(path.read_text())
            pgid = int(entry["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if entry.get("host") != socket.gethostname():
            continue  # another machine's process: only that machine can see it
        members = group_members(pgid)
        marker = f"\0INTERLOCK_RUN_ID={run_id}\0".encode()
        if any(marker in b"\0" + _environ(pid) for pid in members):
            kill_group(pgid)
            killed.append(pgid)
        path.unlink(missing_ok=True)
    deadline = time.monotonic() + wait
    while killed and any(group_members(g) for g in killed) and time.monotonic() < deadline:
        time.sleep(0.02)
    return killed


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc."""
    members = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else []:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry.name))
    return members


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def holder_is_dead(holder: str) -> bool:
    """True when a lease holder (`host:pid:nonce`) was a process on this host that no longer
    exists (or is a zombie)."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return int(pid_text) != os.getpid() and _is_zombie(int(pid_text))


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
