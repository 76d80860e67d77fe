"""`interlock doctor`: is the ledger sound, and do the files on disk match what it recorded?

It checks SQLite's integrity (the full `integrity_check`, not only the quick one writers run),
every recorded output's SHA-256 against the file in `runs/` or `archive/`, each delivered run's
`final.md`, run directories that are missing, and directories the ledger does not know. For
each problem it says what to do. With `--repair`, outputs the ledger holds (up to 1 MiB each)
are written back, durably, into the folder where the run lives (made again if it is gone, with
status.json for a run that ended); a file changed by hand is first moved aside to
NAME.unrecorded, as `resume` does, so that no one's change is lost; each file it cannot write
back is named with the reason. It writes into the ledger only to rebuild its indexes when
SQLite's check finds nothing else wrong (`REINDEX`, after keeping a copy of the file).

Exit codes: 0 sound; 6 files on disk do not match the ledger (or are missing); 5 the ledger
itself is missing, empty, damaged or cannot be opened; 2 there is nothing to check.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from interlock.cli.base import Ctx, handle_errors, out, pass_ctx
from interlock.errors import ExitCode, InterlockError, StorageError

APPLICATION_ID = 0x494E544C

if TYPE_CHECKING:  # imported when the command runs: `interlock --help` imports this module
    from interlock.core.state import RunState
    from interlock.runtime.home import Home
    from interlock.storage.base import RunRecord, Store


@dataclass
class Findings:
    """What the checks found: problems with the ledger, problems with files, advice."""

    ledger: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    affected: set[str] = field(default_factory=set)  # runs touched by a problem
    repaired: list[str] = field(default_factory=list)
    written: int = 0  # files written back
    not_repaired: list[str] = field(default_factory=list)  # with the reason for each
    notes: list[str] = field(default_factory=list)
    changed: dict[str, int] = field(default_factory=dict)  # run -> first event the chain refutes
    sqlite_damaged: bool = False  # SQLite's own check failed (else the file is sound)
    index_only: bool = False  # ...and every line it gave is about an index
    runs: int = 0
    outputs: int = 0
    state_dir: Path | None = None  # the state directory checked


@click.command()
@click.option("--home", "home_option", help="State directory (the same as the global --home).")
@click.option("--repair", is_flag=True, help="Write back outputs whose content the ledger holds.")
@click.option(
    "--recover",
    is_flag=True,
    help="Copy every readable row of a damaged SQLite ledger into LEDGER.recovered.db.",
)
@pass_ctx
@handle_errors
def doctor(ctx: Ctx, home_option: str | None, repair: bool, recover: bool) -> None:
    """Check the ledger and every recorded output against the files on disk.

    Exit 0 when all is sound, 6 when files do not match the ledger, 5 when the ledger itself
    is missing, empty or damaged (with the steps to recover it), 2 when there is nothing here.
    """
    from interlock.runtime.home import Home

    home = Home.at(home_option or ctx.home)
    url = ctx.store_url
    found = Findings(state_dir=home.root)
    if recover:
        if url and not url.startswith("sqlite:"):
            raise InterlockError("--recover is for a SQLite ledger: PostgreSQL has its own tools")
        _recover(Path(url.removeprefix("sqlite://")) if url else home.root / "ledger.db", home)
        return
    if not url or url.startswith("sqlite:"):
        path = Path(url.removeprefix("sqlite://")) if url else home.root / "ledger.db"
        if not _check_sqlite_file(path, home.root, found):
            _report(found, path)
            return
        if found.index_only and repair:
            _reindex(path, home.root, found)
        store_url = url or None
    else:
        store_url = url
        found.notes.append(
            "integrity: PostgreSQL keeps its own pages sound (see its amcheck extension); "
            "checked: the outputs and run directories"
        )
        path = None
    _check_runs(ctx, home, store_url, found, repair)
    _report(found, path, repair)


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
        found.sqlite_damaged = True
        return False
    if path.stat().st_size == 0:
        what = "but the state directory holds runs" if runs else "and no runs are recorded"
        found.ledger.append(f"{path} is empty (0 bytes), {what}")
        found.affected |= _run_dirs(state_dir)
        found.sqlite_damaged = True
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
        found.sqlite_damaged = True
        return False
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise InterlockError(f"{path} is not an interlock ledger: nothing to check")
    if not tables:
        if runs:
            found.ledger.append(f"{path} holds no ledger tables, but {state_dir} holds runs")
            found.affected |= _run_dirs(state_dir)
            found.sqlite_damaged = True
            return False
        raise InterlockError(f"{path} holds no runs yet: nothing to check")
    if rows != ["ok"]:
        found.sqlite_damaged = True
        found.index_only = all(_INDEX_LINE.match(row) for row in rows)
        found.ledger.append(f"{path} fails SQLite's integrity check:")
        found.ledger += [f"  {row}" for row in rows]
    return True


# What integrity_check says of an index that disagrees with its table (the rows are sound).
_INDEX_LINE = re.compile(r"^(row \d+ missing from index \S+|wrong # of entries in index \S+)$")


def _reindex(path: Path, state_dir: Path, found: Findings) -> None:
    """Rebuild the indexes of a ledger whose only damage is in them, after keeping a copy of
    the file (with its -wal) beside it; then SQLite's check again."""
    import shutil
    import sqlite3

    kept = path.with_name(f"{path.stem}.before-reindex{path.suffix}")
    if kept.exists():
        found.not_repaired.append(f"indexes not rebuilt: {kept} exists: move it away first")
        return
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=10, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")  # no writer in between the copy and the rebuild
            shutil.copy2(path, kept)
            wal = Path(f"{path}-wal")
            if wal.exists():
                shutil.copy2(wal, Path(f"{kept}-wal"))
            db.execute("REINDEX")
            db.execute("COMMIT")
            rows = [str(r[0]) for r in db.execute("PRAGMA integrity_check(20)").fetchall()]
        finally:
            db.close()
    except (OSError, sqlite3.DatabaseError) as exc:
        found.not_repaired.append(f"indexes not rebuilt: {exc}")
        return
    if rows != ["ok"]:
        found.ledger.append("after REINDEX, SQLite's integrity check still fails:")
        found.ledger += [f"  {row}" for row in rows]
        found.index_only = False
        return
    found.ledger.clear()  # it held SQLite's findings only: the runs are checked after this
    found.sqlite_damaged = found.index_only = False
    found.repaired.append(
        f"ledger: its indexes were rebuilt (REINDEX) and it passes SQLite's integrity check; "
        f"the file as it was is kept as {kept}"
    )


