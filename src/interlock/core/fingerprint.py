"""What a task's output depends on, as one hash: the key that lets a run reuse an output.

A task's fingerprint covers what the worker is (its command, call target, or resolved model
and request settings), its rendered task, the hash of every file it reads, the topic and
inputs it can see, and its fan-out item. Two tasks with the same fingerprint were asked the
same thing of the same worker: a rerun may carry the earlier output over instead of paying
for it again.

Each part is hashed on its own as well, so that a task which cannot be reused can say which
part changed. Everything here is pure: what a model alias resolves to is read by the runtime
and passed in as `identity`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson

from interlock.core.decide import failed_item_values
from interlock.core.review import sent_back
from interlock.core.state import RunState, TaskState
from interlock.core.templates import TemplateProblem, render_task
from interlock.core.validate import read_name
from interlock.core.visit_items import visit_item
from interlock.core.workflow import Pipeline, Worker

FINGERPRINT_VERSION = 1  # part of every fingerprint: a change of recipe never matches old ones

PARTS = ("worker", "task", "reads", "inputs", "item")
"""The parts of a fingerprint, in the order explanations name them."""

PART_WORDS = {
    "worker": "the worker's definition (command, call, model or its settings, or a script it runs)",
    "task": "the rendered task",
    "reads": "an input file it reads",
    "inputs": "the topic or inputs",
    "item": "the fan-out item",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Fingerprint:
    """A task's fingerprint: the digest that is compared, and one hash per part."""

    digest: str
    parts: dict[str, str]

    def changed(self, other_parts: dict[str, str] | None) -> list[str]:
        """The parts that differ from `other_parts` (every part when those are unknown)."""
        if not other_parts:
            return list(PARTS)
        return [p for p in PARTS if self.parts.get(p) != other_parts.get(p)]


def _hash(value: Any) -> str:
    # Canonical JSON (sorted keys, no whitespace, UTF-8) so equal values always hash alike;
    # values JSON cannot hold (never produced by a workflow or the ledger) are spelled by repr.
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=repr)
    except TypeError:  # what orjson refuses (huge integers, non-text keys)
        data = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr).encode()
    return hashlib.sha256(data).hexdigest()


_NO_ITEM = _hash(None)  # the item part of every task outside a fan-out
_NO_READS = _hash([])  # the reads part of every task whose worker reads nothing


@functools.lru_cache(maxsize=1024)
def _plain_task_hash(source: str) -> str:
    """The task part of a worker whose task has no template syntax: it renders as itself
    (`render_task`), the same for every task of the worker, so it is hashed once per text."""
    return _hash(source)


def template_values(
    state: RunState, task: TaskState, pipeline: Pipeline | None = None
) -> dict[str, Any]:
    """The names a task template may read, as the runtime renders it."""
    return {
        **state.inputs,
        "topic": state.topic,
        "inputs": state.inputs,
        "item": visit_item(state, task.phase, task.visit, task.item),
        "item_index": task.item,
        "visit": task.visit,
        "run_id": state.run_id,
        "feedback": state.feedback,  # a rejection's text: a new visit's task differs with it
        "failed_items": failed_item_values(state, pipeline),  # a task listing them differs too
    }


def _render(source: str, values: dict[str, Any]) -> str:
    try:
        return render_task(source, values)
    except TemplateProblem:
        return source  # the task fails when it runs; its template is what it depends on


def read_hashes(pipeline: Pipeline, state: RunState, task: TaskState) -> list[list[Any]]:
    """(file name, sha256) of each output the task reads, in the order it reads them.

    The same selection the runtime makes: the latest visit of the writer, the task's own
    lane in a fan-out, every item otherwise.
    """
    worker = pipeline.worker(task.role)
    hashes: list[list[Any]] = []
    for entry in worker.reads:
        name, _ = read_name(entry)
        role = pipeline.writers.get(name)
        latest = state.outputs.get(role) if role is not None else None
        if role is None or latest is None:
            hashes.append([name, None])
            continue
        visit, by_item = latest
        same_lane = pipeline.phase_of(role).id == task.phase and task.item is not None
        items = [task.item] if same_lane else sorted(by_item, key=lambda k: -1 if k is None else k)
        for item in items:
            if item not in by_item:
                continue
            tid = f"{role}@{visit}" if item is None else f"{role}@{visit}.{item}"
            source = state.tasks.get(tid)
            hashes.append([by_item[item], source.sha256 if source is not None else None])
    return hashes


# Worker fields that do not shape the output: how long and how often it may try, where it sits.
# Every other field (system, schema, request params, extract, output name, ...) counts, so a
# key added to workers later counts as well unless it is named here.
_NOT_OUTPUT = frozenset(
    {"task", "command", "reads", "timeout", "grace", "retries", "backoff", "tags", "cache", "final"}
)


