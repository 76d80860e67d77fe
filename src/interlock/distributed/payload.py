"""What travels with a queued attempt, and how a worker turns it back into a `TaskSpec`.

The payload carries every field of the `TaskSpec` except local paths: the inputs it reads
travel as content-addressed artifacts (name, file name, SHA-256) and are written into a
private directory on the worker before the executor starts.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import orjson

from interlock.core.workflow import Worker
from interlock.distributed.artifacts import ArtifactStore
from interlock.runtime.artifacts import write_atomic
from interlock.runtime.executors import TaskSpec

RECORD_FOLDERS = ("prompts", "logs")  # what an attempt records beside its output
RECORD_LIMIT = 256 << 10  # bytes of one record sent with a result (its end, if longer)
# A task's journals (a tool loop's turns, a `call:` worker's model calls): they travel whole
# with its attempts and their results, so that an attempt on any worker goes on from what an
# earlier one recorded. A journal past the limit does not travel (the attempt starts afresh).
JOURNAL_LIMIT = 1 << 20


def journal_names(task_id: str) -> tuple[str, str]:
    """The journal files of a task, in the run's `journal/` folder."""
    return f"{task_id}.jsonl", f"{task_id}.calls.jsonl"


def read_journals(run_dir: Path, task_id: str) -> dict[str, str]:
    """The task's journals in `run_dir/journal`, by file name (those too big left out)."""
    found: dict[str, str] = {}
    for name in journal_names(task_id):
        path = run_dir / "journal" / name
        try:
            if path.stat().st_size <= JOURNAL_LIMIT:
                found[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # none yet, or unreadable: it starts afresh
            continue
    return found


def keep_journals(run_dir: Path, task_id: str, journals: object) -> list[str]:
    """Write the journals a payload or a result carries into `run_dir/journal` (only the
    task's own file names: they are data from another machine); returns what was not kept."""
    if not isinstance(journals, dict):
        return ["journals that are not a mapping"]
    names = journal_names(task_id)
    problems: list[str] = []
    for name, text in journals.items():
        if name not in names or not isinstance(text, str):
            problems.append(f"{name!r}: not a journal of task {task_id}")
            continue
        try:
            (run_dir / "journal").mkdir(parents=True, exist_ok=True)
            write_atomic(run_dir / "journal" / name, text.encode("utf-8"))
        except OSError as exc:
            problems.append(f"{name!r}: {exc.strerror or exc}")
    return problems


def idempotency_key(run_id: str, task_id: str, attempt: int) -> str:
    """The key handed to side effects: the same for every delivery of one attempt."""
    return hashlib.sha256(f"{run_id}/{task_id}/{attempt}".encode()).hexdigest()[:32]


def scopes(pipeline: str, worker: Worker, model: str | None) -> list[str]:
    """The limit scopes an attempt counts against."""
    found = [f"pipeline:{pipeline}", f"kind:{worker.kind}"]
    if model:
        found.append(f"model:{model}")
    return found


def to_payload(spec: TaskSpec, pipeline: str, artifacts: ArtifactStore) -> dict[str, Any]:
    """The queue payload of `spec`; its inputs are uploaded on the way, those not stored yet
    (one query asks which; outputs recorded with their completions usually are)."""
    bodies = [(name, path.name, path.read_bytes()) for name, path in spec.reads]
    digests = [hashlib.sha256(data).hexdigest() for _, _, data in bodies]
    missing = artifacts.missing(digests) if digests else set()
    reads = []
    for (name, file_name, data), sha in zip(bodies, digests, strict=True):
        if sha in missing:
            artifacts.put(data)
            missing.discard(sha)
        reads.append([name, file_name, sha])
    return {
        "run_id": spec.run_id,
        "task_id": spec.task_id,
        "attempt": spec.attempt,
        "pipeline": pipeline,
        "worker": spec.worker.model_dump(mode="json", by_alias=True),
        "task": spec.task,
        "topic": spec.topic,
        "inputs": spec.inputs,
        "item": spec.item,
        "reads": reads,
        "model": spec.model,
        "idempotency_key": spec.idempotency_key,
        "workflow_dir": str(spec.workflow_dir) if spec.workflow_dir else None,
        "tool_decisions": spec.tool_decisions,
        **(
            {"journals": journals}
            if (journals := read_journals(spec.run_dir, spec.task_id))
            else {}
        ),
    }


WORKER_CACHE = 256  # worker definitions a worker process keeps parsed
_workers: dict[bytes, Worker] = {}
_caches_lock = threading.Lock()  # specs are built in several threads


def parsed_worker(definition: dict[str, Any]) -> Worker:
    """The `Worker` of a payload's definition, parsed once per distinct definition: every
    attempt of a task carries the same one, and validating it is a sizeable share of a
    no-op task's CPU on a worker. (`Worker` is frozen, so attempts may share it.)"""
    key = orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)
    worker = _workers.get(key)
    if worker is None:
        worker = Worker.model_validate(definition)
        with _caches_lock:
            if len(_workers) >= WORKER_CACHE:
                _workers.pop(next(iter(_workers)))
            _workers[key] = worker
    return worker


