"""`interlock doctor`: is the ledger sound, and do the files on disk match what it recorded?

It checks SQLite's integrity (the full `integrity_check`, not only the quick one writers run),
every recorded output's SHA-256 against the file in `runs/` or `archive/`, each delivered run's
`final.md`, run directories that are missing, and directories the ledger does not know. For
each problem it says what to do. With `--repair`, outputs the ledger holds (up to 1 MiB each)
are written back, durably. It never writes into the ledger.

Exit codes: 0 sound; 6 files on disk do not match the ledger (or are missing); 5 the ledger
itself is missing, empty, damaged or cannot be opened; 2 there is nothing to check.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from interlock.cli.base import Ctx, handle_errors, out, pass_ctx
from interlock.errors import ExitCode, InterlockError

if TYPE_CHECKING:  # imported when the command runs: `interlock --help` imports this module
    from interlock.runtime.home import Home

APPLICATION_ID = 0x494E544C


@dataclass
class Findings:
    """What the checks found: problems with the ledger, problems with files, advice."""

    ledger: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    affected: set[str] = field(default_factory=set)  # runs touched by a problem
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: int = 0
    outputs: int = 0


@click.command()
@click.option("--home", "home_option", help="State directory (the same as the global --home).")
@click.option("--repair", is_flag=True, help="Write back outputs whose content the ledger holds.")
@pass_ctx
@handle_errors
def doctor(ctx: Ctx, home_option: str | None, repair: bool) -> None:
    """Check the ledger and every recorded output against the files on disk.

    Exit 0 when all is sound, 6 when files do not match the ledger, 5 when the ledger itself
    is missing, empty or damaged (with the steps to recover it), 2 when there is nothing here.
    """
    from interlock.runtime.home import Home

    home = Home.at(home_option or ctx.home)
    url = ctx.store_url
    found = Findings()
    if not url or url.startswith("sqlite:"):
        path = Path(url.removeprefix("sqlite://")) if url else home.root / "ledger.db"
        if not _check_sqlite_file(path, home.root, found):
            _report(found, path)
            return
        store_url = url or None
    else:
        store_url = url
        found.notes.append(
            "integrity: PostgreSQL keeps its own pages sound (see its amcheck extension); "
            "checked: the outputs and run directories"
        )
        path = None
    _check_runs(ctx, home, store_url, found, repair)
    _report(found, path)


def _check_sqlite_file(path: Path, state_dir: Path, found: Findings) -> bool:
    """The file itself: there, not empty, an interlock ledger, SQLite's integrity check.
    Whether its runs can be read on."""
    import sqlite3

    from interlock.storage.sqlite import holds_runs

    runs = holds_runs(state_dir)
    if not path.exists():
        if not runs:
            raise InterlockError(f"no ledger at {path} and no runs in {state_dir}: nothing to do")
        found.ledger.append(f"{path} is missing, but {state_dir} holds runs")
        found.affected |= _run_dirs(state_dir)
        return False
    if path.stat().st_size == 0:
        what = "but the state directory holds runs" if runs else "and no runs are recorded"
        found.ledger.append(f"{path} is empty (0 bytes), {what}")
        found.affected |= _run_dirs(state_dir)
        return False
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
        try:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            try:
                rows = [str(r[0]) for r in db.execute("PRAGMA integrity_check(20)").fetchall()]
            except sqlite3.DatabaseError as exc:  # a page too damaged to walk
                rows = [str(exc)]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        found.ledger.append(f"{path} cannot be read as a SQLite database: {exc}")
        found.affected |= _run_dirs(state_dir)
        return False
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise InterlockError(f"{path} is not an interlock ledger: nothing to check")
    if not tables:
        if runs:
            found.ledger.append(f"{path} holds no ledger tables, but {state_dir} holds runs")
            found.affected |= _run_dirs(state_dir)
            return False
        raise InterlockError(f"{path} holds no runs yet: nothing to check")
    if rows != ["ok"]:
        found.ledger.append(f"{path} fails SQLite's integrity check:")
        found.ledger += [f"  {row}" for row in rows]
    return True


def _check_runs(ctx: Ctx, home: Home, store_url: str | None, found: Findings, repair: bool) -> None:
    """Every run the ledger knows: its directory, its outputs, its final.md."""
    from interlock.core.state import fold
    from interlock.runtime.artifacts import digest, write_files
    from interlock.storage import open_store

    sqlite = not store_url or store_url.startswith("sqlite:")
    store = open_store(store_url, home.root, **({"verify": False} if sqlite else {}))
    known: set[str] = set()
    try:
        try:
            records = store.list_runs(limit=10**9)
        except InterlockError as exc:
            found.ledger.append(f"the list of runs cannot be read: {exc.message}")
            found.affected |= _run_dirs(home.root)
            return
        for record in records:
            run_id = record.run_id
            known.add(run_id)
            found.runs += 1
            try:
                state = fold([s.event for s in store.events(run_id)])
            except InterlockError as exc:
                found.ledger.append(f"run {run_id}: its history cannot be read ({exc.message})")
                found.affected.add(run_id)
                continue
            run_dir = home.run_dir(run_id)
            tasks = [t for t in state.tasks.values() if t.artifact and t.sha256]
            if not run_dir.is_dir():
                if tasks:
                    found.files.append(f"run {run_id}: its directory is missing ({run_dir})")
                    found.affected.add(run_id)
                continue
            expected = [(run_dir / str(t.artifact), str(t.sha256), t.size) for t in tasks]
            if state.delivered is not None:
                final = next((t for t in tasks if t.artifact == state.delivered), None)
                if final is not None:
                    expected.append((run_dir / "final.md", str(final.sha256), final.size))
            damaged: list[tuple[Path, str]] = []
            for file, sha, size in expected:
                found.outputs += 1
                if not file.is_file():
                    problem = "missing"
                else:
                    actual, actual_size = digest(file)
                    if actual == sha:
                        continue
                    problem = (
                        f"{actual_size} bytes, SHA-256 {actual[:12]}; recorded: {size} bytes, "
                        f"{sha[:12]}"
                    )
                found.files.append(f"run {run_id}: {file.name}: {problem}")
                found.affected.add(run_id)
                damaged.append((file, sha))
            if repair and damaged:
                writable = []
                for file, sha in damaged:
                    body = store.artifact(sha)
                    if body is not None:
                        writable.append((file, body))
                write_files(writable)
                found.repaired += [f"run {run_id}: {f.name}" for f, _ in writable]
    finally:
        store.close()
    for run_id in sorted(_run_dirs(home.root) - known):
        found.notes.append(f"{run_id}: a run directory the ledger does not know")


def _run_dirs(state_dir: Path) -> set[str]:
    names: set[str] = set()
    for folder in ("runs", "archive"):
        try:
            with os.scandir(state_dir / folder) as entries:
                names |= {e.name for e in entries if e.is_dir() and not e.name.startswith(".")}
        except OSError:
            continue
    return names


def _report(found: Findings, path: Path | None) -> None:
    """Print the findings with what to do, and exit with the matching code."""
    checked = f"{found.runs} runs, {found.outputs} outputs checked"
    for line in found.ledger:
        out.print(f"ledger: {line}")
    for line in found.files:
        out.print(f"files: {line}")
    for line in found.repaired:
        out.print(f"repaired: {line}")
    for line in found.notes:
        out.print(f"note: {line}")
    if found.ledger:
        out.print(f"\n{checked}.")
        if found.affected:
            names = sorted(found.affected)
            more = f" and {len(names) - 20} more" if len(names) > 20 else ""
            shown = ", ".join(names[:20]) + more
            out.print(f"affected runs ({len(names)}): {shown}")
        if path is not None:
            out.print("\nwhat to do:")
            for step in recovery_steps(path):
                out.print(f"  {step}")
        sys.exit(int(ExitCode.STORAGE))
    unrepaired = len(found.files) - len(found.repaired)
    if found.files and unrepaired > 0:
        out.print(f"\n{checked}; {len(found.files)} problem(s) with files.")
        out.print(
            "what to do: `interlock doctor --repair` writes back outputs the ledger holds (up to "
            "1 MiB each); `interlock resume RUN` repairs a run that has not ended; a large output "
            "that is lost must be produced again (start the run again)"
        )
        sys.exit(int(ExitCode.NOT_VERIFIED))
    out.print(f"ok: {checked}" + (f", {len(found.repaired)} repaired" if found.repaired else ""))


def recovery_steps(path: Path) -> list[str]:
    """The steps that recover a damaged SQLite ledger into a new file, with exact commands
    (or, when the file is gone, what can and cannot be had back)."""
    if not path.exists():
        folder = path.parent
        return [
            "1. stop every interlock process that uses this state directory",
            f"2. put the ledger back from a copy if there is one (a backup, the trash): {path}, "
            f"with its {path.name}-wal beside it if that was kept too",
            "3. check it: interlock doctor",
            "without it, the runs' histories are gone: no run can be resumed or rerun from "
            f"them, but their outputs stay in {folder}/runs and {folder}/archive; a new "
            "ledger is made by the next 'interlock run' only once those folders are moved away",
        ]
    version = 0
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
        if len(header) == 100:
            version = int.from_bytes(header[60:64], "big")
    except OSError:
        pass
    folder, name = path.parent, path.name
    recovered = folder / f"{path.stem}.recovered{path.suffix}"
    sql = folder / f"{path.stem}.recovered.sql"
    return [
        "1. stop every interlock process that uses this state directory",
        f"2. keep a copy of the ledger and its companions: cp -p {folder}/{name}* /a/safe/place/",
        "3. recover what SQLite can read into a new file (`.recover` salvages the most; "
        f"`.dump` where it stops with an error): (sqlite3 {path} .recover > {sql} || "
        f"sqlite3 {path} .dump > {sql}) && sqlite3 {recovered} < {sql}",
        f'4. mark it as a ledger: sqlite3 {recovered} "PRAGMA user_version = {version}; '
        f'PRAGMA application_id = {APPLICATION_ID}"',
        f"5. check it: interlock --store sqlite://{recovered} doctor",
        f"6. put it in place: mv {path} {folder}/{path.stem}.damaged{path.suffix} && "
        f"mv {recovered} {path}",
        "7. resume the runs that had not ended (`interlock runs --status running`); a run "
        "missing from the recovered ledger cannot be resumed: start it again",
    ]


COMMANDS = [doctor]
