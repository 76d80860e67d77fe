"""A run whose recorded history cannot be read, a ledger with flipped bits, a ledger changed
by hand: every command exits 5 naming the run, the event and what to do (never 70), the
other runs keep working, `doctor` says which side is wrong, and its recovery works on the
SQLite this machine has."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

FLOW = """
p:
  phases:
    - id: one
      workers:
        - {role: w, model: any, task: "Write."}
    - id: two
      workers:
        - {role: s, model: any, final: true, reads: [w.md], task: "Sum up."}
w:
  phases:
    - id: one
      wait_for: {signal: go}
      workers:
        - {role: w, model: any, final: true, task: "Write."}
"""


def _cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    command = [sys.executable, "-m", "interlock", "--home", str(home), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def _home(tmp_path: Path, runs: int = 2) -> Path:
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    for n in range(1, runs + 1):
        done = _cli(home, "run", str(flow), "p", "-t", f"t{n}", "--run-id", f"r-{n}")
        assert done.returncode == 0, done.stderr
    return home


def _waiting(tmp_path: Path, home: Path, run_id: str) -> None:
    """A run of `w` left waiting for its signal: its foreground driver stopped by SIGTERM
    once the wait is recorded (the run stays resumable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    flow = tmp_path / "flow.yaml"
    command = [sys.executable, "-m", "interlock", "--home", str(home), "run", str(flow), "w"]
    driver = subprocess.Popen(
        [*command, "-t", "x", "--run-id", run_id],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "wait_started" not in _events(home, run_id):
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.1)
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=60)


def _events(home: Path, run_id: str) -> list[str]:
    if not (home / "ledger.db").exists():
        return []
    try:
        with sqlite3.connect(home / "ledger.db") as db:
            rows = db.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
            kinds = [str(k) for (k,) in rows]
        db.close()
    except sqlite3.OperationalError:  # its tables are not made yet, or it is locked
        return []
    return kinds


def _edit(home: Path, run_id: str, seq: int, old: str, new: str) -> None:
    """Change the stored JSON of one event, as a damaged page or a hand edit would."""
    with sqlite3.connect(home / "ledger.db") as db:
        changed = db.execute(
            "UPDATE events SET data = replace(data, ?, ?) WHERE run_id = ? AND seq = ?",
            (old, new, run_id, seq),
        ).rowcount
    db.close()
    assert changed == 1


def _page_of(ledger: Path, name: str) -> tuple[int, int]:
    with sqlite3.connect(ledger) as db:
        size = db.execute("PRAGMA page_size").fetchone()[0]
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)
        ).fetchone()
    db.close()
    return int(size), int(root)


def test_an_event_that_cannot_be_decoded_is_exit_5_naming_the_run_and_the_event(
    tmp_path: Path,
) -> None:
    """An unknown field in event 3 of r-1: events, ledger, rerun --dry-run, resume and
    doctor exit 5 naming r-1 and event 3 with what to do; r-2 is read as before."""
    home = _home(tmp_path)
    _edit(home, "r-1", 3, '"phase":"one"', '"phasx":"one"')
    for command in (["events", "r-1"], ["ledger", "r-1"], ["rerun", "r-1", "--dry-run"]):
        done = _cli(home, *command)
        assert done.returncode == 5, (command, done.stdout, done.stderr)
        assert "internal error" not in done.stderr
        assert "run r-1: its history cannot be read at event 3 (phase_started)" in done.stderr
        assert "interlock verify r-1" in done.stderr and "interlock doctor" in done.stderr
    resumed = _cli(home, "resume", "r-1")
    assert resumed.returncode == 5 and "at event 3" in resumed.stderr, resumed.stderr
    assert _cli(home, "events", "r-2").returncode == 0
    checked = _cli(home, "doctor")
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert "run r-1: the ledger is wrong at event 3" in checked.stdout
    assert "affected runs (1): r-1" in checked.stdout