def worker_definition(worker: Worker, identity: Any, values: dict[str, Any]) -> dict[str, Any]:
    """What the worker is: its kind and target, and everything that shapes its output file."""
    definition: dict[str, Any] = worker.model_dump(
        mode="json", by_alias=True, exclude=set(_NOT_OUTPUT)
    )
    definition["kind"] = worker.kind
    definition["output_file"] = worker.output_name
    definition["identity"] = identity
    if worker.command is not None:
        definition["command"] = [_render(arg, values) for arg in worker.command]
    if worker.system is not None and "{" in worker.system:
        definition["system"] = _render(worker.system, values)  # as the model is sent it
    return definition


def worker_part(worker: Worker, identity: Any, values: dict[str, Any]) -> str:
    """The hash of `worker_definition` (the same for every task of a worker whose command
    renders no template: callers may keep it)."""
    return _hash(worker_definition(worker, identity, values))


def renders_per_task(worker: Worker) -> bool:
    """Whether the worker's command or system prompt differs from task to task (it renders
    a template)."""
    texts = [*(worker.command or []), worker.system or ""]
    return any(token in text for text in texts for token in ("{{", "{%", "{#"))


def inputs_part(state: RunState, worker: Worker) -> str:
    """The hash of the topic and inputs the worker sees (the same for every task of a run
    and kind of worker: callers may keep it)."""
    # Model workers see the topic (every prompt carries it) and whatever inputs their task
    # renders; commands and calls are handed every input, so all of them count.
    inputs: dict[str, Any] = {"topic": state.topic}
    if worker.kind != "model":
        inputs["inputs"] = state.inputs
    return _hash(inputs)


def fingerprint(
    pipeline: Pipeline,
    state: RunState,
    task: TaskState,
    identity: Any = None,
    *,
    worker_hash: str | None = None,
    inputs_hash: str | None = None,
) -> Fingerprint:
    """The fingerprint of `task` in the run `state` describes.

    Args:
        pipeline: The run's pinned pipeline.
        state: The run's state, in which every output the task reads is completed.
        task: The task.
        identity: What the worker's model aliases resolve to (provider, provider model id,
            request settings), as the runtime found them; None for command and call workers.
        worker_hash: `worker_part` computed earlier for this worker (see `renders_per_task`).
        inputs_hash: `inputs_part` computed earlier for this run and kind of worker.
    """
    worker = pipeline.worker(task.role)
    values = template_values(state, task, pipeline)
    parts = {
        "worker": worker_hash or worker_part(worker, identity, values),
        "task": (
            _plain_task_hash(worker.task)
            if "{" not in worker.task  # the test `render_task` skips rendering by
            else _hash(_render(worker.task, values))
        ),
        "reads": _hash(read_hashes(pipeline, state, task)) if worker.reads else _NO_READS,
        "inputs": inputs_hash or inputs_part(state, worker),
        "item": _NO_ITEM if values["item"] is None else _hash(values["item"]),
    }
    sent = sent_back(pipeline, state, task)
    if sent is not None:  # only then, so that every other fingerprint stays as it was
        parts["feedback"] = _hash([sent.feedback, sent.previous_sha256])
    digest = _hash({"v": FINGERPRINT_VERSION, **parts})
    short = {k: v[:16] for k, v in parts.items()}
    # Each file the worker runs, named beside the parts (the worker part covers them all
    # already, so the digest is the same without them): a change can say which file it was.
    for name, file_digest in code_files_of(identity).items():
        short[f"{FILE_PART}{name}"] = file_digest[:16]
    return Fingerprint(digest=digest, parts=short)


FILE_PART = "file:"
"""The prefix of the entries of recorded parts that name a file the worker runs."""


def code_files_of(identity: Any) -> dict[str, str]:
    """The files (name -> SHA-256) a worker's identity says it runs: a command's or call's
    code files, a model worker's tool server scripts."""
    if isinstance(identity, dict):
        files = identity.get("code_files")
        return dict(files) if isinstance(files, dict) else {}
    found: dict[str, str] = {}
    if isinstance(identity, list):
        for entry in identity:
            if isinstance(entry, dict) and isinstance(entry.get("tool_files"), dict):
                found.update(entry["tool_files"])
    return found


def changed_files(parts: dict[str, str], other_parts: dict[str, str] | None) -> list[str]:
    """The files the worker runs whose hash differs between two recorded parts, or that one
    of them lacks (empty when either was recorded without naming its files and none differ)."""
    if not other_parts:
        return []
    mine = {k: v for k, v in parts.items() if k.startswith(FILE_PART)}
    theirs = {k: v for k, v in other_parts.items() if k.startswith(FILE_PART)}
    if not theirs:
        return []  # recorded before files were named: which one changed is not known
    return sorted(k.removeprefix(FILE_PART) for k in mine.keys() | theirs.keys()
                  if mine.get(k) != theirs.get(k))  # fmt: skip
