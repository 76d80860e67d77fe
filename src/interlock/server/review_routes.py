"""The REST API of a review: edit an output of a paused run, reject it, export it.

Edits and rejections are checked at once (a clear 400/404/409 and nothing recorded) and then
recorded by the orchestrator driving the run at its next tick, like an approval.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from interlock.core.review import EDIT_LIMIT
from interlock.runtime import bundle
from interlock.server.auth import Principal
from interlock.server.deps import exporter, operator, resolve, service
from interlock.server.errors import ApiError
from interlock.server.service import Service

router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]
Editor = Annotated[Principal, Depends(operator("edit"))]
Rejecter = Annotated[Principal, Depends(operator("reject"))]
Exporter = Annotated[Principal, Depends(exporter)]


NOTE_LIMIT = 2_000


class Rejection(BaseModel):
    """Where a paused run goes back to, and why."""

    to: str = Field(min_length=1, max_length=200)
    message: str = Field(default="", max_length=100_000)


@router.put("/runs/{run_id}/outputs/{name}")
async def edit_output(
    svc: Svc, who: Editor, run_id: str, name: str, request: Request
) -> dict[str, Any]:
    """Replace output `name` of a paused run with the request body (UTF-8 text). A note kept
    with the edit comes as the `note` query parameter (any text, URL-encoded) or, for plain
    ASCII, the `X-Interlock-Note` header; the parameter wins when both are given."""
    body = await request.body()
    if len(body) > EDIT_LIMIT:
        raise ApiError(413, "too_large", f"an edited output may have at most {EDIT_LIMIT} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_request", "the new output must be UTF-8 text") from None
    # Header values are Latin-1 on the wire, so a note in any other script would be mangled
    # there: the query parameter carries it URL-encoded instead.
    note = request.query_params.get("note", request.headers.get("x-interlock-note", ""))
    if len(note) > NOTE_LIMIT:
        raise ApiError(413, "too_large", f"an edit's note may have at most {NOTE_LIMIT} characters")
    run_id = svc.api.edit(resolve(svc, run_id), name, text, note=note, by=who.subject)
    svc.orchestrator.wake()
    return {"run_id": run_id, "accepted": "edit", "output": name}


@router.post("/runs/{run_id}/reject")
async def reject(svc: Svc, who: Rejecter, run_id: str, body: Rejection) -> dict[str, Any]:
    """Send a paused run back to phase `to` with `message` as its feedback."""
    run_id = svc.api.reject(resolve(svc, run_id), body.to, body.message, who.subject)
    svc.orchestrator.wake()
    return {"run_id": run_id, "accepted": "reject", "to": body.to}


@router.get("/runs/{run_id}/export")
async def export(svc: Svc, _: Exporter, run_id: str) -> Response:
    """The run as one verifiable .tar.gz (what `interlock export` writes); needs the `export`
    scope, with the token in the Authorization header."""
    run_id = resolve(svc, run_id)

    def export_bundle() -> bytes:
        with tempfile.TemporaryDirectory() as scratch:
            target = Path(scratch) / f"{run_id}.tar.gz"
            bundle.export_run(svc.api.store, svc.api.home, run_id, target)
            return target.read_bytes()

    data = await svc.reads.bundle(run_id, export_bundle)
    headers = {"Content-Disposition": f'attachment; filename="{run_id}.tar.gz"'}
    return Response(data, media_type="application/gzip", headers=headers)
