"""Live progress: WebSocket and Server-Sent Events endpoints over the same replay-then-live
streams. A client resumes with `?since=` (a run's seq, or the global event id for all runs)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, WebSocket
from fastapi.responses import StreamingResponse
from starlette.websockets import WebSocketDisconnect

from interlock.errors import InterlockError
from interlock.runtime.home import check_run_id
from interlock.server.auth import WS_PROTOCOL, Authenticator, Principal, token_from_protocols
from interlock.server.deps import resolve, service, stream_reader
from interlock.server.errors import ApiError, from_interlock
from interlock.server.hub import Chunk, Dropped, Encoded, Subscriber
from interlock.server.service import Service
from interlock.server.streams import all_stream, board_stream, run_stream
from interlock.server.wire import raw_sender

router = APIRouter()
VIEWS = ("events", "summary")  # of /ws/runs: every event, or run summaries per tick
KEEPALIVE = 15.0  # seconds between SSE comments, so proxies keep idle streams open


def resume_hint(message: Encoded, per_run: bool, last: int) -> int:
    """The cursor after `message`: seq for one run's stream, global id for all runs."""
    if message.type != "event":
        return last
    return message.seq if per_run else message.id


def frames(chunk: list[Encoded], batch: bool) -> list[str]:
    """The frames that carry a chunk: one JSON array of them all (`?batch=1`: one send per
    chunk, whatever the event rate), or one message per frame."""
    if batch and len(chunk) > 1:
        if isinstance(chunk, Chunk):  # shared by the clients that are level: joined once
            if chunk.frame is None:
                chunk.frame = "[" + ",".join(m.text for m in chunk) + "]"
            return [chunk.frame]
        return ["[" + ",".join(m.text for m in chunk) + "]"]
    return [m.text for m in chunk]


def dropped_message(last: int) -> dict[str, Any]:
    """What a client that fell behind is told before it is disconnected."""
    return {
        "type": "dropped",
        "message": "this client fell too far behind and is disconnected; reconnect with since",
        "since": last,
    }


async def _open(websocket: WebSocket, svc: Service) -> tuple[bool, Principal | None]:
    """Check Origin before accepting, then the token; returns (accepted, principal)."""
    auth: Authenticator = websocket.app.state.auth
    headers = websocket.headers
    try:
        auth.check_origin(headers.get("origin"), headers.get("host"))
    except ApiError:
        await websocket.close(code=1008)  # before accept: the handshake is refused (403)
        return False, None
    token, offered = token_from_protocols(headers.get("sec-websocket-protocol"))
    await websocket.accept(subprotocol=WS_PROTOCOL if offered else None)
    client = websocket.client.host if websocket.client else "?"
    try:
        principal = auth.principal(token or websocket.query_params.get("token"), client)
        auth.require(principal, "read")
    except ApiError as error:
        body = {"type": "error", "error": {"code": error.code, "message": error.message}}
        await websocket.send_json(body)
        await websocket.close(code=4401 if error.status == 401 else 4403, reason=error.code)
        return False, None
    return True, principal


async def _serve(
    websocket: WebSocket,
    svc: Service,
    stream: AsyncIterator[Any],
    per_run: bool,
    since: int,
    batch: bool,
    *,
    dropped: asyncio.Event,
    leave: Callable[[], None],
    wire: Callable[[str], bytes] | None = None,
) -> None:
    """Send the stream until it ends, the client leaves, or the client falls behind (the feed
    sets `dropped`); `leave` unsubscribes it from the feed. `wire` gives a frame shared by
    every client as bytes serialized once, sent as they are when the connection allows."""
    last = since
    svc.metrics.clients.inc()
    raw = raw_sender(websocket) if wire is not None else None

    async def pump() -> None:
        nonlocal last
        async for chunk in stream:
            if raw is not None and wire is not None and len(chunk) == 1:
                await raw.send(wire(chunk[0].text))
            else:
                for frame in frames(chunk, batch):
                    await websocket.send_text(frame)
            for message in reversed(chunk):  # the cursor is the chunk's last event
                if message.type == "event":
                    last = resume_hint(message, per_run, last)
                    break

    left = asyncio.Event()  # the client closed (or the connection broke)

    async def listen() -> None:
        try:
            while True:
                await websocket.receive_text()  # clients need not send; this sees them leave
        except (WebSocketDisconnect, RuntimeError):
            left.set()

    tasks = {
        asyncio.ensure_future(pump()),
        asyncio.ensure_future(listen()),
        asyncio.ensure_future(dropped.wait()),
    }
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        await _stop(pending)
        failed = [t.exception() for t in done if not t.cancelled() and t.exception()]
        behind = dropped.is_set() or any(isinstance(e, Dropped) for e in failed)
        if not left.is_set():
            # Bounded: a client that stopped reading must not hold this handler.
            with contextlib.suppress(Exception):
                if behind:
                    svc.metrics.dropped.inc()
                    await asyncio.wait_for(websocket.send_json(dropped_message(last)), 1.0)
                    await asyncio.wait_for(websocket.close(code=4008, reason="behind"), 1.0)
                else:
                    await asyncio.wait_for(websocket.close(code=1000), 1.0)
    finally:
        await _stop(tasks)
        with contextlib.suppress(Exception):
            await aclose(stream)
        leave()
        svc.metrics.clients.dec()


