"""The API behind the run page's depth: every attempt with its timing and cost, one attempt in
detail (the exact prompt, the answer, a command's logs), and the pipeline as a graph.

A prompt and a command's logs are served only through the attempt detail, each capped and
passed through the same credential masking as every provider message; the rest of a run's
directory stays unserved (`interlock.server.files`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from interlock.errors import InterlockError
from interlock.providers.redaction import scrub
from interlock.server import files
from interlock.server.attempts import costs, timeline
from interlock.server.auth import Principal
from interlock.server.deps import reader, resolve, service
from interlock.server.errors import ApiError
from interlock.server.graph import describe, path_taken
from interlock.server.service import Service
from interlock.storage.base import StoredEvent

router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]
TEXT_LIMIT = 200_000  # characters of a prompt or an answer the detail carries
LOG_LIMIT = 64_000  # the tail of a command's stdout or stderr


def _history(svc: Service, run_id: str) -> tuple[str, list[StoredEvent]]:
    run_id = resolve(svc, run_id)
    return run_id, svc.store.events(run_id)


@router.get("/runs/{run_id}/attempts")
async def attempts(svc: Svc, _: Reader, run_id: str) -> dict[str, Any]:
    """Every attempt of every task (queued, started, finished, outcome, model, tokens by kind,
    cost), the spans the run spent paused, and cost per task, per phase and for the run."""
    run_id, events = _history(svc, run_id)
    record = svc.store.get_run(run_id)
    pipeline = svc.orchestrator.definition(record.pipeline, record.definition_hash).pipeline
    found = timeline(events)
    return {
        "run_id": run_id,
        "start": found.start,
        "end": found.end,
        "now": time.time(),
        "status": record.summary.status,
        "attempts": [a.as_dict() for a in found.attempts],
        "pauses": found.pauses,
        "costs": costs(pipeline, found.attempts),
    }


@router.get("/runs/{run_id}/attempts/{seq}")
async def attempt_detail(svc: Svc, _: Reader, run_id: str, seq: int) -> dict[str, Any]:
    """One attempt (named by the seq of its dispatch) with the exact prompt it was sent
    (system and user), a tool loop's transcript, its answer, and a command's stdout and
    stderr."""
    run_id, events = _history(svc, run_id)
    found = next((a for a in timeline(events).attempts if a.seq == seq), None)
    if found is None:
        raise ApiError(
            404,
            "not_found",
            f"run {run_id} has no attempt {seq}: GET /api/runs/{run_id}/attempts lists them",
        )
    directory = files.run_dir(svc.home, run_id)
    stem = f"{found.task_id}.{found.attempt}"
    prompt = _read(svc, directory, f"prompts/{stem}.md", TEXT_LIMIT, tail=False)
    detail = found.as_dict()
    detail["prompt"] = _split_prompt(prompt) if prompt is not None else None
    # A worker with `tools:` keeps its tool loop (each model turn, call and result) beside it.
    detail["tools"] = _read(svc, directory, f"prompts/{stem}.tools.md", TEXT_LIMIT, tail=False)
    detail["answer"] = None
    if found.artifact:
        # The output as it stands (after an edit, the edited text): only a served file.
        state = svc.api.state(run_id)
        try:
            path = files.output_path(svc.home, state, run_id, found.artifact)
            detail["answer"] = _cap(path.read_bytes().decode("utf-8", "replace"), TEXT_LIMIT)
        except ApiError:
            detail["answer"] = None
    detail["logs"] = {
        stream: _read(svc, directory, f"logs/{stem}.{stream}", LOG_LIMIT, tail=True)
        for stream in ("stdout", "stderr")
    }
    return detail


@router.get("/runs/{run_id}/graph")
async def run_graph(svc: Svc, _: Reader, run_id: str) -> dict[str, Any]:
    """The run's pinned pipeline as a graph (phases, workers, `reads:` and `next:` edges) with
    the path the run took and how often each edge was followed."""
    run_id, events = _history(svc, run_id)
    record = svc.store.get_run(run_id)
    pipeline = svc.orchestrator.definition(record.pipeline, record.definition_hash).pipeline
    return {**describe(pipeline), **path_taken(events)}


@router.get("/workflows/{name}/graph")
async def workflow_graph(svc: Svc, _: Reader, name: str) -> dict[str, Any]:
    """A registered pipeline's current definition as a graph."""
    try:
        definition = svc.workflows.get(name)
    except InterlockError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return describe(definition.pipeline)


def _read(svc: Service, directory: Path, name: str, limit: int, *, tail: bool) -> str | None:
    """A file of the run's directory as masked text (its tail for logs), None when absent."""
    try:
        path = svc.home.inside(directory, name)
    except InterlockError:
        return None
    if not path.is_file():
        return None
    data = path.read_bytes()
    if len(data) > limit:
        data = data[-limit:] if tail else data[:limit]
    return scrub(data.decode("utf-8", "replace"))


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n… ({len(text) - limit} more)"


SYSTEM, USER = "# System\n\n", "\n\n# User\n\n"


def _split_prompt(record: str) -> dict[str, str]:
    """The recorded prompt (`runtime.models`: comment header, `# System`, `# User`) in its
    parts; a record of another shape is given whole as the user part."""
    head, found, rest = record.partition(SYSTEM)
    if not found:
        return {"header": "", "system": "", "user": record}
    system, found, user = rest.partition(USER)
    if not found:
        return {"header": head.strip(), "system": "", "user": rest}
    return {"header": head.strip(), "system": system, "user": user}
