"""One run in one file: export it from a store, verify it, import it into another store.

A bundle is a gzipped tar written with the standard library:

    manifest.json        first: the run, its chain head, the SHA-256 and size of every member
    signature.json       optional: an ed25519 signature of manifest.json (`runtime.signing`)
    definition.json      the pinned definition (its SHA-256 is the run's definition hash)
    events.jsonl         every event, one a line, with its seq, rule, why and chain hash
    artifacts/<sha256>   the output bodies the ledger holds that the events name
    run/...              the files of the run's directory that its history binds: each output
                         (the hash of its last completion or edit), final.md (the delivered
                         output's hash), each prompt, tool transcript and command log (the
                         hashes its attempt recorded, `runtime.records`)

Every member is bound to the hash chain, and every manifest field that the history also holds
is checked against it: a bundle whose files were changed and whose manifest was hashed again
still fails, naming the file. A forger can rewrite the events too, and the chain with them:
only a signature made with a key the exporter holds, checked against its public key, shows
who wrote a bundle. Exported files are masked like every other view of them (a record that
masking would change now, a key configured since it was recorded, is withheld, named in the
manifest). A bundle is code as well as data: its definition names commands and `call:`
targets, so an imported run is inert (`RunImported`) until a person trusts it.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from interlock.core import events as ev
from interlock.core.state import RunState, fold
from interlock.core.workflow import Pipeline
from interlock.errors import (
    BadSignature,
    DamagedHistory,
    RunNotFound,
    UsageError,
    VerificationFailed,
)
from interlock.providers.redaction import Secret
from interlock.runtime import records, signing
from interlock.runtime.bundle_read import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SIGNATURE,
    Extracted,
    Limits,
    read_members,
)
from interlock.runtime.home import Home, check_run_id
from interlock.storage import chain
from interlock.storage.base import (
    AppendBatch,
    Lease,
    NewEvent,
    RunRecord,
    RunRegistration,
    RunSummary,
    Store,
    StoredEvent,
    fold_history,
)

_BODY_FIELDS: dict[str, tuple[str, ...]] = {
    "task_completed": ("sha256",),
    "task_reused": ("sha256",),
    "output_edited": ("sha256", "old_sha256"),
}
_OUTPUTS = ("task_completed", "task_reused", "output_edited")
_ATTEMPT_ENDS = ("task_completed", "task_failed", "task_timed_out")
_VIEWS = frozenset({"status.json"})  # written from the ledger: never carried, written again


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _body_shas(events: list[StoredEvent]) -> list[str]:
    """Every output body the events name, in order, once each."""
    found: dict[str, None] = {}
    for event in events:
        for name in _BODY_FIELDS.get(event.kind, ()):
            value = event.data.get(name)
            if isinstance(value, str) and value:
                found[value] = None
    return list(found)


def bound_files(events: list[StoredEvent]) -> dict[str, str]:
    """The files of a run's directory its history binds, by path, with the SHA-256 each must
    have: outputs (their last completion or edit), final.md (the delivered output) and the
    records each ended attempt names."""
    bound: dict[str, str] = {}
    for event in events:
        data = event.data
        artifact = data.get("artifact")
        if event.kind in _OUTPUTS and isinstance(artifact, str) and artifact:
            bound[artifact] = str(data.get("sha256") or "")
        kept = data.get("records")
        if event.kind in _ATTEMPT_ENDS and isinstance(kept, dict):
            bound.update({str(name): str(sha) for name, sha in kept.items()})
        if event.kind == "delivered" and isinstance(artifact, str) and artifact in bound:
            bound["final.md"] = bound[artifact]
    return bound


def runs_what(pipeline: Pipeline, within: str = "") -> list[str]:
    """What a definition would run on this machine: each command, `call:` target and tool
    server, by worker (a sub-pipeline's with its path)."""
    found: list[str] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            where = f"{within}{phase.id}/{worker.role}"
            if worker.command is not None:
                found.append(f"{where}: command {json.dumps(worker.command)}")
            elif worker.kind == "call":
                found.append(f"{where}: call {worker.call}")
            for server in worker.tools:
                if server.mcp is not None:
                    found.append(f"{where}: tool server {json.dumps(server.mcp)}")
                elif server.url is not None:
                    found.append(f"{where}: tool server at {server.url}")
            if worker.pipeline_definition is not None:
                found += runs_what(worker.pipeline_definition, f"{where} > ")
    return found


def _run_files(run_dir: Path) -> Iterator[tuple[str, Path]]:
    """Regular files of a run directory (symlinks and temporary files left out)."""
    if not run_dir.is_dir():
        return
    for path in sorted(run_dir.rglob("*")):
        if path.is_symlink() or not path.is_file() or ".tmp" in path.parts or ".tmp" in path.name:
            continue
        yield path.relative_to(run_dir).as_posix(), path


def run_secrets(home: Home, record: RunRecord) -> list[Secret]:
    """Every key the run's configuration reaches (interlock.toml beside its workflow file and
    in the state directory, and the environment), as `ModelRunner.secrets` finds them."""
    from interlock.providers.config import ModelConfig

    source = record.source
    folder = Path(source).parent if source and not source.startswith("<") else None
    try:
        return ModelConfig.for_workflow(folder, home.root).secrets()
    except Exception:  # an unreadable configuration: masked by the shapes of credentials
        return []


def _is_record(name: str) -> bool:
    return name.startswith(("prompts/", "logs/"))


def _masked_digest(path: Path, secrets: list[Secret]) -> tuple[str, bool]:
    """The file's SHA-256, and whether masking it now would change it."""
    digest, changed = hashlib.sha256(), False
    with open(path, "rb") as handle:
        while line := handle.readline(records.CHUNK):
            digest.update(line)
            changed = changed or records.masked(line, secrets) != line
    return digest.hexdigest(), changed


@dataclass(frozen=True, kw_only=True)
class Exported:
    """What an export wrote."""

    manifest: dict[str, Any]
    withheld: dict[str, str]  # files of the run's folder left out, with why
    signer: str | None  # the fingerprint of the key that signed it


def _check_exportable(run_id: str, events: list[StoredEvent]) -> None:
    """Refuse to export a history that cannot be decoded or whose hash chain breaks: the
    bundle would carry the damage under a fresh manifest (raises DamagedHistory, exit 5)."""
    report = chain.verify_events(events)
    if not report.ok:
        raise DamagedHistory(
            run_id,
            report.first_bad,
            f"run {run_id} is not exported: its hash chain breaks at event {report.first_bad} "
            f"({report.problem}); `interlock doctor` says what is affected and how to recover",
        )
    fold_history(events)  # raises DamagedHistory naming the event


def export_run(
    store: Store,
    home: Home,
    run_id: str,
    target: Path,
    *,
    sign_key: Path | None = None,
    secrets: list[Secret] | None = None,
) -> Exported:
    """Write run `run_id` to the bundle `target` (atomically), signed with the private key
    at `sign_key` if given."""
    record = store.get_run(run_id)
    events = store.events(run_id)
    _check_exportable(run_id, events)
    keys = run_secrets(home, record) if secrets is None else secrets
    members: dict[str, bytes | Path] = {}
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
    bound = bound_files(events)
    withheld: dict[str, str] = {}
    hashes: dict[str, tuple[str, int]] = {}
    for name, path in _run_files(home.run_dir(run_id)):
        if name in _VIEWS:
            continue
        want = bound.get(name)
        if want is None:
            withheld[name] = "not bound to the run's history"
            continue
        if _is_record(name):
            digest, changed = _masked_digest(path, keys)
            if changed:
                withheld[name] = "holds a secret (masked in every view) configured since"
                continue
        else:
            digest = _file_sha(path)
        if digest == want:
            members[f"run/{name}"] = path
            hashes[f"run/{name}"] = (digest, path.stat().st_size)
            continue
        body = store.artifact(want)
        if body is not None:  # changed by hand since: the recorded text goes
            members[f"run/{name}"] = body
        else:
            withheld[name] = "changed since it was recorded"
    for name, data in members.items():
        if isinstance(data, bytes):
            hashes[name] = (_sha(data), len(data))
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
        "files": {
            name: {"sha256": sha, "size": size} for name, (sha, size) in sorted(hashes.items())
        },
        "withheld": dict(sorted(withheld.items())),
    }
    manifest_bytes = json.dumps(manifest, indent=2, ensure_ascii=False).encode()
    signature = None if sign_key is None else signing.sign(manifest_bytes, sign_key)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            _add(tar, MANIFEST, manifest_bytes)
            if signature is not None:
                _add(tar, SIGNATURE, json.dumps(signature.as_dict(), indent=2).encode())
            for name, data in sorted(members.items()):
                _add(tar, name, data, hashes[name])
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    signer = None if signature is None else signing.fingerprint(signature.public_key)
    return Exported(manifest=manifest, withheld=withheld, signer=signer)


