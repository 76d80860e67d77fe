"""A local server speaking OpenAI's Batch API and Anthropic's Message Batches, with faults.

OpenAI: ``POST /v1/files`` (multipart, purpose=batch), ``GET /v1/files/{id}/content``,
``POST /v1/batches``, ``GET /v1/batches`` (newest first, ``after``/``limit``),
``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``. Anthropic: ``POST/GET
/v1/messages/batches``, ``GET /v1/messages/batches/{id}``, ``.../cancel`` and
``.../results``. A batch ends after `polls_to_end` retrievals (OpenAI's: and no sooner than
`seconds_to_end` after it was created, however many processes poll it); its answer to each request
echoes the request's last message. Faults: `fail` (custom_ids containing it answer with an
error), `expire` (the batch expires, answering only its first request), `never_end`,
`partial` (the results file is cut inside its last line), `down` (every request 503s).
It runs in a thread of its own; `created` counts the batches ever created.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class BatchServerState:
    """What the server holds and how it misbehaves."""

    polls_to_end: int = 1
    seconds_to_end: float = 0.0
    fail: str = ""
    expire: bool = False
    never_end: bool = False
    partial: bool = False
    down: bool = False
    created: int = 0
    cancelled: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    made: dict[str, float] = field(default_factory=dict)  # monotonic time of each creation
    inputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _echo(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return f"answer: {content}"


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "object": "chat.completion",
        "created": int(time.time()), "model": body.get("model", "gpt-test"),
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": _echo(body)}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }  # fmt: skip


def _message(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant",
        "model": body.get("model", "claude-test"), "stop_reason": "end_turn",
        "stop_sequence": None, "content": [{"type": "text", "text": _echo(body)}],
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }  # fmt: skip


class BatchServer:
    """The server, started on 127.0.0.1 at a free port by `start`."""

    def __init__(self, state: BatchServerState | None = None) -> None:
        self.state = state or BatchServerState()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> BatchServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(port), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self, port: int) -> None:
        app = web.Application(middlewares=[self._faults])
        r = app.router
        r.add_post("/v1/files", self.upload)
        r.add_get("/v1/files/{id}/content", self.download)
        r.add_post("/v1/batches", self.create)
        r.add_get("/v1/batches", self.list)
        r.add_get("/v1/batches/{id}", self.retrieve)
        r.add_post("/v1/batches/{id}/cancel", self.cancel)
        r.add_post("/v1/messages/batches", self.a_create)
        r.add_get("/v1/messages/batches", self.a_list)
        r.add_get("/v1/messages/batches/{id}", self.a_retrieve)
        r.add_post("/v1/messages/batches/{id}/cancel", self.a_cancel)
        r.add_get("/v1/messages/batches/{id}/results", self.a_results)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @web.middleware
    async def _faults(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.state.down:
            return web.json_response({"error": {"message": "unavailable"}}, status=503)
        response: web.StreamResponse = await handler(request)
        return response

    # OpenAI

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("purpose") != "batch":
            return web.json_response({"error": {"message": "purpose must be batch"}}, status=400)
        part = form["file"]
        data = part.file.read()  # type: ignore[union-attr]
        file_id = f"file-{uuid.uuid4().hex[:12]}"
        self.state.files[file_id] = data
        return web.json_response({
            "id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
            "filename": part.filename, "purpose": "batch", "status": "processed"})  # type: ignore[union-attr]  # fmt: skip

    async def download(self, request: web.Request) -> web.Response:
        data = self.state.files.get(request.match_info["id"])
        if data is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        lines = [orjson.loads(x) for x in self.state.files[body["input_file_id"]].splitlines()]
        self.state.created += 1
        batch_id = f"batch_{uuid.uuid4().hex[:12]}"
        self.state.inputs[batch_id] = lines
        self.state.batches[batch_id] = {
            "id": batch_id, "object": "batch", "endpoint": body["endpoint"], "errors": None,
            "input_file_id": body["input_file_id"], "completion_window": body["completion_window"],
            "status": "validating", "output_file_id": None, "error_file_id": None,
            "created_at": int(time.time()), "metadata": body.get("metadata"),
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
        }  # fmt: skip
        self.state.polls[batch_id] = 0
        self.state.made[batch_id] = time.monotonic()
        return web.json_response(self.state.batches[batch_id])

    async def list(self, request: web.Request) -> web.Response:
        found = sorted(  # an Anthropic batch of the same server is not on this list
            (b for b in self.state.batches.values() if b["id"].startswith("batch_")),
            key=lambda b: -b["created_at"],
        )
        after = request.query.get("after")
        if after:
            ids = [b["id"] for b in found]
            found = found[ids.index(after) + 1 :] if after in ids else []
        limit = int(request.query.get("limit", "20"))
        page = found[:limit]
        return web.json_response({"object": "list", "data": page, "has_more": len(found) > limit,
                                  "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None})  # fmt: skip

    def _advance(self, batch_id: str) -> dict[str, Any]:
        batch = self.state.batches[batch_id]
        if batch["status"] in ("completed", "expired", "cancelled", "failed"):
            return batch
        self.state.polls[batch_id] += 1
        young = time.monotonic() - self.state.made[batch_id] < self.state.seconds_to_end
        if self.state.never_end or young or self.state.polls[batch_id] < self.state.polls_to_end:
            batch["status"] = "in_progress"
            return batch
        lines = self.state.inputs[batch_id]
        out, err = [], []
        for n, line in enumerate(lines):
            if self.state.expire and n > 0:
                err.append({"id": f"r{n}", "custom_id": line["custom_id"], "response": None,
                            "error": {"code": "batch_expired",
                                      "message": "This request could not be executed before the "
                                      "completion window expired."}})  # fmt: skip
            elif self.state.fail and self.state.fail in line["custom_id"]:
                error = {"error": {"message": "bad request", "type": "invalid_request_error"}}
                response = {"status_code": 400, "request_id": "x", "body": error}
                err.append({"id": f"r{n}", "custom_id": line["custom_id"], "error": None,
                            "response": response})  # fmt: skip
            else:
                out.append({"id": f"r{n}", "custom_id": line["custom_id"], "error": None,
                            "response": {"status_code": 200, "request_id": f"q{n}",
                                         "body": _chat(line["body"])}})  # fmt: skip
        batch["status"] = "expired" if self.state.expire else "completed"
        batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = f"file-{uuid.uuid4().hex[:12]}"
                data = b"".join(orjson.dumps(x) + b"\n" for x in rows)
                if self.state.partial and name == "output_file_id":
                    data = data[: len(data) - 40]
                self.state.files[file_id] = data
                batch[name] = file_id
        return batch

    async def retrieve(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        if batch_id not in self.state.batches:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        return web.json_response(self._advance(batch_id))

    async def cancel(self, request: web.Request) -> web.Response:
        batch = self.state.batches[request.match_info["id"]]
        batch["status"] = "cancelled"
        self.state.cancelled += 1
        return web.json_response(batch)

    # Anthropic

    def _a_view(self, batch_id: str) -> dict[str, Any]:
        batch = self.state.batches[batch_id]
        return {k: v for k, v in batch.items() if not k.startswith("_")}

    async def a_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.state.created += 1
        batch_id = f"msgbatch_{uuid.uuid4().hex[:12]}"
        self.state.inputs[batch_id] = body["requests"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.state.batches[batch_id] = {
            "id": batch_id, "type": "message_batch", "processing_status": "in_progress",
            "request_counts": {"processing": len(body["requests"]), "succeeded": 0, "errored": 0,
                               "canceled": 0, "expired": 0},
            "ended_at": None, "created_at": now, "expires_at": now, "archived_at": None,
            "cancel_initiated_at": None, "results_url": None, "_epoch": time.time(),
        }  # fmt: skip
        self.state.polls[batch_id] = 0
        return web.json_response(self._a_view(batch_id))

    async def a_list(self, request: web.Request) -> web.Response:
        found = sorted(
            (b for b in self.state.batches.values() if "_epoch" in b), key=lambda b: -b["_epoch"]
        )
        data = [self._a_view(b["id"]) for b in found if b["id"].startswith("msgbatch_")]
        return web.json_response({"data": data, "has_more": False,
                                  "first_id": data[0]["id"] if data else None,
                                  "last_id": data[-1]["id"] if data else None})  # fmt: skip

    async def a_retrieve(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        batch = self.state.batches[batch_id]
        if batch["processing_status"] == "in_progress":
            self.state.polls[batch_id] += 1
            if not self.state.never_end and self.state.polls[batch_id] >= self.state.polls_to_end:
                batch["processing_status"] = "ended"
                batch["ended_at"] = batch["created_at"]
                batch["results_url"] = f"{self.url}/v1/messages/batches/{batch_id}/results"
        return web.json_response(self._a_view(batch_id))

    async def a_cancel(self, request: web.Request) -> web.Response:
        batch = self.state.batches[request.match_info["id"]]
        batch["processing_status"] = "ended"
        batch["results_url"] = f"{self.url}/v1/messages/batches/{batch['id']}/results"
        batch["_cancelled"] = True
        self.state.cancelled += 1
        return web.json_response(self._a_view(batch["id"]))

    async def a_results(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        batch = self.state.batches[batch_id]
        rows = []
        for n, line in enumerate(self.state.inputs[batch_id]):
            if batch.get("_cancelled"):
                result: dict[str, Any] = {"type": "canceled"}
            elif self.state.expire and n > 0:
                result = {"type": "expired"}
            elif self.state.fail and self.state.fail in line["custom_id"]:
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "invalid_request_error", "message": "bad request"}}}  # fmt: skip
            else:
                result = {"type": "succeeded", "message": _message(line["params"])}
            rows.append({"custom_id": line["custom_id"], "result": result})
        data = b"".join(orjson.dumps(x) + b"\n" for x in rows)
        if self.state.partial:
            data = data[: len(data) - 40]
        return web.Response(body=data, content_type="application/binary")