def test_event_data_that_is_not_json_is_exit_5(tmp_path: Path) -> None:
    """Event 4 of r-1 holding text that is not JSON: `events` and `doctor` exit 5 naming
    it, not an internal error."""
    home = _home(tmp_path)
    _edit(home, "r-1", 4, '"task_id"', '"task_id\x01')
    shown = _cli(home, "events", "r-1")
    assert shown.returncode == 5, shown.stderr
    assert "at event 4 (task_dispatched): its data is not JSON" in shown.stderr
    checked = _cli(home, "doctor")
    assert checked.returncode == 5 and "run r-1" in checked.stdout, checked.stdout


def test_random_bit_flips_never_give_an_internal_error(tmp_path: Path) -> None:
    """Bits flipped at random (seeded) over a ledger of six runs: doctor, runs, events,
    ledger and explain exit 0, 5 or 6, never 70 and never a traceback."""
    clean = _home(tmp_path, runs=6)
    ledger = (clean / "ledger.db").read_bytes()
    for seed in range(4):
        rnd = random.Random(seed)
        home = tmp_path / f"flip-{seed}"
        shutil.copytree(clean, home)
        data = bytearray(ledger)
        for _ in range(rnd.choice([3, 10, 50])):
            data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        (home / "ledger.db").write_bytes(bytes(data))
        for command in (["doctor"], ["runs"], ["events", "r-3"], ["ledger", "r-4"]):
            done = _cli(home, *command)
            said = done.stdout + done.stderr
            assert done.returncode in (0, 5, 6), (seed, command, said)
            assert "internal error" not in said and "Traceback" not in said, (seed, command)


def test_doctor_recovers_a_ledger_with_a_damaged_table_page(tmp_path: Path) -> None:
    """A leaf page of the events table overwritten: doctor exits 5 with the steps; doing
    them as printed gives a ledger that opens, passes integrity_check and holds every event
    that could be read (doctor says how many, and names the runs that lost some); the
    recovered ledger takes new runs."""
    home = _home(tmp_path, runs=10)
    ledger = home / "ledger.db"
    size, root = _page_of(ledger, "events")
    data = bytearray(ledger.read_bytes())
    interior = data[(root - 1) * size : root * size]
    assert interior[0] == 5  # an interior page: its children are the leaves
    cells = int.from_bytes(interior[3:5], "big")
    pointers = [int.from_bytes(interior[12 + 2 * i : 14 + 2 * i], "big") for i in range(cells)]
    leaves = [int.from_bytes(interior[p : p + 4], "big") for p in pointers]
    victim = leaves[len(leaves) // 2]
    data[(victim - 1) * size : (victim - 1) * size + 8] = b"\x0d" + b"\xff" * 7
    ledger.write_bytes(bytes(data))
    checked = _cli(home, "doctor")
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert "fails SQLite's integrity check" in checked.stdout
    steps = {
        line.strip()[:2]: line.strip().split(": ", 1)[1]
        for line in checked.stdout.splitlines()
        if line.strip()[:2] in ("3.", "4.", "5.")
    }
    interlock = f"{sys.executable} -m interlock"
    recovered = _shell(steps["3."].replace("interlock", interlock, 1))
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    copy = home / "ledger.recovered.db"
    with sqlite3.connect(copy) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        events = db.execute("SELECT count(*) FROM events").fetchone()[0]
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 10
    db.close()
    assert 100 < events < 150  # a page of events is lost; the others are all there
    assert f"{events} events of 10 runs (their records count 150: {150 - events} lost)" in (
        recovered.stdout
    )
    looked = _shell(steps["4."].replace("interlock", interlock, 1))
    assert looked.returncode == 5, looked.stdout
    assert "the ledger is wrong at event" in looked.stdout and "are missing" in looked.stdout
    assert _shell(steps["5."]).returncode == 0
    assert not copy.exists()
    flow = tmp_path / "flow.yaml"
    assert _cli(home, "run", str(flow), "p", "-t", "after").returncode == 0


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env)


