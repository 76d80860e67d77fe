"""Carrying earlier outputs over: the runtime side of reruns (and of the cache).

The orchestrator gives each run a `Reuser`. It stamps every completion with the task's
fingerprint, and before a dispatched task is started it looks for an output to carry over:
the source run's task with the same id (for a rerun) or, when caching is on, any earlier task
of the store with the same fingerprint. The verdict is `core.reuse.judge`'s; the body is
taken from the ledger or the source run's folder and checked against its recorded hash. A
reuse is recorded (`task_reused`) before its file is placed, and a crash in between is
repaired from the same places on resume (`recover`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.fingerprint import (
    Fingerprint,
    fingerprint,
    inputs_part,
    renders_per_task,
    worker_part,
)
from interlock.core.loader import Definition
from interlock.core.reuse import ReuseReason, ReuseVerdict, judge
from interlock.core.state import RunState, TaskState, artifact_name, fold
from interlock.core.workflow import Worker
from interlock.runtime.executors import registered_call
from interlock.runtime.home import Home
from interlock.runtime.models import ModelRunner
from interlock.storage.base import CacheEntry, Store


def model_identity(models: ModelRunner, worker: Worker, workflow_dir: Path | None) -> Any:
    """What a model worker's aliases stand for here: provider, model id, request settings.

    An alias that does not resolve is named as such: the task fails when it runs, and a
    fingerprint must not pretend to know the model behind it.
    """
    if worker.model is None:
        files = code_files(worker, workflow_dir)
        return {"code_files": files} if files else None
    identity = []
    for alias in (worker.model, *worker.fallback_models):
        try:
            model = models.config(workflow_dir).resolve(alias)  # no client, no key needed
        except Exception:  # a configuration problem: reported when the task runs
            identity.append({"alias": alias, "unresolved": True})
            continue
        identity.append(model.for_worker(worker).identity())
    if worker.tools:
        identity.append({"tool_files": tool_files(worker, workflow_dir)})
    return identity


_TOOL_FILE_LIMIT = 1 << 20  # a script, not an interpreter or a binary: those are left out


def tool_files(worker: Worker, workflow_dir: Path | None) -> dict[str, str]:
    """The SHA-256 of each file a stdio tool server's command line names (its script), so
    that an edited server, which may offer other tools, is not reused from an earlier run."""
    hashes: dict[str, str] = {}
    for server in worker.tools:
        for arg in server.mcp or []:
            path = Path(arg) if Path(arg).is_absolute() else (workflow_dir or Path.cwd()) / arg
            try:
                if path.is_file() and path.stat().st_size <= _TOOL_FILE_LIMIT:
                    hashes[arg] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:  # unreadable: the attempt will say so when it starts the server
                continue
    return hashes


def code_files(worker: Worker, workflow_dir: Path | None) -> dict[str, str]:
    """The SHA-256 of the code a command or `call:` worker runs from files of its own, so
    that an edited script or function is never reused from a run that ran the old one: the
    executable its command names by path, the script an interpreter it starts runs, each
    script beside the workflow (under its folder, through `{workflow_dir}` or an absolute
    path) that its command line names, and the source file of its `call:` target (see
    `is_code`). A file its command passes as data (a log, an input, a file elsewhere that
    no interpreter runs) is not code: its changes make no new fingerprint. An interpreter
    or a program on the PATH is left out (too large, or not the user's), and so is a file
    that cannot be read now (the attempt says so when it runs)."""
    hashes: dict[str, str] = {}
    for arg in _code_args(worker, workflow_dir):
        digest = file_hash(Path(arg))
        if digest is not None:
            hashes[arg] = digest
    if worker.call is not None:
        source = call_source(worker.call)
        digest = file_hash(source) if source is not None else None
        if digest is not None:
            hashes[f"call:{worker.call}"] = digest
    return hashes


def missing_code(worker: Worker, workflow_dir: Path | None) -> list[str]:
    """The code files a command worker's command line names (as `code_files` finds them)
    that are not there: its task would fail. A rerun's plan and the rerun itself say so
    from this one check."""
    return [arg for arg in _code_args(worker, workflow_dir) if not Path(arg).exists()]


def _code_args(worker: Worker, workflow_dir: Path | None) -> list[str]:
    """The absolute paths in a command line that are code it runs (`is_code`), with
    `{workflow_dir}` filled in."""
    folder = str(workflow_dir) if workflow_dir is not None else None
    argv = [
        arg.replace("{workflow_dir}", folder) if folder is not None else arg
        for arg in worker.command or []
    ]
    return [
        arg
        for index, arg in enumerate(argv)
        if "{" not in arg and Path(arg).is_absolute() and is_code(argv, index, workflow_dir)
    ]


# Programs whose first argument that is not an option is the script they run (unless an
# option such as -c or -e gives the code inline, or -m names a module).
_INTERPRETER = re.compile(
    r"(python|pypy|sh|bash|zsh|dash|ksh|fish|node|nodejs|deno|bun|ruby|perl|php|rscript|lua"
    r"|luajit|julia|tclsh|pwsh|awk|gawk|jq)[\d.]*(\.exe)?"
)
_INLINE_CODE = frozenset({"-c", "-e", "-m", "--eval", "--command"})
# Names of files beside a workflow that are code when its command line names them.
SCRIPT_SUFFIXES = frozenset(
    {".py", ".sh", ".bash", ".zsh", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".pm", ".php",
     ".r", ".lua", ".jl", ".tcl", ".ps1", ".awk", ".jq", ".sed"}
)  # fmt: skip


def is_code(argv: list[str], index: int, workflow_dir: Path | None) -> bool:
    """Whether `argv[index]`, an absolute path, is code the command runs: the executable
    (`argv[0]`), the script of an interpreter (`python x.py`, `bash x.sh`), or a file under
    the workflow's folder that is a script by its name or is executable. Anything else it
    names (data files, logs, outputs of other runs) is not."""
    if index == 0:
        return True
    path = Path(argv[index])
    if _INTERPRETER.fullmatch(Path(argv[0]).name.lower()) and _script_index(argv) == index:
        return True
    if workflow_dir is None or not path.is_relative_to(workflow_dir):
        return False
    if path.suffix.lower() in SCRIPT_SUFFIXES:
        return True
    try:
        return path.is_file() and bool(path.stat().st_mode & stat.S_IXUSR)
    except OSError:
        return False


def _script_index(argv: list[str]) -> int | None:
    """Where an interpreter's script is in its command line (None: its code is inline)."""
    for index, arg in enumerate(argv[1:], start=1):
        if arg in _INLINE_CODE:
            return None
        if not arg.startswith("-"):
            return index
    return None


def _code_token(identity: Any) -> str:
    """The code files' digests of a command or call worker's identity, as one key."""
    if not identity:
        return ""
    return "|".join(f"{name}={digest}" for name, digest in sorted(identity["code_files"].items()))


def call_source(reference: str) -> Path | None:
    """The file defining a `call:` target: a registered function's, or the module's of
    `package.module:function` (found without running the module; its packages are imported,
    as the call itself would). Where each is defined is looked up once per process."""
    registered = registered_call(reference)
    if registered is not None:
        return _function_file(registered)
    return _module_file(reference.partition(":")[0])


@functools.lru_cache(maxsize=1024)
def _function_file(function: Any) -> Path | None:
    try:
        found = inspect.getsourcefile(function)
    except TypeError:  # a builtin: no source
        return None
    return Path(found) if found else None


_MODULE_FILES: dict[str, Path] = {}


def _module_file(name: str) -> Path | None:
    """A module's source file (remembered once found; one not found yet is looked for again,
    since it may appear)."""
    known = _MODULE_FILES.get(name)
    if known is not None:
        return known
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # not found: the call says so when it runs
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    _MODULE_FILES[name] = Path(spec.origin)
    return _MODULE_FILES[name]


# path -> (modification time, size, SHA-256): a file is read again only once it changed.
_FILE_HASHES: dict[Path, tuple[int, int, str]] = {}
_FILE_LIMIT = 1 << 20  # a script, not an interpreter or a binary: those are left out


def file_hash(path: Path) -> str | None:
    """The SHA-256 of a regular file up to 1 MiB (None otherwise, or when unreadable);
    remembered by modification time and size, so that each run costs a `stat`."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _FILE_LIMIT:
            return None
        known = _FILE_HASHES.get(path)
        if known is not None and known[:2] == (info.st_mtime_ns, info.st_size):
            return known[2]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    _FILE_HASHES[path] = (info.st_mtime_ns, info.st_size, digest)
    return digest


@dataclass
class SourceRun:
    """A finished run whose outputs a rerun may carry over (read once, never written)."""

    run_id: str
    state: RunState
    parts: dict[str, dict[str, str]]  # task id -> the per-part hashes recorded with it
    run_dir: Path
    branches: dict[tuple[str, int], str] = field(default_factory=dict)  # (phase, visit) -> goto

    @classmethod
    def load(cls, store: Store, home: Home, run_id: str) -> SourceRun:
        """Fold the source run's history."""
        stored = store.events(run_id)
        parts: dict[str, dict[str, str]] = {}
        branches: dict[tuple[str, int], str] = {}
        events = [s.event for s in stored]
        for event in events:
            if isinstance(event, (ev.TaskCompleted, ev.TaskReused)) and event.fingerprint_parts:
                parts[event.task_id] = dict(event.fingerprint_parts)
            elif isinstance(event, ev.BranchTaken):
                branches[(event.phase, event.visit)] = event.goto
        return cls(
            run_id=run_id,
            state=fold(events),
            parts=parts,
            run_dir=home.run_dir(run_id),
            branches=branches,
        )


@dataclass
class WorkerMemo:
    """Per role of one definition: the resolved identity and the worker part of fingerprints."""

    identities: dict[str, Any] = field(default_factory=dict)
    # (role, the digests of the code files it runs) -> its worker part
    worker_hashes: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass
class Claim:
    """A reuse to record, with the verified body of the output it carries over."""

    event: ev.TaskReused
    body: bytes


@dataclass
class Reuser:
    """Fingerprints and reuse for one run."""

    store: Store
    home: Home
    models: ModelRunner
    definition: Definition
    workflow_dir: Path | None
    source: SourceRun | None = None
    notes: list[str] = field(default_factory=list)  # why a match could not be used
    verdicts: dict[str, ReuseVerdict] = field(default_factory=dict)
    to_index: list[CacheEntry] = field(default_factory=list)  # for the cache, with the commit
    # What the workers of this definition resolve to and their worker parts, by role: the
    # same for every run of the definition started from the same folder (model settings are
    # read once per folder and process), so the orchestrator shares one `memo` between them
    # instead of hashing each worker's definition again for every run. Workers with tool
    # servers are kept in `own` instead: their scripts are read again for each run, since an
    # edited script must not match an earlier run's output. The code files of commands and
    # `call:` workers are looked at for each task (a `stat` each, `file_hash`).
    memo: WorkerMemo = field(default_factory=lambda: WorkerMemo())
    own: WorkerMemo = field(default_factory=lambda: WorkerMemo())
    # The inputs part by run and by whether the worker is a model: a run's topic and inputs
    # never change.
    _inputs_hashes: dict[tuple[str, bool], str] = field(default_factory=dict)

    def _memo(self, worker: Worker) -> WorkerMemo:
        return self.own if worker.tools else self.memo

    def identity(self, role: str) -> Any:
        """The worker's resolved identity (once per role and process; per run with tools;
        for a command or `call:` worker, the code files it runs, looked at each time)."""
        worker = self.definition.pipeline.worker(role)
        if worker.model is None:
            return model_identity(self.models, worker, self.workflow_dir)
        identities = self._memo(worker).identities
        if role not in identities:
            identities[role] = model_identity(self.models, worker, self.workflow_dir)
        return identities[role]

    def fingerprint(self, state: RunState, task: TaskState) -> Fingerprint:
        """The task's fingerprint in the run's current state."""
        pipeline = self.definition.pipeline
        identity = self.identity(task.role)
        worker = pipeline.worker(task.role)
        hashes = self._memo(worker).worker_hashes
        # A command's or call's part also depends on the code files it runs: kept by their
        # digests, so that an edited script makes a new part and an unchanged one costs none.
        code = (task.role, _code_token(identity) if worker.model is None else "")
        known = hashes.get(code)
        if known is None and not renders_per_task(worker):
            known = worker_part(worker, identity, {})
            hashes[code] = known
        seen = (state.run_id, worker.kind == "model")
        inputs = self._inputs_hashes.get(seen)
        if inputs is None:
            inputs = self._inputs_hashes[seen] = inputs_part(state, worker)
        return fingerprint(pipeline, state, task, identity, worker_hash=known, inputs_hash=inputs)

    def stamp(self, state: RunState, event: ev.TaskCompleted) -> ev.TaskCompleted:
        """The completion with the fingerprint of its task (before it is applied)."""
        task = state.tasks.get(event.task_id)
        if task is None or event.fingerprint is not None:
            return event
        print_ = self.fingerprint(state, task)
        if self.definition.pipeline.cache_for(task.role) is not None and event.sha256:
            self.to_index.append(
                CacheEntry(
                    fingerprint=print_.digest,
                    run_id=state.run_id,
                    task_id=task.task_id,
                    artifact=event.artifact,
                    sha256=event.sha256,
                    size=event.size,
                    values=dict(event.values),
                    completed_at=event.at,
                )
            )
        return dataclasses.replace(
            event, fingerprint=print_.digest, fingerprint_parts=dict(print_.parts)
        )

    def claim(self, state: RunState, task: TaskState, now: float) -> Claim | None:
        """The reuse of `task`'s output, if a matching one can be carried over: the source
        run's first (for a rerun), then the cache's (when the worker has `cache:`)."""
        if task.attempt != 1:
            return None
        if self.source is None and (
            state.no_cache or self.definition.pipeline.cache_for(task.role) is None
        ):
            return None  # nothing to carry over from: no fingerprint needed before it ends
        current = self.fingerprint(state, task)
        if self.source is not None:
            claim = self._from_source(state, task, current, now)
            if claim is not None or self.verdicts[task.task_id].reason is ReuseReason.FORCED:
                return claim
        return self._from_cache(state, task, current, now)

    def _from_source(
        self, state: RunState, task: TaskState, current: Fingerprint, now: float
    ) -> Claim | None:
        source = self.source
        assert source is not None
        candidate = source.state.tasks.get(task.task_id)
        worker = self.definition.pipeline.worker(task.role)
        verdict = judge(
            state,
            task,
            current,
            candidate,
            source_run=source.run_id,
            candidate_parts=source.parts.get(task.task_id),
            missing=frozenset(missing_code(worker, self.workflow_dir)),
        )
        self.verdicts[task.task_id] = verdict
        if not verdict.reuse or candidate is None:
            return None
        assert candidate.sha256 is not None and candidate.artifact is not None
        body = self.body(source.run_dir, candidate.artifact, candidate.sha256)
        if body is None:
            why = f"{candidate.artifact} of {source.run_id} is gone or does not match its hash"
            self.notes.append(f"task {task.task_id} could not reuse its output: {why}; it runs")
            self.verdicts[task.task_id] = ReuseVerdict(
                reuse=False, reason=ReuseReason.NOT_COMPLETED, why=f"runs: {why}"
            )
            return None
        return self._claim(
            task, current, source.run_id, candidate.task_id, body, now, "rerun", candidate.values
        )

    def _from_cache(
        self, state: RunState, task: TaskState, current: Fingerprint, now: float
    ) -> Claim | None:
        cache = self.definition.pipeline.cache_for(task.role)
        if cache is None or state.no_cache:
            return None
        since = now - cache.ttl if cache.ttl is not None else 0.0
        for entry in self.store.cache_find(current.digest, since):
            if entry.run_id == state.run_id:
                continue  # a loop's earlier visit is not a cache hit for its next one
            body = self.body(self.home.run_dir(entry.run_id), entry.artifact, entry.sha256)
            if body is None:
                continue
            self.verdicts[task.task_id] = ReuseVerdict(
                reuse=True,
                reason=ReuseReason.MATCH,
                why=f"reused from the cache: {entry.task_id} of run {entry.run_id}",
            )
            return self._claim(
                task, current, entry.run_id, entry.task_id, body, now, "cache", entry.values
            )
        return None

    def _claim(
        self,
        task: TaskState,
        current: Fingerprint,
        source_run: str,
        source_task: str,
        body: bytes,
        now: float,
        via: str,
        values: dict[str, Any],
    ) -> Claim:
        worker = self.definition.pipeline.worker(task.role)
        event = ev.TaskReused(
            at=now,
            task_id=task.task_id,
            attempt=task.attempt,
            source_run=source_run,
            source_task=source_task,
            artifact=artifact_name(worker.output_name, task.visit, task.item),
            sha256=hashlib.sha256(body).hexdigest(),
            size=len(body),
            values=dict(values),
            fingerprint=current.digest,
            fingerprint_parts=dict(current.parts),
            via=via,
        )
        return Claim(event=event, body=body)

    def body(self, run_dir: Path, artifact: str, sha256: str) -> bytes | None:
        """A recorded output's body, from the ledger or a run's folder, checked by hash."""
        body = self.store.artifact(sha256)
        if body is None:
            try:
                body = (run_dir / artifact).read_bytes()
            except OSError:
                return None
        if hashlib.sha256(body).hexdigest() != sha256:
            return None
        return body

    def take_index(self, state: RunState) -> list[CacheEntry]:
        """The cache entries of the completions about to be recorded (handed to the same
        commit: `AppendBatch.cache`), those the state still holds; none are kept after."""
        entries = [
            e
            for e in self.to_index
            if (task := state.tasks.get(e.task_id)) is not None and task.sha256 == e.sha256
        ]
        self.to_index.clear()
        return entries

    def recover(self, task: TaskState) -> bytes | None:
        """The body of a reused output whose file a crash kept from being placed."""
        if task.reused_from is None:
            return None
        if task.sha256 is None or task.artifact is None:
            return None
        run_id = task.reused_from.partition("/")[0]
        return self.body(self.home.run_dir(run_id), task.artifact, task.sha256)