def _check_runs(ctx: Ctx, home: Home, store_url: str | None, found: Findings, repair: bool) -> None:
    """Every run the ledger knows: its directory, its outputs, its final.md."""
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
            found.sqlite_damaged = True
            return
        for record in records:
            known.add(record.run_id)
            found.runs += 1
            try:
                _check_one(store, home, record, found, repair)
            except Exception as exc:  # one run's damage never stops the others
                message = exc.message if isinstance(exc, InterlockError) else repr(exc)
                found.ledger.append(f"run {record.run_id}: cannot be checked ({message})")
                found.affected.add(record.run_id)
    finally:
        store.close()
    for run_id in sorted(_run_dirs(home.root) - known):
        found.notes.append(f"{run_id}: a run directory the ledger does not know")


def _check_one(store: Store, home: Home, record: RunRecord, found: Findings, repair: bool) -> None:
    """One run: its hash chain first (which side is wrong), its history, then its files."""
    from interlock.storage.base import fold_history
    from interlock.storage.chain import verify_events

    run_id = record.run_id
    try:
        stored = store.events(run_id)
    except InterlockError as exc:
        found.ledger.append(f"run {run_id}: its history cannot be read ({exc.message})")
        found.affected.add(run_id)
        return
    chain = verify_events(stored)
    if chain.ok and stored and stored[-1].seq < record.last_seq:
        # The run's record counts more events than the history holds: its end was lost.
        seq = stored[-1].seq + 1
        chain = replace(
            chain, first_bad=seq, problem=f"events {seq} to {record.last_seq} are missing"
        )
    if not chain.ok:
        # The chain was computed when each event was recorded: an event that no longer
        # matches it was changed in the ledger afterwards, whatever the files say.
        found.changed[run_id] = int(chain.first_bad or 0)
        found.ledger.append(
            f"run {run_id}: the ledger is wrong at event {chain.first_bad}: {chain.problem} "
            f"(its hash chain breaks there; `interlock verify {run_id}`); its files are not "
            "judged against a changed history, and none is written back"
        )
        found.affected.add(run_id)
        return
    try:
        state = fold_history(stored)
    except InterlockError as exc:
        found.ledger.append(f"run {run_id}: {exc.message}")
        found.affected.add(run_id)
        return
    damaged = _check_run(home, state, found)
    if damaged and repair:
        _repair(store, home, record, state, damaged, found)
    _check_archived(record, state, found, repair)


