"""The API of the iteration loop: rerun a run (or plan the rerun), compare two runs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from interlock.errors import InterlockError
from interlock.runtime.rerun import SourceNotEnded
from interlock.server.auth import Principal
from interlock.server.deps import operator, reader, resolve, service
from interlock.server.errors import ApiError, from_interlock
from interlock.server.service import Service
from interlock.server.views import run_row

router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]
Rerunner = Annotated[Principal, Depends(operator("rerun"))]


class Rerun(BaseModel):
    """What a rerun changes; everything left out is the source run's."""

    from_phase: str | None = Field(default=None, max_length=200)
    pipeline: str | None = Field(
        default=None,
        max_length=200,
        description="Run this registered pipeline's current definition instead of the "
        "source's pinned one (after an edit of the workflow file).",
    )
    topic: str | None = Field(default=None, min_length=1, max_length=10_000)
    inputs: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None
    no_cache: bool = False
    dry_run: bool = False


@router.post("/runs/{run_id}/rerun", status_code=201)
async def rerun(
    svc: Svc, _: Rerunner, run_id: str, response: Response, body: Rerun | None = None
) -> dict[str, Any]:
    """Start a rerun of a finished run: every task whose fingerprint matches the source's
    (and comes before `from_phase`) is reused at no cost; the server drives the rest. With
    `dry_run`, only the plan (reuse or run, and why, per task) is returned."""
    body = body or Rerun()
    source = resolve(svc, run_id)
    inputs = {
        k: v if isinstance(v, str | int | float | bool) else str(v) for k, v in body.inputs.items()
    }
    try:
        definition = svc.workflows.get(body.pipeline) if body.pipeline else None
        if body.dry_run:
            response.status_code = 200
            plan = svc.api.plan_rerun(
                source,
                from_phase=body.from_phase,
                topic=body.topic,
                inputs=inputs,
                no_cache=body.no_cache,
                definition=definition,
            )
            return plan.as_dict()
        new = svc.api.rerun(
            source,
            from_phase=body.from_phase,
            topic=body.topic,
            inputs=inputs,
            run_id=body.run_id,
            no_cache=body.no_cache,
            definition=definition,
        )
    except SourceNotEnded as exc:
        raise ApiError(409, "wrong_state", exc.message) from None
    except InterlockError as exc:
        raise from_interlock(exc) from None
    svc.orchestrator.wake()
    return {**run_row(svc.store.get_run(new)), "rerun_of": source}


@router.get("/runs/{run_id}/diff/{other}")
async def diff(
    svc: Svc, _: Reader, run_id: str, other: str, outputs: bool = False
) -> dict[str, Any]:
    """How run `other` differs from `run_id`: tasks, outputs, values, cost and decisions."""
    a, b = resolve(svc, run_id), resolve(svc, other)
    # Two whole histories are read and compared: on a read thread, not the event loop.
    found: dict[str, Any] = await svc.reads.off_loop(
        lambda: svc.api.diff(a, b, outputs=outputs).as_dict()
    )
    return found