async def _stop(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel `tasks` and wait until they have ended, so none is left pending."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def aclose(stream: AsyncIterator[Any]) -> None:
    """Finish an async generator now rather than whenever it is collected."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


@router.websocket("/ws/runs/{run_id}")
async def ws_run(websocket: WebSocket, run_id: str, since: int = 0, batch: bool = False) -> None:
    """One message per event of the run (replayed after `since`, then live); with `batch`,
    a frame may hold a JSON array of several messages."""
    svc: Service = websocket.app.state.service
    accepted, _ = await _open(websocket, svc)
    if not accepted:
        return
    try:
        run_id = svc.api.resolve(check_run_id(run_id))
    except InterlockError as exc:
        error = from_interlock(exc)
        await websocket.send_json(
            {"type": "error", "error": {"code": error.code, "message": error.message}}
        )
        await websocket.close(code=4404)
        return
    subscriber = svc.hub.subscribe(run_id)
    stream = run_stream(svc.hub, subscriber, run_id, max(0, since))
    await _serve(
        websocket,
        svc,
        stream,
        True,
        since,
        batch,
        dropped=subscriber.dropped,
        leave=lambda: svc.hub.unsubscribe(subscriber),
    )


@router.websocket("/ws/runs")
async def ws_all(
    websocket: WebSocket, since: int | None = None, batch: bool = False, view: str = "events"
) -> None:
    """One message per event of every run (after global id `since`, or from now); with
    `batch`, a frame may hold a JSON array of several messages. With `view=summary`, a `runs`
    message per tick instead, with the latest summary of each run that changed (what a list of
    runs shows); `since` does not apply: a client that reconnects reads the list again."""
    svc: Service = websocket.app.state.service
    accepted, _ = await _open(websocket, svc)
    if not accepted:
        return
    if view not in VIEWS:
        message = f"view={view!r} is not a view of /ws/runs: use one of {', '.join(VIEWS)}"
        await websocket.send_json(
            {"type": "error", "error": {"code": "bad_request", "message": message}}
        )
        await websocket.close(code=4400)
        return
    if view == "summary":
        board = svc.hub.board
        watcher = board.watch()
        summaries = board_stream(board, watcher)
        await _serve(
            websocket,
            svc,
            summaries,
            False,
            svc.hub.cursor,
            False,
            dropped=watcher.dropped,
            leave=lambda: board.leave(watcher),
            wire=board.wire,
        )
        return
    subscriber = svc.hub.subscribe(None)
    start = svc.hub.cursor if since is None else since
    stream = all_stream(svc.hub, subscriber, start)
    await _serve(
        websocket,
        svc,
        stream,
        False,
        start,
        batch,
        dropped=subscriber.dropped,
        leave=lambda: svc.hub.unsubscribe(subscriber),
    )


async def _sse(
    svc: Service, subscriber: Subscriber, stream: AsyncIterator[Any], per_run: bool, since: int
) -> AsyncIterator[str]:
    last = since
    svc.metrics.clients.inc()
    iterator = aiter(stream)
    # The next message is awaited by one task that outlives keepalive ticks: cancelling a
    # pending `anext` would end the stream itself.
    coming: asyncio.Future[Any] | None = None
    try:
        while True:
            if coming is None:
                coming = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({coming}, timeout=KEEPALIVE)
            if not done:
                yield ": keepalive\n\n"
                continue
            arrived, coming = coming, None
            try:
                chunk = arrived.result()
            except StopAsyncIteration:
                return
            except Dropped:
                svc.metrics.dropped.inc()
                yield f"event: dropped\ndata: {json.dumps(dropped_message(last))}\n\n"
                return
            parts = []  # a chunk's events leave in one write
            for message in chunk:
                last = resume_hint(message, per_run, last)
                ident = f"id: {last}\n" if message.type == "event" else ""
                parts.append(f"{ident}event: {message.type}\ndata: {message.text}\n\n")
            yield "".join(parts)
    finally:
        if coming is not None:
            await _stop({coming})
        with contextlib.suppress(Exception):
            await aclose(stream)
        svc.hub.unsubscribe(subscriber)
        svc.metrics.clients.dec()


def _since(request: Request, since: int | None) -> int | None:
    """`?since=`, else the `Last-Event-ID` an EventSource sends when it reconnects."""
    header = request.headers.get("last-event-id", "")
    return since if since is not None else (int(header) if header.isdigit() else None)


SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


@router.get("/api/runs/{run_id}/stream")
async def sse_run(
    request: Request,
    run_id: str,
    svc: Annotated[Service, Depends(service)],
    _: Annotated[Principal, Depends(stream_reader)],
    since: Annotated[int | None, Query(ge=0)] = None,
) -> StreamingResponse:
    """Server-Sent Events form of `/ws/runs/{run_id}`."""
    run_id = resolve(svc, run_id)
    start = _since(request, since) or 0
    subscriber = svc.hub.subscribe(run_id)
    body = _sse(svc, subscriber, run_stream(svc.hub, subscriber, run_id, start), True, start)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


@router.get("/api/stream")
async def sse_all(
    request: Request,
    svc: Annotated[Service, Depends(service)],
    _: Annotated[Principal, Depends(stream_reader)],
    since: Annotated[int | None, Query(ge=0)] = None,
) -> StreamingResponse:
    """Server-Sent Events form of `/ws/runs`."""
    given = _since(request, since)
    start = svc.hub.cursor if given is None else given
    subscriber = svc.hub.subscribe(None)
    body = _sse(svc, subscriber, all_stream(svc.hub, subscriber, start), False, start)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