def _check_archived(record: RunRecord, state: RunState, found: Findings, repair: bool) -> None:
    """A run delivered but not archived, which nothing drives: its delivery is not done (a
    driver stopped in between). Taking it up (`resume`) finishes it; doctor never records."""
    import time

    from interlock.core.state import RunStatus
    from interlock.runtime.processes import holder_is_dead

    if state.status is not RunStatus.DELIVERED or state.archived:
        return
    owner = record.lease_owner
    if owner and (record.lease_expires or 0) > time.time() and not holder_is_dead(owner):
        return  # being driven: its driver archives it
    line = (
        f"run {state.run_id}: delivered but never archived, and no orchestrator drives it: "
        f"'interlock resume {state.run_id}' archives it"
    )
    (found.not_repaired if repair else found.files).append(line)
    found.affected.add(state.run_id)


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """A file the ledger recorded for a run: its name in the run's folder and its hash."""

    name: str
    sha256: str
    size: int | None
    # Where the same bytes may be found intact when the ledger lacks them: the delivered
    # output for final.md, the source run's file for a reused output.
    copy_of: Path | None = None


def run_folder(home: Home, run_id: str, archived: bool) -> Path:
    """Where the run's files are, or belong when its folder is gone: an archived run's in
    `archive/` (unless a move cut short left it in `runs/`, where its next driver finishes
    the move), any other run's in `runs/`."""
    archive, live = home.archive_dir(run_id), home.live_dir(run_id)
    if archive.is_dir() or (archived and not live.is_dir()):
        return archive
    return live


def _check_run(home: Home, state: RunState, found: Findings) -> list[Recorded]:
    """One run's recorded files against its folder; the ones missing or different."""
    from interlock.runtime.artifacts import digest

    run_id = state.run_id
    folder = run_folder(home, run_id, state.archived)
    tasks = sorted(
        (t for t in state.tasks.values() if t.artifact and t.sha256), key=lambda t: t.task_id
    )
    expected = []
    for task in tasks:
        # A reused output whose bytes the ledger lacks is still in the folder of its source.
        source = task.reused_from.partition("/")[0] if task.reused_from else None
        copy = home.run_dir(source) / str(task.artifact) if source else None
        expected.append(
            Recorded(name=str(task.artifact), sha256=str(task.sha256), size=task.size, copy_of=copy)
        )
    final = next((t for t in tasks if t.artifact == state.delivered), None)
    if state.delivered is not None and final is not None:
        copy = folder / str(final.artifact)
        expected.append(
            Recorded(name="final.md", sha256=str(final.sha256), size=final.size, copy_of=copy)
        )
    found.outputs += len(expected)
    if not folder.is_dir():
        if tasks:
            found.files.append(f"run {run_id}: its directory is missing ({folder})")
            found.affected.add(run_id)
            return expected
        return []
    damaged = []
    for item in expected:
        file = folder / item.name
        if not file.is_file():
            problem = "missing"
        else:
            actual, actual_size = digest(file)
            if actual == item.sha256:
                continue
            problem = (
                f"{actual_size} bytes, SHA-256 {actual[:12]}; recorded: {item.size} bytes, "
                f"{item.sha256[:12]}"
            )
        found.files.append(f"run {run_id}: {item.name}: {problem}")
        found.affected.add(run_id)
        damaged.append(item)
    return damaged


