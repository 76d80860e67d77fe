"""The REST API: runs, their events and outputs, and people's commands."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from interlock.runtime.family import parents_of
from interlock.runtime.projection import capped_waits, iso, waits_of
from interlock.server import files
from interlock.server import run_list as run_list_api
from interlock.server.auth import Authenticator, Principal
from interlock.server.deps import download_reader, operator, reader, resolve, service
from interlock.server.errors import ApiError
from interlock.server.messages import event_record
from interlock.server.notify import masked_error, sink_label
from interlock.server.reads import Folded
from interlock.server.service import Service
from interlock.server.views import detail_of_state, run_row, with_family
from interlock.storage import run_list

router = APIRouter(prefix="/api")
MAX_SEQ = 2**62  # beyond any seq, and within what SQLite and PostgreSQL integers hold
Svc = Annotated[Service, Depends(service)]
Reader = Annotated[Principal, Depends(reader)]
Downloader = Annotated[Principal, Depends(download_reader)]
# One rate-limit bucket per kind of action: a flood of one never holds up another.
Starter = Annotated[Principal, Depends(operator("start"))]
Approver = Annotated[Principal, Depends(operator("approve"))]
Canceller = Annotated[Principal, Depends(operator("cancel"))]
Resumer = Annotated[Principal, Depends(operator("resume"))]
Signaller = Annotated[Principal, Depends(operator("signal"))]


class StartRun(BaseModel):
    """A run to start from a registered pipeline."""

    pipeline: str = Field(min_length=1, max_length=200)
    topic: str = Field(min_length=1, max_length=10_000)
    inputs: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None


class Note(BaseModel):
    """An optional message kept with an approval or a cancellation."""

    message: str = Field(default="", max_length=10_000)


class SignalBody(BaseModel):
    """A signal's data (any JSON) and optional idempotency key."""

    data: Any = None
    key: str | None = Field(default=None, min_length=1, max_length=200)


@router.get("/health")
async def health() -> dict[str, Any]:
    """Liveness (no auth: it reveals nothing)."""
    return {"ok": True}


@router.get("/me")
async def me(request: Request, who: Reader) -> dict[str, Any]:
    """Who the token names and what it may do (the dashboard enables its buttons by it)."""
    auth: Authenticator = request.app.state.auth
    return {
        "subject": who.subject,
        "scopes": sorted(who.scopes),
        "auth": auth.config.auth_required,
    }


@router.get("/workflows")
async def workflows(svc: Svc, _: Reader) -> list[dict[str, Any]]:
    """The pipelines this server can start."""
    return svc.workflows.describe()


@router.get("/runs")
async def list_runs(
    svc: Svc,
    _: Reader,
    response: Response,
    status: str | None = None,
    pipeline: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    q: Annotated[str | None, Query(max_length=200)] = None,
    since: str | None = None,
    until: str | None = None,
    sort: Annotated[str, Query(pattern="^(created|cost)$")] = "created",
    order: Annotated[str, Query(pattern="^(desc|asc)$")] = "desc",
    cursor: Annotated[str | None, Query(max_length=400)] = None,
    children: Annotated[str, Query(pattern="^(show|hide)$")] = "show",
) -> list[dict[str, Any]]:
    """Runs, newest first (or by `sort` and `order`), filtered by status, pipeline, creation
    time (`since`, `until`: ISO 8601 dates or times) and a search `q` of ids, topics and input
    values; `children=hide` leaves out the child runs of `pipeline` workers, which are listed
    with their `parent_run` otherwise. A full page answers with `X-Next-Cursor`: pass it as
    `cursor` for the next one."""
    query = run_list.RunQuery(
        text=(q.strip() or None) if q else None,
        status=status or None,
        pipeline=pipeline or None,
        children=children == "show",
        created_from=run_list_api.moment(since, "since"),
        created_to=run_list_api.moment(until, "until", end=True),
        sort="cost_usd" if sort == "cost" else "created_at",
        descending=order == "desc",
        after=run_list_api.decode(cursor, sort) if cursor else None,
        limit=limit,
    )
    records = svc.store.search_runs(query)
    if len(records) == limit:
        response.headers["X-Next-Cursor"] = run_list_api.encode(records[-1], sort)
    parents = parents_of(svc.store, [r.run_id for r in records])
    # What each waiting run waits for, folded from its history as `interlock runs` does: the
    # listed summary does not hold it, and a list of runs says why a run waits.
    # On a read thread: folding holds no other request up.
    waits, unreadable = await svc.reads.off_loop(lambda: waits_of(svc.store, records))
    # A running run whose calls wait on a spend cap: its orchestrator's status.json says so.
    capped = await svc.reads.off_loop(
        lambda: capped_waits(svc.api.home.live_dir, records, time.time())
    )
    waits.update({run_id: found["waiting"] for run_id, found in capped.items()})
    rows = [run_row(r, parents.get(r.run_id), waits.get(r.run_id)) for r in records]
    for row in rows:
        if row["run_id"] in unreadable:  # that run's history cannot be read: the rest can
            row["unreadable"] = unreadable[row["run_id"]]
    return rows


