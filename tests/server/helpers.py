"""A real uvicorn server on a loopback port, in a thread of the test process, and the
workflows and worker functions the server tests use."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import uvicorn
from websockets.sync.client import connect

from interlock.runtime.executors import TaskContext, register
from interlock.server.app import build_app
from interlock.server.config import ServerConfig
from interlock.server.run import bind, uvicorn_config

SECRET = "test-secret-of-enough-length-for-hs256"
GATE = threading.Event()  # released by a test to let `gated` workers finish
HOLD = threading.Event()  # released by a test to let `held` drafts finish


def _slow(context: TaskContext) -> str:
    time.sleep(0.15)
    role, topic = context.spec.worker.role, context.topic
    return f"# {role}\n\nNotes on **{topic}**.\n\n- point one\n- point two\n"


async def _gated(context: TaskContext) -> str:
    while not GATE.is_set():  # a coroutine, so cancelling the run stops it at once
        await asyncio.sleep(0.02)
    return f"{context.spec.worker.role} done"


async def _held(context: TaskContext) -> str:
    while not HOLD.is_set():
        await asyncio.sleep(0.02)
    return f"# {context.spec.worker.role}\n\nHeld notes on **{context.topic}**.\n"


def _many(context: TaskContext) -> str:
    return f"{context.spec.task_id} ok"


def _edit(context: TaskContext) -> str:
    return context.read("draft.md") + "\n\n## Verdict\n\nApproved text, `final`."


register("srv.slow", _slow)
register("srv.gated", _gated)
register("srv.held", _held)
register("srv.many", _many)
register("srv.edit", _edit)

WORKFLOW = """
review:
  description: draft, pause for a person, then edit
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: drafter, call: srv.slow, output: draft.md}
    - id: edit
      workers:
        - {role: editor, call: srv.edit, reads: [draft.md], final: true}
quick:
  phases:
    - id: only
      workers:
        - {role: solo, call: srv.slow, final: true}
wide:
  phases:
    - id: fan
      workers:
        - {role: w1, call: srv.many}
        - {role: w2, call: srv.many}
        - {role: w3, call: srv.many}
        - {role: w4, call: srv.many}
        - {role: w5, call: srv.many}
        - {role: w6, call: srv.many}
    - id: join
      workers:
        - {role: joiner, call: srv.many, final: true}
held:
  description: a draft that waits for the test, a pause, then an edit
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: drafter, call: srv.held, output: draft.md}
    - id: edit
      workers:
        - {role: editor, call: srv.edit, reads: [draft.md], final: true}
gated:
  phases:
    - id: wait
      workers:
        - {role: waiter, call: srv.gated, final: true}
modelled:
  phases:
    - id: write
      workers:
        - {role: author, model: sonnet, task: "Write about {{ topic }}", final: true}
signalled:
  phases:
    - id: ship
      wait_for: {signal: payment, schema: {type: object, required: [amount]}}
      workers:
        - {role: shipper, call: srv.slow, final: true}
broken:
  phases:
    - id: crash
      workers:
        - {role: crasher, command: ["{python}", "-c", "raise SystemExit('no luck')"], final: true}
"""


def write_workflow(directory: Path, text: str = WORKFLOW) -> Path:
    """The test workflow file, in `directory`."""
    path = directory / "workflows.yaml"
    path.write_text(text)
    return path


def token(scopes: list[str], *, secret: str = SECRET, ttl: float = 600) -> str:
    """A bearer token (expired when `ttl` is negative)."""
    now = int(time.time())
    claims = {"sub": "tester", "scope": " ".join(scopes), "iat": now, "exp": now + int(ttl)}
    return jwt.encode(claims, secret, algorithm="HS256")


class Server:
    """`interlock serve` in a thread, on 127.0.0.1 and a free port."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.app = build_app(config)
        self.sock = bind(config.host, 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.ws_url = self.url.replace("http://", "ws://")
        self.server = uvicorn.Server(uvicorn_config(self.app, config))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    @property
    def service(self) -> Any:
        """The running service (orchestrator, hub, store)."""
        return self.app.state.service

    def stop(self) -> None:
        """Stop gracefully: tasks stopped, leases handed back, store closed."""
        self.http.close()
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()

    def start_run(self, pipeline: str, topic: str = "testing", **extra: Any) -> str:
        """Start a run through the API; returns its id."""
        response = self.http.post("/api/runs", json={"pipeline": pipeline, "topic": topic, **extra})
        assert response.status_code == 201, response.text
        return str(response.json()["run_id"])

    def wait_status(self, run_id: str, *statuses: str, timeout: float = 15) -> dict[str, Any]:
        """Poll the run until it reaches one of `statuses`."""
        deadline = time.time() + timeout
        while True:
            run: dict[str, Any] = self.http.get(f"/api/runs/{run_id}").json()
            if run.get("status") in statuses:
                return run
            if time.time() > deadline:
                raise AssertionError(f"run {run_id} stayed {run.get('status')}: {run}")
            time.sleep(0.05)

    def messages(
        self, path: str, until_final: bool = True, **options: Any
    ) -> Iterator[dict[str, Any]]:
        """Messages of a WebSocket stream (until the final event by default)."""
        with connect(f"{self.ws_url}{path}", open_timeout=5, **options) as socket:
            while True:
                message = json.loads(socket.recv(timeout=20))
                yield message
                if until_final and message.get("final"):
                    return