def _repair(
    store: Store,
    home: Home,
    record: RunRecord,
    state: RunState,
    damaged: list[Recorded],
    found: Findings,
) -> None:
    """Write back what the ledger holds of `damaged` into the run's folder (made again if it
    is gone, with status.json for a run that ended), a file changed by hand first kept aside
    as NAME.unrecorded, as `resume` and `approve` do; say why for each file it cannot."""
    from interlock.runtime.artifacts import fsync_dir, write_files
    from interlock.runtime.edits import pending_edits

    run_id = state.run_id
    folder = run_folder(home, run_id, state.archived)
    remade = not folder.is_dir()
    bodies: list[tuple[Recorded, bytes]] = []
    for item in damaged:
        body = _body(store, item)
        if body is None:
            found.not_repaired.append(f"run {run_id}: {item.name}: {_why_not(item)}")
        else:
            bodies.append((item, body))
    if not bodies:
        return  # nothing to put in a folder made again
    writable = [(folder / item.name, body) for item, body in bodies]
    if remade and state.status.ended:
        view = _status_file(store, record, state, folder.name)
        if isinstance(view, bytes):
            writable.append((folder / "status.json", view))
        else:
            found.notes.append(f"run {run_id}: status.json not written back: {view}")
    said = [path.name for path, _ in writable]
    try:
        if remade:
            folder.mkdir(parents=True)
            fsync_dir(folder.parent)
        else:
            pending = pending_edits(store, run_id)
            for number, (item, body) in enumerate(bodies):
                kept = _keep_aside(state, folder / item.name, item.sha256, body, pending)
                if kept is not None:
                    said[number] += _kept_note(state, item.name, kept)
        write_files(writable)
    except OSError as exc:  # a full disk, a read-only folder: said, never a traceback
        found.not_repaired.append(f"run {run_id}: cannot write into {folder}: {exc}")
        # What was moved aside before the failure is said all the same.
        found.notes += [f"run {run_id}: {line}" for line in said if "kept as" in line]
        return
    if remade:
        found.repaired.append(f"run {run_id}: its directory, made again: {folder}")
    found.repaired += [f"run {run_id}: {line}" for line in said]
    found.written += len(writable)


def _keep_aside(
    state: RunState, path: Path, sha256: str, body: bytes, pending: set[str]
) -> Path | None:
    """A changed file moved aside to NAME.unrecorded before `body` is written (see
    `keep_hand_edit`), or None. Without its size: a large file is compared whole too (the
    driver, on resume, checks those by size alone, for speed); doctor has read it already."""
    import logging

    from interlock.runtime.edits import keep_hand_edit

    def quiet(record: logging.LogRecord) -> bool:
        # Doctor says where each change went in its report; the log line's `interlock edit`
        # advice fits only an output of a paused run.
        return getattr(record, "action", None) != "hand_edit_kept"

    log = logging.getLogger("interlock.runtime")
    log.addFilter(quiet)
    try:
        return keep_hand_edit(state, path, None, sha256, body, pending)
    finally:
        log.removeFilter(quiet)


def _body(store: Store, item: Recorded) -> bytes | None:
    """The recorded bytes of `item`: from the ledger, else from an intact copy of them."""
    import hashlib

    body = store.artifact(item.sha256)
    if body is None and item.copy_of is not None:
        try:
            body = item.copy_of.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(body).hexdigest() != item.sha256:
            return None
    return body


def _why_not(item: Recorded) -> str:
    """Why the ledger cannot give `item` back, and what then."""
    from interlock.runtime.artifacts import INLINE_LIMIT

    if item.size is not None and item.size > INLINE_LIMIT:
        return (
            f"{item.size} bytes, and the ledger keeps the bytes of outputs up to 1 MiB only: "
            "it must be produced again (start the run again)"
        )
    return "the ledger does not hold its bytes: it must be produced again (start the run again)"


def _kept_note(state: RunState, name: str, kept: Path) -> str:
    """What a person is told of their change, moved aside before the recorded version."""
    from interlock.core.state import RunStatus

    note = f"; the changed file that was there is kept as {kept}"
    if state.status is RunStatus.PAUSED:
        note += f"; to record it: interlock edit {state.run_id} {name} --file {kept}"
    return note