class _Hashing(io.RawIOBase):
    """Reads a file for the tar, hashing what it gives."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data


def _add(
    tar: tarfile.TarFile, name: str, data: bytes | Path, expect: tuple[str, int] | None = None
) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = 0o644, 0  # the same run, the same bytes
    if isinstance(data, bytes):
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        return
    assert expect is not None
    info.size = expect[1]
    with open(data, "rb") as handle:
        reader = _Hashing(handle)
        tar.addfile(info, reader)
    if reader.digest.hexdigest() != expect[0]:
        raise UsageError(f"{data}: changed while it was being exported; export the run again")


@dataclass(frozen=True, kw_only=True)
class Bundle:
    """A verified bundle, read into a folder (`Extracted`)."""

    manifest: dict[str, Any]
    definition: str
    events: list[StoredEvent]
    bodies: dict[str, Path]  # sha256 -> its file
    files: dict[str, Path]  # path inside the run directory -> its file
    report: chain.ChainReport
    signer: str | None  # the fingerprint of the key its signature was made with
    checked: bool  # the signature was checked against a public key given
    runs: list[str] = field(default_factory=list)  # what its definition would run

    @property
    def run_id(self) -> str:
        """The run's id as exported."""
        return str(self.manifest["run_id"])

    @property
    def trust(self) -> str:
        """How far the bundle is vouched for, in words."""
        if self.signer is None:
            return "unsigned (its hashes show it is whole, not who wrote it)"
        if self.checked:
            return f"signed by the key given ({self.signer})"
        return f"signed by {self.signer}, not checked: pass --public-key FILE to check it"


