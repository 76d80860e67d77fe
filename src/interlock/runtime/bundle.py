"""One run in one file: export it from a store, verify it, import it into another store.

A bundle is a gzipped tar written with the standard library:

    manifest.json        what the bundle holds: the run, its chain head, the SHA-256 of every
                         other member
    definition.json      the pinned definition (its SHA-256 is the run's definition hash)
    events.jsonl         every event, one a line, with its seq, rule, why and chain hash
    artifacts/<sha256>   the output bodies the ledger holds (every version, edits included)
    run/...              the run's directory: outputs, final.md, prompts/, logs/

Verification recomputes everything it can: each member's hash against the manifest, the
definition's hash, the events' hash chain (naming the first seq that does not match) and each
stored body against its name. Importing verifies first and changes nothing when that fails;
the run is then added to the store as recorded (same events, same chain), its files placed in
the state directory, and nobody holds its lease.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from interlock.core import events as ev
from interlock.core.state import RunState, fold
from interlock.errors import RunNotFound, UsageError, VerificationFailed
from interlock.runtime.home import Home, check_run_id
from interlock.storage import chain
from interlock.storage.base import (
    AppendBatch,
    Lease,
    NewEvent,
    RunRegistration,
    RunSummary,
    Store,
    StoredEvent,
)

FORMAT = "interlock-run"
FORMAT_VERSION = 1
MAX_MEMBER = 512 * 1024 * 1024  # bytes: a member larger than this is not from an export
_BODY_FIELDS: dict[str, tuple[str, ...]] = {
    "task_completed": ("sha256",),
    "task_reused": ("sha256",),
    "output_edited": ("sha256", "old_sha256"),
}


@dataclass(frozen=True, kw_only=True)
class Bundle:
    """A verified bundle, read into memory."""

    manifest: dict[str, Any]
    definition: str
    events: list[StoredEvent]
    bodies: dict[str, bytes]  # sha256 -> body
    files: dict[str, bytes]  # path inside the run directory -> content
    report: chain.ChainReport

    @property
    def run_id(self) -> str:
        """The run's id as exported."""
        return str(self.manifest["run_id"])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _body_shas(events: list[StoredEvent]) -> list[str]:
    """Every output body the events name, in order, once each."""
    found: dict[str, None] = {}
    for event in events:
        for name in _BODY_FIELDS.get(event.kind, ()):
            value = event.data.get(name)
            if isinstance(value, str) and value:
                found[value] = None
    return list(found)


def _run_files(run_dir: Path) -> Iterator[tuple[str, Path]]:
    """Regular files of a run directory (symlinks and temporary files left out)."""
    if not run_dir.is_dir():
        return
    for path in sorted(run_dir.rglob("*")):
        if path.is_symlink() or not path.is_file() or ".tmp" in path.name:
            continue
        yield path.relative_to(run_dir).as_posix(), path