def _status_file(store: Store, record: RunRecord, state: RunState, folder: str) -> bytes | str:
    """status.json of an ended run as its driver last wrote it (or why it cannot be made)."""
    from interlock.core.loader import Definition
    from interlock.runtime.projection import status_view
    from interlock.storage import codec

    try:
        definition = Definition.from_canonical(
            record.pipeline, store.definition(record.definition_hash)
        )
    except InterlockError as exc:
        return f"its pipeline definition cannot be read ({exc.message})"
    view = status_view(definition.pipeline, state, folder)
    view["orchestrator"] = None  # an ended run: no one keeps it current
    return codec.dumpb(view)


def _run_dirs(state_dir: Path) -> set[str]:
    names: set[str] = set()
    for folder in ("runs", "archive"):
        try:
            with os.scandir(state_dir / folder) as entries:
                names |= {e.name for e in entries if e.is_dir() and not e.name.startswith(".")}
        except OSError:
            continue
    return names


def _report(found: Findings, path: Path | None, repair: bool = False) -> None:
    """Print the findings with what to do, and exit with the matching code."""
    checked = f"{found.runs} runs, {found.outputs} outputs checked"
    for line in found.ledger:
        out.print(f"ledger: {line}")
    for line in found.files:
        out.print(f"files: {line}")
    for line in found.repaired:
        out.print(f"repaired: {line}")
    for line in found.not_repaired:
        out.print(f"not repaired: {line}")
    for line in found.notes:
        out.print(f"note: {line}")
    if found.ledger:
        out.print(f"\n{checked}.")
        if found.affected:
            names = sorted(found.affected)
            more = f" and {len(names) - 20} more" if len(names) > 20 else ""
            shown = ", ".join(names[:20]) + more
            out.print(f"affected runs ({len(names)}): {shown}")
        if path is not None and found.sqlite_damaged:
            out.print("\nwhat to do:")
            if found.index_only:
                out.print(
                    "  only indexes are damaged (the rows they index are intact): `interlock "
                    f"--home {found.state_dir or path.parent} --store sqlite://{path} doctor "
                    f"--repair` keeps a copy of the file as {path.stem}.before-reindex"
                    f"{path.suffix} and rebuilds them (REINDEX), then checks again"
                )
                out.print("  if it still fails:")
            for step in recovery_steps(path, found.state_dir or path.parent):
                out.print(f"  {step}")
        else:
            out.print("\nwhat to do:")
            for step in history_steps(found):
                out.print(f"  {step}")
        sys.exit(int(ExitCode.STORAGE))
    if found.files and not repair:
        out.print(f"\n{checked}; {len(found.files)} problem(s) with files.")
        out.print(
            "the runs' hash chains hold: these files changed after the ledger recorded them, "
            "the ledger is right"
        )
        out.print(
            "what to do: `interlock doctor --repair` writes back outputs the ledger holds (up to "
            "1 MiB each), first keeping a file changed by hand as NAME.unrecorded; `interlock "
            "resume RUN` repairs a run that has not ended; a large output that is lost must be "
            "produced again (start the run again)"
        )
        sys.exit(int(ExitCode.NOT_VERIFIED))
    if found.not_repaired:
        out.print(f"\n{checked}; {len(found.not_repaired)} file(s) could not be written back.")
        sys.exit(int(ExitCode.NOT_VERIFIED))
    out.print(f"ok: {checked}" + (f", {found.written} written back" if found.written else ""))


def history_steps(found: Findings) -> list[str]:
    """What to do when the SQLite file is sound but runs' histories are not."""
    steps = []
    if found.changed:
        runs = ", ".join(f"{run} (event {seq})" for run, seq in sorted(found.changed.items()))
        steps += [
            f"the ledger lost or changed these events after it recorded them: {runs}; the files on "
            "disk are what the workers wrote and were left as they are",
            "put the ledger back from a backup taken before the change, then check it again: "
            "interlock doctor",
            "without one, do not resume or rerun such a run: start it again with `interlock run`",
        ]
    if set(found.affected) - set(found.changed):
        steps.append(
            "an event whose hash chain holds but that this interlock cannot read was written "
            "by a newer interlock (read it with that version) or holds a value this version "
            "cannot take; the other runs are not affected"
        )
    return steps


