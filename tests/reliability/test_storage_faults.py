"""SQLite under faults: a lock held past the busy timeout, a full disk, and commits that
succeed while the caller sees an error. No event may be lost or recorded twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Interlock, register
from interlock.errors import StorageError
from interlock.runtime.executors import TaskContext
from interlock.runtime.orchestrator import Settings
from interlock.sim.store import FaultyStore
from interlock.storage.sqlite import SQLiteStore

from .helpers import definition, history_problems

FLOW = """
p:
  phases:
    - id: gather
      workers:
        - {role: a, call: reliability_slow, timeout: 30}
        - {role: b, call: reliability_slow, timeout: 30}
    - id: merge
      mode: sequential
      workers:
        - {role: c, call: reliability_slow, reads: [a.md, b.md], timeout: 30}
        - {role: d, call: reliability_slow, reads: [c.md], final: true, timeout: 30}
"""


# Outputs whose extracted value is large, so that each completion needs new database pages.
BIG_FLOW = FLOW.replace("timeout: 30}", 'timeout: 30, extract: {blob: {regex: "(x+)"}}}')


RAN: Counter[tuple[str, str, int]] = Counter()  # (run, task, attempt) -> executions


def _slow(context: TaskContext) -> str:
    spec = context.spec
    RAN[spec.run_id, spec.task_id, spec.attempt] += 1
    time.sleep(0.15)
    return f"{spec.task_id} done\n" + "x" * 6000


register("reliability_slow", _slow)
SETTINGS = Settings(heartbeat=0.05, lease_ttl=5)


def _drive(app: Interlock) -> tuple[str, list[str]]:
    flow = definition(FLOW)
    state = app.run(flow, topic="faults")
    return state.status.value, history_problems(app, state.run_id, flow)


def test_a_lock_held_past_the_busy_timeout_delays_but_loses_nothing(tmp_path: Path) -> None:
    """Another connection holds the write lock for a second (busy timeout 50 ms): appends
    fail, the loop reloads and retries, and the run is delivered with a sound history."""
    path = tmp_path / "home" / "ledger.db"
    path.parent.mkdir()
    store = SQLiteStore(path, busy_timeout=0.05)
    app = Interlock(tmp_path / "home", store=store, settings=SETTINGS)
    flow = definition(FLOW)
    run_id = app.start(flow, topic="busy")
    holding = threading.Event()

    def hold_lock() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        holding.set()
        time.sleep(1.0)
        other.execute("COMMIT")
        other.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    holding.wait()
    state = app.drive(run_id)
    holder.join()
    assert state.status.value == "delivered"
    assert history_problems(app, run_id, flow) == []
    assert store.integrity_check() == "ok"
    app.close()


def test_a_run_refused_by_a_locked_ledger_leaves_no_folder(tmp_path: Path) -> None:
    """Another process holds the ledger's write lock past the busy timeout while a run is
    started: the start fails (nothing recorded) and no empty run folder is left behind for
    `interlock doctor` to find."""
    home = tmp_path / "home"
    home.mkdir()
    store = SQLiteStore(home / "ledger.db", busy_timeout=0.05)
    app = Interlock(home, store=store, settings=SETTINGS)
    other = sqlite3.connect(home / "ledger.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StorageError, match="locked"):
            app.start(definition(FLOW), topic="locked out")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []
    assert app.store.list_runs() == []
    app.close()


def test_a_full_disk_stops_appends_until_space_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With the ledger capped at its current size (SQLITE_FULL), appends fail; once the cap
    is lifted the run goes on and is delivered without a lost or doubled event."""
    store = SQLiteStore(tmp_path / "ledger.db")
    app = Interlock(tmp_path, store=store, settings=SETTINGS)
    flow = definition(BIG_FLOW)
    run_id = app.start(flow, topic="full")
    pages = store._read("PRAGMA page_count")[0][0]
    store._read(f"PRAGMA max_page_count = {pages}")

    def free_space() -> None:
        time.sleep(1.0)
        store._read("PRAGMA max_page_count = 1073741823")

    freer = threading.Thread(target=free_space)
    freer.start()
    with caplog.at_level(logging.ERROR, logger="interlock.runtime"):
        state = app.drive(run_id)
    freer.join()
    assert any("full" in r.getMessage() for r in caplog.records), "the disk never filled"
    assert state.status.value == "delivered"
    assert history_problems(app, run_id, flow) == []
    assert store.integrity_check() == "ok"
    app.close()