def _fail(path: Path, problem: str) -> VerificationFailed:
    return VerificationFailed(f"{path}: the bundle fails verification: {problem}")


def read_bundle(
    path: Path,
    folder: Path,
    *,
    limits: Limits | None = None,
    public_key: bytes | None = None,
) -> Bundle:
    """Read the bundle at `path` into `folder` and verify it (raises VerificationFailed
    naming the first problem, BadSignature for a signature that does not hold)."""
    found = read_members(path, folder, limits or Limits())
    manifest = found.manifest
    signer = _check_signature(path, found, public_key)
    definition = found.read("definition.json").decode() if "definition.json" in found.paths else ""
    if _sha(definition.encode()) != manifest.get("definition_hash"):
        raise _fail(path, "definition.json does not match the run's definition hash")
    events = _events(path, manifest, found.paths.get("events.jsonl"))
    report = chain.verify_events(events)
    if not report.ok:
        raise _fail(path, f"event {report.first_bad}: {report.problem}")
    head = events[-1].hash if events else None
    if head != manifest.get("chain_head") or len(events) != manifest.get("events"):
        raise _fail(path, "the events do not end where the manifest says they end")
    try:
        state = fold_history(events)
    except DamagedHistory as exc:
        raise _fail(path, f"its history cannot be folded at event {exc.seq}") from None
    _check_manifest(path, manifest, events, state)
    named = set(_body_shas(events))
    bound = bound_files(events)
    bodies, files = {}, {}
    for name, member in sorted(found.paths.items()):
        sha = found.hashes[name]
        if name in ("definition.json", "events.jsonl"):
            continue
        if name.startswith("artifacts/"):
            key = name.removeprefix("artifacts/")
            if sha != key:
                raise _fail(path, f"{name} does not match its name")
            if key not in named:
                raise _fail(path, f"{name} is an output no event of the history names")
            bodies[key] = member
        elif name.startswith("run/"):
            relative = name.removeprefix("run/")
            want = bound.get(relative)
            if want is None:
                raise _fail(
                    path,
                    f"{name} is not bound to the run's history (no event records its hash): "
                    "a file added to the bundle",
                )
            if sha != want:
                raise _fail(path, f"{name} is not the file the run's history records")
            files[relative] = member
        else:
            raise _fail(path, f"{name} is not a member of an interlock bundle")
    from interlock.core.loader import Definition

    try:
        pipeline = Definition.from_canonical(state.pipeline, definition).pipeline
    except Exception as exc:  # a definition this version cannot read
        raise _fail(path, f"definition.json cannot be read: {exc}") from None
    return Bundle(
        manifest=manifest,
        definition=definition,
        events=events,
        bodies=bodies,
        files=files,
        report=report,
        signer=None if signer is None else signing.fingerprint(signer),
        checked=public_key is not None,
        runs=runs_what(pipeline),
    )