def test_a_flipped_index_bit_that_quick_check_misses_refuses_new_runs_and_resumes(
    tmp_path: Path,
) -> None:
    """One bit of an events index entry flipped (SQLite's quick_check passes it, the full
    integrity_check does not): a new run and a resume are refused with exit 5, reads go on."""
    home = _home(tmp_path, runs=1)
    _waiting(tmp_path, home, "wr")
    ledger = home / "ledger.db"
    size, root = _page_of(ledger, "sqlite_autoindex_events_1")
    data = bytearray(ledger.read_bytes())
    page = (root - 1) * size
    header = 12 if data[page] in (2, 5) else 8
    cell = int.from_bytes(data[page + header : page + header + 2], "big")
    data[page + cell + 6] ^= 0x01
    ledger.write_bytes(bytes(data))
    with sqlite3.connect(ledger) as db:
        assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA integrity_check").fetchone()[0] != "ok"
    db.close()
    flow = tmp_path / "flow.yaml"
    started = _cli(home, "run", str(flow), "p", "-t", "new")
    assert started.returncode == 5, started.stdout + started.stderr
    assert "fails SQLite's integrity check" in started.stderr
    resumed = _cli(home, "resume", "wr", timeout=60)
    assert resumed.returncode == 5, resumed.stdout + resumed.stderr
    assert _cli(home, "runs").returncode == 0
    assert _cli(home, "doctor").returncode == 5


def test_doctor_says_the_ledger_is_wrong_when_its_chain_breaks_and_the_file_when_it_holds(
    tmp_path: Path,
) -> None:
    """The recorded hash of r-1's first output changed in the ledger: doctor and --repair
    exit 5 saying the ledger is wrong at event 6 and write nothing (no "start the run
    again"); a file changed on disk with the chain intact is the file's fault (exit 6)."""
    home = _home(tmp_path)
    before = (home / "archive" / "r-1" / "w.md").read_bytes()
    with sqlite3.connect(home / "ledger.db") as db:
        (data,) = db.execute("SELECT data FROM events WHERE run_id = 'r-1' AND seq = 6").fetchone()
        assert '"sha256":"' in data
        sha = data.split('"sha256":"')[1][:64]
        db.execute(
            "UPDATE events SET data = replace(data, ?, ?) WHERE run_id = 'r-1' AND seq = 6",
            (sha, "0" * 64),
        )
    db.close()
    for repair in ([], ["--repair"]):
        checked = _cli(home, "doctor", *repair)
        assert checked.returncode == 5, checked.stdout + checked.stderr
        assert "run r-1: the ledger is wrong at event 6" in checked.stdout
        assert "start the run again" not in checked.stdout
        assert "files: run r-1" not in checked.stdout
    assert (home / "archive" / "r-1" / "w.md").read_bytes() == before
    assert not (home / "archive" / "r-1" / "w.md.unrecorded").exists()
    (home / "archive" / "r-2" / "w.md").write_text("changed by hand\n")
    with sqlite3.connect(home / "ledger.db") as db:
        db.execute(
            "UPDATE events SET data = replace(data, ?, ?) WHERE run_id = 'r-1'", ("0" * 64, sha)
        )
    db.close()
    checked = _cli(home, "doctor")
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert "files: run r-2: w.md" in checked.stdout
    assert "the runs' hash chains hold" in checked.stdout