@pytest.mark.parametrize("fault", ["commit_ambiguous", "commit_failed"])
def test_commits_that_fail_or_succeed_unseen_record_each_event_once(
    tmp_path: Path, fault: str
) -> None:
    """Every third group commit fails, before writing or (ambiguously) after: the loop
    reloads from the ledger, every task still completes exactly once, is recorded as
    started before, and no worker runs again because a commit of its result failed."""
    store = SQLiteStore(tmp_path / "ledger.db")
    calls = {"n": 0}

    def every_third(point: str) -> bool:
        if point != fault:
            return False
        calls["n"] += 1
        return calls["n"] % 3 == 0

    faulty = FaultyStore(store, every_third)
    app = Interlock(tmp_path, store=faulty.as_store(), settings=SETTINGS)
    status, problems = _drive(app)
    assert calls["n"] >= 3
    assert status == "delivered"
    assert problems == []
    (run_id,) = [r.run_id for r in store.list_runs()]
    stored = store.events(run_id)
    started = {(e.data["task_id"], e.data["attempt"]) for e in stored if e.kind == "task_started"}
    completed = [
        (e.data["task_id"], e.data["attempt"]) for e in stored if e.kind == "task_completed"
    ]
    assert len(completed) == 4 and set(completed) <= started
    assert [n for (run, _, _), n in RAN.items() if run == run_id] == [1, 1, 1, 1]
    assert store.integrity_check() == "ok"
    app.close()


# -- a ledger that is gone, empty or damaged beside the runs it recorded ---------------------