@router.post("/runs", status_code=201)
async def start_run(svc: Svc, _: Starter, body: StartRun) -> dict[str, Any]:
    """Start a run of a registered pipeline; the server drives it."""
    inputs = {
        k: v if isinstance(v, str | int | float | bool) else str(v) for k, v in body.inputs.items()
    }
    definition = svc.workflows.get(body.pipeline)
    run_id = svc.api.start(definition, topic=body.topic, inputs=inputs, run_id=body.run_id)
    svc.orchestrator.wake()
    return run_row(svc.store.get_run(run_id))


@router.get("/runs/{run_id}", response_model=None)
async def get_run(svc: Svc, _: Reader, run_id: str) -> Response:
    """A run's state: phases, workers, tasks, costs, warnings."""
    run_id = resolve(svc, run_id)

    def detail(f: Folded) -> dict[str, Any]:
        record = f.record
        assert record is not None  # set by every read
        base = f.remember("detail", lambda: detail_of_state(svc.api, run_id, f.state, record))
        return with_family(svc.api, base, f.state, record)

    return await svc.reads.json(run_id, detail)


EVENTS_PAGE = 1000  # events in a page of /events unless `limit` says otherwise


@router.get("/runs/{run_id}/events", response_model=None)
async def run_events(
    svc: Svc,
    _: Reader,
    run_id: str,
    since: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = EVENTS_PAGE,
) -> Response:
    """A run's history after `since`, a page at a time (`limit`, 1000 by default: a shorter
    page is the last; the next starts after the last `seq`), each event with the rule and
    reason that decided it."""
    run_id = resolve(svc, run_id)
    return await svc.reads.json_off_loop(
        lambda: [event_record(s) for s in svc.store.events(run_id, since, limit)]
    )


@router.get("/runs/{run_id}/outputs", response_model=None)
async def outputs(svc: Svc, _: Reader, run_id: str) -> Response:
    """The outputs committed so far (and `final.md` once delivered): all that is served."""
    run_id = resolve(svc, run_id)
    directory = files.run_dir(svc.home, run_id)
    return await svc.reads.json(run_id, lambda f: files.served(f.state, directory))


@router.get("/runs/{run_id}/outputs/{name:path}", response_model=None)
async def output(
    svc: Svc, _: Downloader, run_id: str, name: str, download: bool = False
) -> Response:
    """One output's text (or as a download): only a file that the outputs list names."""
    run_id = resolve(svc, run_id)
    path = await svc.reads.call(
        run_id, lambda f: files.output_path(svc.home, f.state, run_id, name)
    )
    if download:
        return FileResponse(path, filename=path.name, media_type="text/plain; charset=utf-8")
    text = await svc.reads.off_loop(lambda: path.read_bytes().decode("utf-8", errors="replace"))
    return PlainTextResponse(text, headers={"X-Content-Type-Options": "nosniff"})