@pytest.mark.parametrize("damage", ["far-future wait", "unknown field"])
def test_one_unreadable_run_breaks_no_command_about_the_others(tmp_path: Path, damage: str) -> None:
    """A waiting run whose wait ends in a billion days, or whose history cannot be decoded:
    `runs` lists every run (the second marked unreadable, with why), `status` and `events`
    of the others answer, doctor does not stop at it."""
    home = _home(tmp_path, runs=1)
    _waiting(tmp_path, home, "wr")
    seq = _events(home, "wr").index("wait_started") + 1
    if damage == "far-future wait":
        _edit(home, "wr", seq, '"until":null', '"until":86401796172295.27')
    else:
        _edit(home, "wr", seq, '"gate"', '"gatex"')
    listed = _cli(home, "runs")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "r-1" in listed.stdout and "wr" in listed.stdout
    if damage == "far-future wait":
        assert "after 9999-12-31" in listed.stdout
        status = _cli(home, "status", "wr", "--json")
        assert status.returncode == 0, status.stderr
        shown = _cli(home, "events", "wr")
        assert shown.returncode == 0 and "until=after 9999-12-31" in shown.stdout, shown.stderr
    else:
        assert "unreadable" in listed.stdout
        assert "run wr: its history cannot be read at event" in listed.stdout
        assert _cli(home, "runs", "--json").returncode == 0
    assert _cli(home, "status", "r-1").returncode == 0
    assert _cli(home, "events", "r-1").returncode == 0
    checked = _cli(home, "doctor")
    assert "internal error" not in checked.stderr
    assert checked.returncode in (0, 5), checked.stdout


def test_damage_in_an_index_only_is_repaired_by_reindex(tmp_path: Path) -> None:
    """One bit of an events index entry flipped: doctor exits 5 pointing to `--repair`, which
    keeps a copy of the file, rebuilds the indexes and exits 0; the ledger then takes runs."""
    home = _home(tmp_path)
    ledger = home / "ledger.db"
    size, root = _page_of(ledger, "sqlite_autoindex_events_1")
    data = bytearray(ledger.read_bytes())
    page = (root - 1) * size
    header = 12 if data[page] in (2, 5) else 8
    cell = int.from_bytes(data[page + header : page + header + 2], "big")
    data[page + cell + 6] ^= 0x01
    ledger.write_bytes(bytes(data))
    checked = _cli(home, "doctor")
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert "missing from index sqlite_autoindex_events_1" in checked.stdout
    assert "only indexes are damaged" in checked.stdout and "doctor --repair" in checked.stdout
    repaired = _cli(home, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "its indexes were rebuilt (REINDEX)" in repaired.stdout
    assert (home / "ledger.before-reindex.db").read_bytes() == bytes(data)
    assert _cli(home, "doctor").returncode == 0
    flow = tmp_path / "flow.yaml"
    assert _cli(home, "run", str(flow), "p", "-t", "after").returncode == 0


def test_a_run_with_an_undecodable_kind_is_refused_by_status_and_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Event 5 of r-1 renamed to an unknown kind: `status` exits 5 naming the event (its
    status.json is no excuse), `export` exits 5 and writes nothing, and `verify` of a bundle
    holding that event (as an export that did not check made it) exits 6 about the bundle."""
    home = _home(tmp_path)
    with sqlite3.connect(home / "ledger.db") as db:
        (kind,) = db.execute("SELECT kind FROM events WHERE run_id = 'r-1' AND seq = 5").fetchone()
        db.execute("UPDATE events SET kind = 'x' || kind WHERE run_id = 'r-1' AND seq = 5")
    db.close()
    shown = _cli(home, "status", "r-1")
    assert shown.returncode == 5, shown.stdout + shown.stderr
    assert f"run r-1: its history cannot be read at event 5 (x{kind})" in shown.stderr
    assert _cli(home, "status", "r-2").returncode == 0
    target = tmp_path / "r-1.tgz"
    exported = _cli(home, "export", "r-1", "-o", str(target))
    assert exported.returncode == 5, exported.stdout + exported.stderr
    assert "r-1" in exported.stderr and "event 5" in exported.stderr
    assert not target.exists()
    from interlock.runtime import bundle
    from interlock.runtime.home import Home
    from interlock.storage.sqlite import SQLiteStore

    monkeypatch.setattr(bundle, "_check_exportable", lambda run_id, events: None)
    store = SQLiteStore(home / "ledger.db", state_dir=home)
    try:
        bundle.export_run(store, Home.at(home), "r-1", target)
    finally:
        store.close()
    checked = _cli(home, "verify", str(target))
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert f"{target}: the bundle fails verification: events.jsonl line 5" in checked.stderr
    assert "interlock verify r-1" not in checked.stderr