def _recover(path: Path, home: Home) -> None:
    """`doctor --recover`: every readable row of `path` into LEDGER.recovered.db, checked."""
    import sqlite3

    from interlock.storage.salvage import salvage

    target = path.with_name(f"{path.stem}.recovered{path.suffix}")
    if not path.is_file():
        raise StorageError(f"no ledger at {path}: nothing to recover")
    if target.exists():
        raise InterlockError(f"{target} exists: move it away first (nothing was written)")
    try:
        result = salvage(path, target)
    except sqlite3.DatabaseError as exc:
        target.unlink(missing_ok=True)
        raise StorageError(f"{path} cannot be opened by SQLite at all ({exc})") from None
    events = result.rows.get("events", 0)
    lost = max(result.runs_expected_events - events, 0)
    on_disk = _run_dirs(home.root)
    missing = sorted(on_disk - result.run_ids)
    out.print(f"recovered into {target}:")
    out.print(
        f"  {events} events of {result.rows.get('runs', 0)} runs "
        f"(their records count {result.runs_expected_events}: {lost} lost), "
        f"{result.rows.get('definitions', 0)} definitions, "
        f"{result.rows.get('artifacts', 0)} stored outputs"
    )
    for problem in result.problems:
        out.print(f"  skipped: {problem}")
    for run_id, (held, counted) in sorted(result.short.items()):
        out.print(f"  run {run_id}: {held} of its {counted} events recovered")
    if missing:
        out.print(
            f"  runs with a folder on disk that are not in it ({len(missing)}): {_names(missing)}"
        )
    if not result.run_ids and (on_disk or result.unreadable or result.source_pages > 2):
        target.unlink(missing_ok=True)
        why = "the schema is unreadable" if result.unreadable else "no run's record could be read"
        out.print(
            f"nothing could be recovered: {why}; keep the damaged file ({path}, with its "
            f"-wal beside it if there is one) and put the ledger back from a backup; "
            f"{target} was removed: do not put an empty ledger in its place, the runs' outputs "
            f"stay in {home.root}/runs and {home.root}/archive"
        )
        sys.exit(int(ExitCode.STORAGE))
    out.print(f"  SQLite's integrity check of the new file: {result.integrity}")
    folder = path.parent
    out.print("next:")
    out.print(f"  check it: interlock --home {home.root} --store sqlite://{target} doctor")
    if missing:
        out.print(
            f"  it is not put in place: {len(missing)} run(s) whose folders are on disk are "
            f"missing from it; keep the damaged file ({path}) and put the ledger back from a "
            f"backup; {target} holds what could be read of the others"
        )
        sys.exit(int(ExitCode.STORAGE))
    out.print(
        f"  put it in place: mv {path} {folder}/{path.stem}.damaged{path.suffix} && "
        f"rm -f {path}-wal {path}-shm && mv {target} {path}"
    )
    if lost:
        out.print(
            "  a run missing events fails `interlock verify` at the first one lost: start it "
            "again rather than resume it"
        )
    if result.integrity != "ok":
        sys.exit(int(ExitCode.STORAGE))


def _names(runs: list[str]) -> str:
    more = f" and {len(runs) - 20} more" if len(runs) > 20 else ""
    return ", ".join(runs[:20]) + more


def recovery_steps(path: Path, state_dir: Path) -> list[str]:
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
    folder, name = path.parent, path.name
    recovered = folder / f"{path.stem}.recovered{path.suffix}"
    return [
        "1. stop every interlock process that uses this state directory",
        f"2. keep a copy of the ledger and its companions: cp -p {folder}/{name}* /a/safe/place/",
        "3. copy every row SQLite can still read into a new ledger (it says how many events "
        f"it recovered and which it could not): interlock --home {state_dir} --store "
        f"sqlite://{path} doctor --recover",
        f"4. check it: interlock --home {state_dir} --store sqlite://{recovered} doctor",
        f"5. put it in place: mv {path} {folder}/{path.stem}.damaged{path.suffix} && "
        f"rm -f {path}-wal {path}-shm && mv {recovered} {path}",
        "6. resume the runs that had not ended (`interlock runs --status running`); a run "
        "that lost events in the recovery fails `interlock verify`: start it again",
    ]


COMMANDS = [doctor]