@router.post("/runs/{run_id}/approve")
async def approve(svc: Svc, who: Approver, run_id: str, body: Note | None = None) -> dict[str, Any]:
    """Approve a paused run, optionally with a message."""
    run_id = svc.api.approve(resolve(svc, run_id), body.message if body else "", who.subject)
    svc.orchestrator.wake()
    return {"run_id": run_id, "accepted": "approve"}


@router.post("/runs/{run_id}/tool-calls/{task_id}/{turn}/{call}/{verdict}")
async def decide_tool_call(
    svc: Svc,
    who: Approver,
    run_id: str,
    task_id: str,
    turn: int,
    call: int,
    verdict: Literal["approve", "reject"],
    body: Note | None = None,
) -> dict[str, Any]:
    """Let a tool call that waits for a decision run (`approve`), or refuse it (`reject`:
    the model is told so, with the message as the reason). 409 `call_not_waiting` when the
    call does not wait (decided already, never asked, or the run ended)."""
    ref = f"{task_id}/{turn}/{call}"
    run_id = svc.api.decide_call(
        resolve(svc, run_id),
        ref,
        approved=verdict == "approve",
        note=body.message if body else "",
        by=who.subject,
    )
    svc.orchestrator.wake()
    return {"run_id": run_id, "accepted": verdict, "call": ref}


@router.post("/runs/{run_id}/cancel")
async def cancel(svc: Svc, who: Canceller, run_id: str, body: Note | None = None) -> dict[str, Any]:
    """Cancel a run; its in-flight tasks are stopped."""
    run_id = svc.api.cancel(resolve(svc, run_id), body.message if body else "", who.subject)
    svc.orchestrator.wake()
    return {"run_id": run_id, "accepted": "cancel"}


@router.post("/runs/{run_id}/signals/{name}", status_code=202)
async def send_signal(
    svc: Svc,
    who: Signaller,
    request: Request,
    run_id: str,
    name: str,
    body: SignalBody | None = None,
) -> dict[str, Any]:
    """Send signal `name` to a run (kept until a wait takes it); the `Idempotency-Key` header
    or the body's `key` makes a repeated request harmless."""
    body = body or SignalBody()
    key = body.key or request.headers.get("idempotency-key") or None
    receipt = svc.api.signal(resolve(svc, run_id), name, body.data, key=key, by=who.subject)
    svc.orchestrator.look_now()
    return {
        "run_id": receipt.run_id,
        "signal": receipt.name,
        "key": receipt.key,
        "accepted": "ignored" if receipt.duplicate else "signal",
        "duplicate": receipt.duplicate,
        "message": receipt.note,
    }


@router.post("/runs/{run_id}/resume")
async def resume(svc: Svc, _: Resumer, run_id: str) -> dict[str, Any]:
    """Drive a run here again (after it was interrupted elsewhere)."""
    run_id = resolve(svc, run_id)
    status = await svc.reads.call(run_id, lambda f: f.state.status)
    if status.ended:
        raise ApiError(409, "wrong_state", f"run {run_id} already ended ({status.value})")
    if run_id not in svc.orchestrator.drivers:
        svc.orchestrator.take(run_id)
    svc.orchestrator.wake()
    return {"run_id": run_id, "accepted": "resume"}


@router.get("/runs/{run_id}/notifications")
async def notifications(svc: Svc, _: Reader, run_id: str) -> list[dict[str, Any]]:
    """Webhook notifications of a run and whether they were delivered."""
    items = svc.store.outbox_items(resolve(svc, run_id))
    return [
        {
            "sink": sink_label(i.sink),  # its path and query are often its key
            "kind": i.payload.get("kind"),
            "idempotency_key": i.payload.get("idempotency_key"),
            "attempts": i.attempts,
            "delivered_at": iso(i.delivered_at),
            "last_error": masked_error(i.last_error, i.sink),
        }
        for i in items
    ]
