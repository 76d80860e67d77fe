"""The API behind the run page's depth: every attempt with its timing and cost, one attempt in
detail (the exact prompt, the answer, a command's logs), and the pipeline as a graph.

A prompt and a command's logs are served only through the attempt detail, each capped and
passed through the same credential masking as every provider message; the rest of a run's
directory stays unserved (`interlock.server.files`).
"""

from __future__ import annotations

import bisect
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from interlock.core.workflow import Pipeline
from interlock.errors import InterlockError
from interlock.providers.redaction import scrub
from interlock.server import files
from interlock.server.attempts import Attempt, costs
from interlock.server.auth import Principal
from interlock.server.deps import reader, resolve, service
from interlock.server.errors import ApiError
from interlock.server.graph import describe
from interlock.server.reads import Folded, render
from interlock.server.service import Service

router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]
TEXT_LIMIT = 200_000  # characters of a prompt or an answer the detail carries
LOG_LIMIT = 64_000  # the tail of a command's stdout or stderr


PAGE = 1000  # attempts in a page of /attempts unless `limit` says otherwise
MAX_PAGE = 10_000
Since = Annotated[int, Query(ge=0, le=2**62, description="only attempts dispatched after this seq")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="attempts in the page")]


def _pipeline(svc: Service, folded: Folded) -> Pipeline:
    record = folded.record
    assert record is not None  # set by every read before `build` runs
    return svc.orchestrator.definition(record.pipeline, record.definition_hash).pipeline


def _seqs(folded: Folded) -> list[int]:
    """The dispatch seq of each attempt, in order (for finding a page or an attempt)."""
    return folded.remember("seqs", lambda: [a.seq for a in folded.timeline.attempts])


@router.get("/runs/{run_id}/attempts", response_model=None)
async def attempts(
    svc: Svc, _: Reader, run_id: str, since: Since = 0, limit: Limit = PAGE
) -> Response:
    """Attempts of every task in dispatch order, a page at a time (`limit`, 1000 by default;
    `next_since` is the `since` of the next page, null on the last): queued, started,
    finished, outcome, model, tokens by kind, cost. With them the spans the run spent paused,
    and cost per task, per phase and for the run (over every attempt, not only the page's)."""
    run_id = resolve(svc, run_id)

    def page(folded: Folded) -> bytes:
        found = folded.timeline
        first = bisect.bisect_right(_seqs(folded), since)
        shown = found.attempts[first : first + limit]
        more = first + limit < len(found.attempts)
        record = folded.record
        assert record is not None
        body = {
            "run_id": run_id,
            "start": found.start,
            "end": found.end,
            "status": record.summary.status,
            "total": len(found.attempts),
            "next_since": shown[-1].seq if more and shown else None,
            "attempts": [a.as_dict() for a in shown],
            "pauses": found.timeline().pauses,
            "costs": folded.remember(
                "costs", lambda: costs(_pipeline(svc, folded), found.attempts)
            ),
        }
        return render(body)

    body = await svc.reads.call(
        run_id, lambda folded: folded.remember(("attempts", since, limit), lambda: page(folded))
    )
    # `now` is the server's clock at the answer (the dashboard draws running attempts to it):
    # the rest is kept for the run's last event.
    return Response(b'{"now":%r,' % time.time() + body[1:], media_type="application/json")


@router.get("/runs/{run_id}/attempts/{seq}", response_model=None)
async def attempt_detail(svc: Svc, _: Reader, run_id: str, seq: int) -> Response:
    """One attempt (named by the seq of its dispatch) with the exact prompt it was sent
    (system and user), a tool loop's transcript, its answer, and a command's stdout and
    stderr."""
    run_id = resolve(svc, run_id)

    def build(folded: Folded) -> dict[str, Any]:
        index = bisect.bisect_left(_seqs(folded), seq)
        listed = folded.timeline.attempts
        if index == len(listed) or listed[index].seq != seq:
            raise ApiError(
                404,
                "not_found",
                f"run {run_id} has no attempt {seq}: GET /api/runs/{run_id}/attempts lists them",
            )
        return _detail(svc, run_id, listed[index], folded)

    return await svc.reads.json(run_id, build)


def _detail(svc: Service, run_id: str, found: Attempt, folded: Folded) -> dict[str, Any]:
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
        try:
            path = files.output_path(svc.home, folded.state, run_id, found.artifact)
            detail["answer"] = _cap(path.read_bytes().decode("utf-8", "replace"), TEXT_LIMIT)
        except ApiError:
            detail["answer"] = None
    detail["logs"] = {
        stream: _read(svc, directory, f"logs/{stem}.{stream}", LOG_LIMIT, tail=True)
        for stream in ("stdout", "stderr")
    }
    return detail


@router.get("/runs/{run_id}/graph", response_model=None)
async def run_graph(svc: Svc, _: Reader, run_id: str) -> Response:
    """The run's pinned pipeline as a graph (phases, workers, `reads:` and `next:` edges) with
    the path the run took and how often each edge was followed."""
    run_id = resolve(svc, run_id)

    def graph(folded: Folded) -> bytes:
        return render({**describe(_pipeline(svc, folded)), **folded.path.path()})

    body = await svc.reads.call(run_id, lambda f: f.remember("graph", lambda: graph(f)))
    return Response(body, media_type="application/json")


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