def export_run(store: Store, home: Home, run_id: str, target: Path) -> dict[str, Any]:
    """Write run `run_id` to the bundle `target` (atomically); returns its manifest."""
    record = store.get_run(run_id)
    events = store.events(run_id)
    members: dict[str, bytes] = {}
    members["definition.json"] = store.definition(record.definition_hash).encode()
    lines = [
        json.dumps(
            {
                "seq": e.seq,
                "at": e.at,
                "kind": e.kind,
                "data": e.data,
                "rule": e.rule,
                "why": e.why,
                "hash": e.hash,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for e in events
    ]
    members["events.jsonl"] = ("\n".join(lines) + "\n").encode() if lines else b""
    for sha in _body_shas(events):
        body = store.artifact(sha)
        if body is not None:
            members[f"artifacts/{sha}"] = body
    for name, path in _run_files(home.run_dir(run_id)):
        members[f"run/{name}"] = path.read_bytes()
    report = chain.verify_events(events)
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "run_id": run_id,
        "pipeline": record.pipeline,
        "topic": record.topic,
        "definition_hash": record.definition_hash,
        "source": record.source,
        "created_at": record.created_at,
        "exported_at": time.time(),
        "status": record.summary.status,
        "events": len(events),
        "unchained": report.unchained,
        "chain_head": events[-1].hash if events else None,
        "files": {name: _sha(data) for name, data in sorted(members.items())},
    }
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        _add(tar, "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False).encode())
        for name, data in sorted(members.items()):
            _add(tar, name, data)
    os.replace(tmp, target)
    return manifest


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # the same run, the same bytes
    tar.addfile(info, io.BytesIO(data))


def _fail(path: Path, problem: str) -> VerificationFailed:
    return VerificationFailed(f"{path}: the bundle fails verification: {problem}")


def _read_members(path: Path) -> dict[str, bytes]:
    """Every regular member of the tar, by name (anything else is refused)."""
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for info in tar:
                name = PurePosixPath(info.name)
                if not info.isfile() or name.is_absolute() or ".." in name.parts:
                    raise _fail(path, f"member {info.name!r} is not a plain file of the bundle")
                if info.size > MAX_MEMBER or info.name in members:
                    raise _fail(path, f"member {info.name!r} is too large or appears twice")
                handle = tar.extractfile(info)
                assert handle is not None
                members[info.name] = handle.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        problem = f"it is not an interlock bundle (a .tar.gz from 'interlock export'): {exc}"
        raise _fail(path, problem) from None
    return members


def read_bundle(path: Path) -> Bundle:
    """Read and verify a bundle (raises VerificationFailed naming the first problem)."""
    members = _read_members(path)
    try:
        manifest = json.loads(members.pop("manifest.json"))
    except (KeyError, ValueError):
        raise _fail(path, "manifest.json is missing or not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _fail(path, "manifest.json does not describe an interlock run")
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise _fail(path, f"bundle version {manifest['version']} is newer than this interlock")
    listed: dict[str, str] = manifest.get("files") or {}
    for name in sorted(set(listed) | set(members)):
        if name not in members:
            raise _fail(path, f"{name} is listed in the manifest but missing")
        if name not in listed:
            raise _fail(path, f"{name} is in the bundle but not in its manifest")
        if _sha(members[name]) != listed[name]:
            raise _fail(path, f"{name} does not match its hash in the manifest")
    definition = members.get("definition.json", b"").decode()
    if _sha(definition.encode()) != manifest.get("definition_hash"):
        raise _fail(path, "definition.json does not match the run's definition hash")
    events = _events(path, manifest, members.get("events.jsonl", b""))
    report = chain.verify_events(events)
    if not report.ok:
        raise _fail(path, f"event {report.first_bad}: {report.problem}")
    head = events[-1].hash if events else None
    if head != manifest.get("chain_head") or len(events) != manifest.get("events"):
        raise _fail(path, "the events do not end where the manifest says they end")
    bodies = {}
    for name, data in members.items():
        if name.startswith("artifacts/"):
            sha = name.removeprefix("artifacts/")
            if _sha(data) != sha:
                raise _fail(path, f"{name} does not match its name")
            bodies[sha] = data
    files = {n.removeprefix("run/"): d for n, d in members.items() if n.startswith("run/")}
    return Bundle(
        manifest=manifest,
        definition=definition,
        events=events,
        bodies=bodies,
        files=files,
        report=report,
    )


def _events(path: Path, manifest: dict[str, Any], text: bytes) -> list[StoredEvent]:
    events = []
    for number, line in enumerate(text.decode().splitlines(), start=1):
        try:
            row = json.loads(line)
            events.append(
                StoredEvent(
                    id=number,
                    run_id=str(manifest["run_id"]),
                    seq=int(row["seq"]),
                    at=float(row["at"]),
                    kind=str(row["kind"]),
                    data=dict(row["data"]),
                    rule=row.get("rule"),
                    why=row.get("why"),
                    hash=row.get("hash"),
                )
            )
        except (ValueError, KeyError, TypeError):
            raise _fail(path, f"events.jsonl line {number} is not an event record") from None
    if not events or events[0].kind != "run_created":
        raise _fail(path, "the history does not start with the run's creation")
    created = events[0].data
    if created.get("run_id") != manifest["run_id"]:
        raise _fail(path, "the manifest names another run than the history")
    if created.get("definition_hash") != manifest["definition_hash"]:
        raise _fail(path, "the history is pinned to another definition than the bundle's")
    return events


@dataclass(frozen=True, kw_only=True)
class Imported:
    """What an import added."""

    run_id: str
    events: int
    status: str
    same_chain: bool  # the store's hashes are the bundle's (false under another run id)


def import_run(
    store: Store, home: Home, path: Path, *, run_id: str | None = None, now: float | None = None
) -> Imported:
    """Verify the bundle at `path` and add its run to `store` (under `run_id` if given)."""
    bundle = read_bundle(path)
    new_id = check_run_id(run_id or bundle.run_id)
    try:
        store.get_run(new_id)
    except RunNotFound:
        pass
    else:
        hint = "" if run_id else "; import it under another id with --run-id NEW-ID"
        raise UsageError(f"run {new_id} already exists in this store{hint}")
    home.refuse_taken(new_id)  # never written over: another store's run, say
    try:
        history = [
            NewEvent(event=_renamed(e.event, new_id), rule=e.rule, why=e.why) for e in bundle.events
        ]
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
    state = fold([n.event for n in history])
    now = time.time() if now is None else now
    _place_files(home, new_id, state, bundle.files)
    manifest = bundle.manifest
    lease = Lease(run_id=new_id, owner=f"import-{os.getpid()}", token=1, expires_at=now + 300)
    registration = RunRegistration(
        run_id=new_id,
        pipeline=str(manifest["pipeline"]),
        topic=str(manifest["topic"]),
        definition_hash=str(manifest["definition_hash"]),
        definition=bundle.definition,
        source=str(manifest.get("source") or ""),
        created_at=float(manifest["created_at"]),
    )
    batch = AppendBatch(
        lease=lease,
        events=history,
        summary=_summary(state),
        register=registration,
        artifacts=sorted(bundle.bodies.items()),
    )
    try:
        store.append(batch, now)
    except BaseException:  # not recorded: its files go too, so that a retry finds no folder
        shutil.rmtree(home.archive_dir(new_id) if state.archived else home.live_dir(new_id))
        raise
    store.release_lease(lease)
    stored = store.events(new_id)
    same = [e.hash for e in stored] == [e.hash for e in bundle.events]
    return Imported(run_id=new_id, events=len(stored), status=state.status.value, same_chain=same)


def _renamed(event: ev.Event, run_id: str) -> ev.Event:
    if isinstance(event, ev.RunCreated) and event.run_id != run_id:
        return replace(event, run_id=run_id)
    return event


def _summary(state: RunState) -> RunSummary:
    return RunSummary(
        status=state.status.value,
        phase=state.current.phase if state.current else None,
        cost_usd=state.cost_usd,
        tokens=state.tokens,
        warnings=len(state.warnings),
        updated_at=state.updated_at,
    )


def _place_files(home: Home, run_id: str, state: RunState, files: dict[str, bytes]) -> None:
    """Write the run's directory (before the ledger knows the run; removed again when
    recording it fails)."""
    base = home.archive_dir(run_id) if state.archived else home.live_dir(run_id)
    base.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = home.inside(base, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


@dataclass(frozen=True, kw_only=True)
class RunCheck:
    """What `verify RUN` found in a store."""

    report: chain.ChainReport
    head: str | None
    bodies: int  # output bodies checked against their hashes


def verify_run(store: Store, run_id: str) -> RunCheck:
    """Check a stored run's chain and the output bodies the ledger holds for it."""
    events = store.events(run_id)
    report = chain.verify_events(events)
    if not report.ok:
        raise VerificationFailed(
            f"run {run_id}: the history fails verification at event {report.first_bad}: "
            f"{report.problem}"
        )
    checked = 0
    for sha in _body_shas(events):
        body = store.artifact(sha)
        if body is None:
            continue
        checked += 1
        if _sha(body) != sha:
            raise VerificationFailed(
                f"run {run_id}: the stored output {sha[:12]} no longer matches its hash"
            )
    return RunCheck(report=report, head=events[-1].hash if events else None, bodies=checked)