_folders: dict[str, Path] = {}  # workflow folders found on this machine (they stay)


def local_folder(text: str | None) -> Path | None:
    """The workflow folder a payload names, if this machine has it (a worker elsewhere may
    not: its executors then go without). Found once per process: every attempt of a run
    names the same folder, and looking costs a `stat` and a `Path` each time."""
    if not text:
        return None
    found = _folders.get(text)
    if found is None and os.path.isdir(text):
        found = Path(text)
        with _caches_lock:
            if len(_folders) >= WORKER_CACHE:
                _folders.pop(next(iter(_folders)))
            _folders[text] = found
    return found


def to_spec(payload: dict[str, Any], workdir: Path, artifacts: ArtifactStore) -> TaskSpec:
    """Rebuild the `TaskSpec` on a worker, with inputs materialised under `workdir` (which
    exists afterwards only if there were inputs: executors make what they need)."""
    inputs_dir = workdir / "inputs"
    reads: list[tuple[str, Path]] = []
    bodies = artifacts.get_many(sha for _, _, sha in payload["reads"])
    for index, (name, file_name, sha) in enumerate(payload["reads"]):
        # Fan-in reads several files of one name: keep each in its own folder.
        target = inputs_dir / str(index) / Path(file_name).name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bodies[sha])
        reads.append((name, target))
    if payload.get("journals"):  # what earlier attempts of the task recorded, anywhere
        keep_journals(workdir, payload["task_id"], payload["journals"])
    return TaskSpec(
        run_id=payload["run_id"],
        task_id=payload["task_id"],
        attempt=payload["attempt"],
        worker=parsed_worker(payload["worker"]),
        task=payload["task"],
        topic=payload["topic"],
        inputs=payload["inputs"],
        item=payload["item"],
        reads=reads,
        output=workdir / "output.part",
        run_dir=workdir,
        model=payload["model"],
        idempotency_key=payload["idempotency_key"],
        workflow_dir=local_folder(payload.get("workflow_dir")),
        pipeline=payload.get("pipeline", ""),
        tool_decisions=payload.get("tool_decisions") or {},
    )


def keep_records(run_dir: Path, records: object) -> list[str]:
    """Write the records a remote attempt sent with its result (`{"prompts/<task>.<n>.md":
    text, ...}`) into the run's folder, where an attempt run here leaves its own; returns
    what could not be kept and why. Only plain names in the record folders are taken: a
    result is data from another machine, and no path in it may reach elsewhere."""
    problems: list[str] = []
    if not isinstance(records, dict):
        return ["records that are not a mapping"]
    for path, text in records.items():
        folder, _, name = str(path).partition("/")
        plain = name not in ("", ".", "..") and not any(c in name for c in "/\\\0")
        if folder not in RECORD_FOLDERS or not plain or not isinstance(text, str):
            problems.append(f"{path!r}: not a record")
            continue
        try:
            (run_dir / folder).mkdir(exist_ok=True)
            (run_dir / folder / name).write_text(text, encoding="utf-8")
        except OSError as exc:
            problems.append(f"{path!r}: {exc.strerror or exc}")
    return problems