OFFLINE_FLOW = """
p:
  phases:
    - id: one
      workers:
        - {role: w, model: any, final: true, task: "Write."}
"""


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    command = [sys.executable, "-m", "interlock", "--home", str(home), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _delivered_home(tmp_path: Path) -> tuple[Path, Path]:
    flow = tmp_path / "flow.yaml"
    flow.write_text(OFFLINE_FLOW)
    home = tmp_path / "home"
    done = _cli(home, "run", str(flow), "p", "-t", "first", "--run-id", "first-1")
    assert done.returncode == 0, done.stderr
    assert (home / "archive" / "first-1" / "final.md").is_file()
    return home, flow


@pytest.mark.parametrize("damage", ["empty", "missing"])
def test_an_empty_or_missing_ledger_beside_runs_is_refused(tmp_path: Path, damage: str) -> None:
    """A 0-byte (or deleted) ledger.db beside an archive of delivered runs is not taken as a
    new store: `run` exits 5 naming the file and what to do, and writes nothing into it."""
    home, flow = _delivered_home(tmp_path)
    ledger = home / "ledger.db"
    if damage == "empty":
        ledger.write_bytes(b"")
    else:
        ledger.unlink()
    again = _cli(home, "run", str(flow), "p", "-t", "second")
    assert again.returncode == 5, again.stdout + again.stderr
    assert str(ledger) in again.stderr and "holds run" in again.stderr
    assert "Traceback" not in again.stderr
    if damage == "empty":
        assert ledger.stat().st_size == 0
    else:
        assert not ledger.exists()


def _damage_an_index_page(ledger: Path) -> None:
    """Zero the first byte of the events index's root page: `quick_check` fails on it."""
    with sqlite3.connect(ledger) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
        ).fetchone()
    db.close()
    with open(ledger, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\x00")


@pytest.mark.parametrize("command", ["run", "rerun"])
def test_a_ledger_that_fails_its_check_refuses_writes_but_still_reads(
    tmp_path: Path, command: str
) -> None:
    """A byte flipped in a page of the ledger (an index page of the events): the check
    before the first write (`integrity_check` at this size, started early, beside the
    engine's imports) fails, so a new run is refused with exit 5 and a message pointing to
    `interlock doctor`, while `runs` still lists what was recorded. A rerun, which reads its source
    run first, is stopped by what SQLite says of the damaged page it reads."""
    home, flow = _delivered_home(tmp_path)
    ledger = home / "ledger.db"
    _damage_an_index_page(ledger)
    if command == "run":
        refused = _cli(home, "run", str(flow), "p", "-t", "second")
    else:
        refused = _cli(home, "rerun", "first-1", "--run-id", "second-1")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    said = "integrity check" if command == "run" else "malformed"
    assert said in refused.stderr and "interlock doctor" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = _cli(home, "runs")
    assert listed.returncode == 0 and "first-1" in listed.stdout, listed.stderr
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    db.close()


def test_the_check_started_ahead_is_the_one_the_first_write_obeys(tmp_path: Path) -> None:
    """`verify_ahead` runs the check on a thread of its own; the first write waits for it
    and is refused when it failed, as when the write makes the check itself. A check
    nobody asked for the answer of ends with the store: no thread is left reading."""
    home, _ = _delivered_home(tmp_path)
    ledger = home / "ledger.db"
    sound = SQLiteStore(ledger)
    sound.verify_ahead()
    sound.release_leases([])  # a write: it waits for the check, which passed
    assert sound.refusal is None and sound.check_seconds > 0.0
    sound.close()

    _damage_an_index_page(ledger)
    damaged = SQLiteStore(ledger)
    damaged.verify_ahead()
    assert damaged.get_run("first-1") is not None  # reads do not wait for the check
    with pytest.raises(StorageError, match="integrity check"):
        damaged.release_leases([])
    damaged.close()

    unasked = SQLiteStore(ledger)
    unasked.verify_ahead()
    unasked.close()
    assert not [t for t in threading.enumerate() if t.name == "interlock-check"]


def test_a_command_that_stops_before_writing_leaves_the_early_check_cleanly(
    tmp_path: Path,
) -> None:
    """`interlock run` of a file that does not parse, on an existing ledger: the check
    started early is stopped at exit; the error is the file's (exit 2), with no warning
    of a thread or a connection left behind, even with Python's warnings all on."""
    home, _ = _delivered_home(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("p:\n  phases: [\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    command = [sys.executable, "-X", "dev", "-m", "interlock", "--home", str(home)]
    done = subprocess.run(
        [*command, "run", str(broken), "p", "-t", "x"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert str(broken) in done.stderr
    assert "Warning" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_sound_ledger_is_checked_quickly_before_the_first_write(tmp_path: Path) -> None:
    """Opening reads nothing more than before; the first write runs `integrity_check`, cheap
    for a ledger of a few hundred runs (well under 0.2 s)."""
    store = SQLiteStore(tmp_path / "ledger.db")
    app = Interlock(tmp_path, store=store, settings=SETTINGS)
    flow = definition(OFFLINE_FLOW)
    app.orchestrator.create_runs([(flow, "t", None, None)] * 300)
    asyncio.run(app.orchestrator.run_until_settled())
    app.close()
    again = SQLiteStore(tmp_path / "ledger.db")
    assert again.check_seconds == 0.0
    again.release_leases([])
    assert again.refusal is None
    assert 0.0 < again.check_seconds < 0.2, again.check_seconds
    again.close()


# -- a real full disk: a small tmpfs mounted for the test ----------------------------------

FILL = """
import os, sys
open(sys.argv[1], "w").write("written before the disk filled\\n")
try:
    with open(sys.argv[2], "wb") as ballast:
        while True:
            ballast.write(b"x" * 65536)
            ballast.flush()
except OSError:
    pass
"""

FULL_FLOW = """
p:
  phases:
    - id: fill
      workers:
        - role: filler
          command: [{py}, {fill}, "{{output}}", {ballast}]
    - id: after
      workers:
        - {{role: last, model: any, final: true, reads: [filler.md], task: "Sum up."}}
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs mounted for the test and removed after it (needs root; without it the
    test fails rather than skips)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here (the test needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    with contextlib.suppress(OSError), open(path, "wb") as ballast:
        while True:
            ballast.write(b"x" * 65536)
            ballast.flush()


def test_a_full_disk_stops_the_run_resumably_and_reads_still_work(
    small_disk: Path, tmp_path: Path
) -> None:
    """A worker fills the disk holding the ledger: the append of its result fails with
    ENOSPC; the orchestrator backs off (a few log lines, not thousands), then exits 5 with
    "disk full: free space, then `interlock resume RUN`". `runs` and `status` still answer
    on the full disk, and once space is freed, `resume` delivers the run."""
    home, ballast = small_disk / "home", small_disk / "ballast"
    fill = tmp_path / "fill.py"
    fill.write_text(FILL)
    flow = tmp_path / "flow.yaml"
    quoted = {k: json.dumps(str(v)) for k, v in {"fill": fill, "ballast": ballast}.items()}
    flow.write_text(FULL_FLOW.format(py=json.dumps(sys.executable), **quoted))
    started = time.monotonic()
    stopped = _cli(home, "run", str(flow), "p", "-t", "full", "--run-id", "full-1")
    assert stopped.returncode == 5, stopped.stdout + stopped.stderr
    assert "disk full: free space, then `interlock resume full-1`" in stopped.stderr
    assert "ENOSPC" in stopped.stderr and "Traceback" not in stopped.stderr
    assert "see the message above" not in stopped.stderr
    assert len(stopped.stderr.splitlines()) < 40, stopped.stderr
    assert time.monotonic() - started < 60
    listed = _cli(home, "runs")
    assert listed.returncode == 0 and "full-1" in listed.stdout, listed.stderr
    status = _cli(home, "status", "full-1")
    assert status.returncode == 0 and "filler" in status.stdout, status.stderr
    ballast.unlink()
    resumed = _cli(home, "resume", "full-1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (home / "archive" / "full-1" / "final.md").stat().st_size > 0
    filler = (home / "archive" / "full-1" / "filler.md").read_text()
    assert filler == "written before the disk filled\n"


def test_a_run_started_on_a_full_disk_is_not_told_to_resume(
    small_disk: Path, tmp_path: Path
) -> None:
    """On a disk already full, `interlock run` records nothing and exits 5 saying the disk is
    full (ENOSPC), without suggesting a `resume` of a run that does not exist."""
    home = small_disk / "home"
    flow = tmp_path / "flow.yaml"
    flow.write_text(OFFLINE_FLOW)
    assert _cli(home, "runs").returncode == 0  # the ledger exists, the disk still has room
    _fill(small_disk / "ballast")
    refused = _cli(home, "run", str(flow), "p", "-t", "full")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "disk full" in refused.stderr and "ENOSPC" in refused.stderr
    assert "resume" not in refused.stderr and "Traceback" not in refused.stderr
    assert "see the message above" not in refused.stderr