def _check_signature(path: Path, found: Extracted, public_key: bytes | None) -> bytes | None:
    """The signing key (raw) once its signature holds; None for an unsigned bundle."""
    if found.signature is None:
        if public_key is not None:
            raise BadSignature(
                f"{path}: the bundle is unsigned, but --public-key was given: it cannot be "
                "shown to come from that key's holder; ask for a signed export "
                "(interlock export RUN -o FILE --sign-key KEY)"
            )
        return None
    try:
        signature = signing.Signature.from_dict(found.signature)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadSignature(f"{path}: signature.json is not a signature: {exc}") from None
    signing.check(found.manifest_bytes, signature, str(path))
    if public_key is not None and signature.public_key != public_key:
        other = signing.fingerprint(signature.public_key)
        raise BadSignature(
            f"{path}: the bundle is signed by another key ({other}) than the one given "
            f"({signing.fingerprint(public_key)}): do not import it"
        )
    return signature.public_key


def _check_manifest(
    path: Path, manifest: dict[str, Any], events: list[StoredEvent], state: RunState
) -> None:
    """The manifest says of the run what its history says."""
    created = events[0]
    said = {
        "pipeline": (manifest.get("pipeline"), state.pipeline),
        "topic": (manifest.get("topic"), state.topic),
        "status": (manifest.get("status"), state.status.value),
    }
    for name, (given, recorded) in said.items():
        if given != recorded:
            raise _fail(
                path, f"the manifest's {name} {given!r} is not the history's ({recorded!r})"
            )
    at = manifest.get("created_at")
    if not isinstance(at, (int, float)) or abs(float(at) - created.at) > 1.0:
        raise _fail(path, "the manifest's created_at is not when the history says the run began")
    exported = manifest.get("exported_at")
    if not isinstance(exported, (int, float)) or exported < events[-1].at - 1.0:
        raise _fail(path, "the manifest's exported_at comes before the history's last event")


def _events(path: Path, manifest: dict[str, Any], file: Path | None) -> list[StoredEvent]:
    events = []
    if file is not None:
        with open(file, "rb") as handle:
            for number, line in enumerate(handle, start=1):
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
                    events[-1].event  # noqa: B018 - an event this version reads, or refused
                except DamagedHistory:
                    raise _fail(
                        path,
                        f"events.jsonl line {number} (event {events[-1].seq}, "
                        f"{events[-1].kind}) is not an event this interlock can read: the "
                        "bundle was damaged or changed, or a newer interlock wrote it",
                    ) from None
                except (ValueError, KeyError, TypeError):
                    raise _fail(
                        path, f"events.jsonl line {number} is not an event record"
                    ) from None
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
    bundle: Bundle
    trusted: bool


