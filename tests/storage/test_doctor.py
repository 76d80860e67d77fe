"""`interlock doctor`: the ledger's integrity, every recorded output against the files on
disk, and what to do, with exit codes; on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
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
"""


def _cli(home: Path, *args: str, store: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    extra = ["--store", store] if store else []
    command = [sys.executable, "-m", "interlock", "--home", str(home), *extra, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _home(tmp_path: Path, store: str | None = None) -> Path:
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    for n in (1, 2):
        done = _cli(home, "run", str(flow), "p", "-t", f"t{n}", "--run-id", f"r-{n}", store=store)
        assert done.returncode == 0, done.stderr
    return home


def test_a_sound_state_directory_is_ok(tmp_path: Path) -> None:
    """Two delivered runs: every output and final.md matches the ledger; exit 0."""
    home = _home(tmp_path)
    checked = _cli(home, "doctor")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok: 2 runs, 6 outputs checked" in checked.stdout


def test_damaged_and_missing_files_are_named_and_repaired(tmp_path: Path) -> None:
    """An output emptied, a final.md changed and a run directory removed: exit 6 naming each;
    `--repair` writes back the outputs the ledger holds (the changed final.md kept aside) and
    makes the removed archived run's directory again where it belongs."""
    home = _home(tmp_path)
    (home / "archive" / "r-1" / "w.md").write_bytes(b"")
    (home / "archive" / "r-1" / "final.md").write_text("edited\n")
    shutil.rmtree(home / "archive" / "r-2")
    checked = _cli(home, "doctor")
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert "run r-1: w.md: 0 bytes" in checked.stdout
    assert "run r-1: final.md" in checked.stdout
    assert "run r-2: its directory is missing" in checked.stdout
    assert f"its directory is missing ({home / 'archive' / 'r-2'})" in checked.stdout
    repaired = _cli(home, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert (home / "archive" / "r-1" / "w.md").stat().st_size > 0
    assert (home / "archive" / "r-1" / "final.md.unrecorded").read_text() == "edited\n"
    assert (home / "archive" / "r-2" / "final.md").is_file()
    assert _cli(home, "doctor").returncode == 0
    shutil.rmtree(home / "archive" / "r-2")
    shutil.copytree(home / "archive" / "r-1", home / "archive" / "r-2")  # not r-2's files
    again = _cli(home, "doctor")
    assert again.returncode == 6 and "r-1" not in again.stdout, again.stdout
    assert "run r-2: s.md" in again.stdout


def test_an_empty_ledger_names_the_affected_runs(tmp_path: Path) -> None:
    """A 0-byte ledger.db beside two archived runs: exit 5, the runs named, recovery steps."""
    home = _home(tmp_path)
    (home / "ledger.db").write_bytes(b"")
    checked = _cli(home, "doctor")
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert "is empty (0 bytes)" in checked.stdout
    assert "affected runs (2): r-1, r-2" in checked.stdout
    assert (home / "ledger.db").stat().st_size == 0  # doctor writes nothing into it


def test_a_deleted_ledger_is_said_by_runs_and_doctor_without_recovery_commands(
    tmp_path: Path,
) -> None:
    """ledger.db deleted beside two archived runs: `runs` does not say "no runs yet" but
    exit 5 naming the missing ledger; `doctor` names the runs and says to put the file back
    (no `.recover` commands run on a file that is not there); nothing is created."""
    home = _home(tmp_path)
    for leftover in home.glob("ledger.db*"):
        leftover.unlink()
    listed = _cli(home, "runs")
    assert listed.returncode == 5, listed.stdout + listed.stderr
    assert "no runs yet" not in listed.stdout
    assert f"no ledger at {home / 'ledger.db'}, but {home} holds run folders" in listed.stderr
    for command in (["status", "r-1"], ["events", "r-1"], ["resume", "r-1"], ["verify", "r-1"]):
        same = _cli(home, *command)
        assert same.returncode == 5, (command, same.stderr)
        assert same.stderr == listed.stderr, command  # one answer, word for word
    checked = _cli(home, "doctor")
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert "affected runs (2): r-1, r-2" in checked.stdout
    assert "put the ledger back from a copy" in checked.stdout
    assert ".recover" not in checked.stdout and "user_version" not in checked.stdout
    assert not list(home.glob("ledger.db*"))


def test_a_ledger_made_between_the_two_looks_is_not_taken_for_a_lost_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`interlock runs` while another process starts the first run: the ledger is not there
    at the first look, and the run's folder is by the second (that process made the ledger
    between them, then the folder). The ledger is looked for again, so the reader goes on
    instead of saying it was deleted; with no ledger still, it is said lost."""
    from interlock.storage import sqlite as ledger_module

    home = tmp_path / "home"
    (home / "runs" / "r-1").mkdir(parents=True)
    ledger = home / "ledger.db"
    real = ledger_module.holds_runs

    def made_meanwhile(state_dir: Path) -> bool:
        ledger.touch()  # the other process's ledger, made before its run folder
        return real(state_dir)

    monkeypatch.setattr(ledger_module, "holds_runs", made_meanwhile)
    assert not ledger_module.ledger_lost(ledger, home)
    ledger.unlink()
    monkeypatch.setattr(ledger_module, "holds_runs", real)
    assert ledger_module.ledger_lost(ledger, home)


def test_a_damaged_ledger_is_reported_and_its_recovery_steps_work(tmp_path: Path) -> None:
    """A byte flipped in an index page: exit 5 with SQLite's findings and the steps; doing
    steps 3 to 5 as printed gives a ledger that doctor finds sound and that takes new runs."""
    home = _home(tmp_path)
    ledger = home / "ledger.db"
    with sqlite3.connect(ledger) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
        ).fetchone()
    db.close()
    with open(ledger, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\x00")
    checked = _cli(home, "doctor")
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert "fails SQLite's integrity check" in checked.stdout
    assert "doctor --recover" in checked.stdout
    steps = [
        line.strip()
        for line in checked.stdout.splitlines()
        if line.strip()[:2] in ("3.", "4.", "5.")
    ]
    assert len(steps) == 3
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    for step in steps:
        command = step.split(": ", 1)[1].replace("interlock ", f"{sys.executable} -m interlock ", 1)
        shell = ["bash", "-c", command]  # the steps are shell lines, as a person would paste them
        done = subprocess.run(shell, capture_output=True, text=True, check=False, env=env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if step.startswith("3."):  # an index page only: every event is recovered
            assert "30 events of 2 runs (their records count 30: 0 lost)" in done.stdout
    recovered = _cli(home, "doctor")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    flow = tmp_path / "flow.yaml"
    assert _cli(home, "run", str(flow), "p", "-t", "after").returncode == 0


def test_doctor_checks_outputs_of_a_postgresql_store(tmp_path: Path, pg_database: str) -> None:
    """With the ledger in PostgreSQL: outputs are checked against the files the same way, and
    the integrity of the database is left to PostgreSQL (said so)."""
    home = _home(tmp_path, store=pg_database)
    (home / "archive" / "r-2" / "s.md").write_text("changed\n")
    checked = _cli(home, "doctor", store=pg_database)
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert "run r-2: s.md" in checked.stdout and "PostgreSQL" in checked.stdout


def _schema_pages(ledger: Path) -> list[int]:
    """The pages below page 1 that hold the schema (sqlite_master is an interior page here)."""
    import struct

    data = ledger.read_bytes()
    assert data[100] == 0x05, "the schema fits in page 1: no child page to damage"
    count = struct.unpack(">H", data[103:105])[0]
    cells = [struct.unpack(">H", data[112 + 2 * i : 114 + 2 * i])[0] for i in range(count)]
    children = [struct.unpack(">I", data[c : c + 4])[0] for c in cells]
    return [*children, struct.unpack(">I", data[108:112])[0]]


def test_recover_of_a_ledger_whose_schema_is_unreadable_says_nothing_was_recovered(
    tmp_path: Path,
) -> None:
    """A byte flipped at the start of a schema page: `doctor --recover` exits 5 saying nothing
    could be recovered, suggests no `mv` into place and leaves no empty ledger behind."""
    home = _home(tmp_path)
    ledger = home / "ledger.db"
    with sqlite3.connect(ledger) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    offset = (_schema_pages(ledger)[0] - 1) * page_size
    with open(ledger, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    assert _cli(home, "doctor").returncode == 5
    recovered = _cli(home, "doctor", "--recover")
    assert recovered.returncode == 5, recovered.stdout + recovered.stderr
    assert "nothing could be recovered: the schema is unreadable" in recovered.stdout
    assert "runs with a folder on disk that are not in it (2): r-1, r-2" in recovered.stdout
    assert "put it in place" not in recovered.stdout and "mv " not in recovered.stdout
    assert not (home / "ledger.recovered.db").exists()


def test_recover_that_misses_runs_on_disk_is_not_put_in_place(tmp_path: Path) -> None:
    """A run folder on disk that the recovered ledger lacks: `--recover` names it, exits 5 and
    does not suggest putting the new file in place."""
    home = _home(tmp_path)
    shutil.copytree(home / "archive" / "r-1", home / "archive" / "r-gone")
    recovered = _cli(home, "doctor", "--recover")
    assert recovered.returncode == 5, recovered.stdout + recovered.stderr
    assert "30 events of 2 runs" in recovered.stdout
    assert "not in it (1): r-gone" in recovered.stdout
    assert "it is not put in place" in recovered.stdout
    assert "put it in place: mv" not in recovered.stdout