def import_run(
    store: Store,
    home: Home,
    path: Path,
    *,
    run_id: str | None = None,
    now: float | None = None,
    limits: Limits | None = None,
    public_key: bytes | None = None,
    trust: bool = False,
    by: str | None = None,
) -> Imported:
    """Verify the bundle at `path` and add its run to `store` (under `run_id` if given),
    inert unless `trust`: nothing of its definition runs until a person trusts it."""
    home.root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".import-", dir=home.root))
    try:
        bundle = read_bundle(path, folder, limits=limits, public_key=public_key)
        return _add_run(store, home, path, bundle, run_id, now, trust, by)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _add_run(
    store: Store,
    home: Home,
    path: Path,
    bundle: Bundle,
    run_id: str | None,
    now: float | None,
    trust: bool,
    by: str | None,
) -> Imported:
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
    now = time.time() if now is None else now
    imported = ev.RunImported(
        at=max(now, bundle.events[-1].at),
        bundle=path.name,
        chain_head=bundle.manifest.get("chain_head"),
        signer=bundle.signer if bundle.checked else None,
        trusted=trust,
        by=by or _user(),
    )
    why = "trusted by the person who imported it" if trust else "inert until a person trusts it"
    history.append(NewEvent(event=imported, why=why))
    state = fold([n.event for n in history])
    _place_files(home, new_id, state, bundle.files)
    manifest = bundle.manifest
    lease = Lease(run_id=new_id, owner=f"import-{os.getpid()}", token=1, expires_at=now + 300)
    registration = RunRegistration(
        run_id=new_id,
        pipeline=state.pipeline,
        topic=state.topic,
        definition_hash=str(manifest["definition_hash"]),
        definition=bundle.definition,
        # Where it was exported from is no folder of this machine: never its workflow's.
        source=f"<bundle {path.name}>",
        created_at=float(manifest["created_at"]),
    )
    batch = AppendBatch(
        lease=lease,
        events=history,
        summary=_summary(state),
        register=registration,
        artifacts=sorted((sha, file.read_bytes()) for sha, file in bundle.bodies.items()),
    )
    try:
        store.append(batch, now)
    except BaseException:  # not recorded: its files go too, so that a retry finds no folder
        shutil.rmtree(home.archive_dir(new_id) if state.archived else home.live_dir(new_id))
        raise
    store.release_lease(lease)
    stored = store.events(new_id)
    count = len(bundle.events)
    same = [e.hash for e in stored[:count]] == [e.hash for e in bundle.events]
    return Imported(
        run_id=new_id,
        events=len(stored),
        status=state.status.value,
        same_chain=same,
        bundle=bundle,
        trusted=trust,
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name to be had: recorded without one
        return ""


def trust_run(store: Store, run_id: str, by: str | None = None, now: float | None = None) -> None:
    """Record that a person trusts an imported run's definition (it may then be driven)."""
    state = fold([s.event for s in store.events(run_id)])
    if not state.inert:
        raise UsageError(f"run {run_id} is not an inert imported run: nothing to trust")
    now = time.time() if now is None else now
    lease = store.acquire_lease(run_id, f"trust-{os.getpid()}", 30.0, now)
    try:
        event = ev.BundleTrusted(at=max(now, state.updated_at), by=by or _user())
        state = fold([*(s.event for s in store.events(run_id)), event])
        batch = AppendBatch(
            lease=lease,
            events=[NewEvent(event=event, why="a person trusted the bundle's definition")],
            summary=_summary(state),
        )
        store.append(batch, now)
    finally:
        store.release_lease(lease)


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
        estimated=state.estimated,
    )


def _place_files(home: Home, run_id: str, state: RunState, files: dict[str, Path]) -> None:
    """Move the run's files into its directory (before the ledger knows the run; removed
    again when recording it fails)."""
    base = home.archive_dir(run_id) if state.archived else home.live_dir(run_id)
    base.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        target = home.inside(base, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(source, target)


@dataclass(frozen=True, kw_only=True)
class RunCheck:
    """What `verify RUN` found in a store."""

    report: chain.ChainReport
    head: str | None
    bodies: int  # output bodies checked against their hashes
    imported_head: str | None = None  # imported: where the bundle's history ended


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
    imported = next((e for e in reversed(events) if e.kind == "run_imported"), None)
    return RunCheck(
        report=report,
        head=events[-1].hash if events else None,
        bodies=checked,
        imported_head=None if imported is None else imported.data.get("chain_head"),
    )
