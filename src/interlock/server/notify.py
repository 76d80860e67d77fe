"""Notifications: a pause sends a summary of the phase's outputs, a delivery the final output,
a failure (or cancellation) the reason.

The stream always carries them (as the `notification` of the event's message). Webhooks go
through a durable outbox: a producer turns events after its stored cursor into outbox rows
and moves the cursor in the same transaction; senders claim due rows, POST them with an
`Idempotency-Key` derived from the run id and the event's seq, and record the outcome. A
restart resumes from the cursor and the undelivered rows, so nothing is lost or queued twice.

A webhook's URL is a secret (a Slack-style URL's path is its key): it is shown and logged as
`sink_label` gives it, the scheme and host alone, and masked in every error recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from interlock.core.state import RunState
from interlock.errors import InterlockError
from interlock.providers.redaction import MASK, MIN_SECRET, Secret, redact, safe_url
from interlock.runtime.home import Home
from interlock.server.files import real_run_dir
from interlock.server.hub import last_event_id
from interlock.storage.base import OutboxItem, Store, StoredEvent

log = logging.getLogger("interlock.server")

KINDS = {"paused": "paused", "delivered": "delivered", "run_failed": "failed"}
KINDS["run_cancelled"] = "cancelled"
EXCERPT = 2000  # characters of each phase output in a pause summary
FULL = 100_000  # characters of the final output in a delivery notification
CURSOR = "notifications"
MAX_ATTEMPTS = 12


def sink_label(url: str) -> str:
    """How a webhook's URL is shown and logged: its scheme and host (and port), with a mask
    for its path and query string, which often are its key; never its user info."""
    shown = safe_url(url)
    if shown.startswith("("):
        return shown  # an unreadable URL
    scheme, _, rest = shown.partition("://")
    host, slash, path = rest.partition("/")
    if not (path or "?" in url.partition("://")[2]):
        return f"{scheme}://{host}{slash}"
    return f"{scheme}://{host}/{MASK}"


def masked_error(error: str | None, url: str) -> str | None:
    """A sending error with the webhook's URL (and its parts, as an HTTP library may quote
    them) masked."""
    if not error:
        return error
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(error, [Secret(url)])
    pieces = [url, f"{parts.path}?{parts.query}", parts.path, parts.query]
    return redact(error, [Secret(piece) for piece in pieces if len(piece) >= MIN_SECRET])


def idempotency_key(run_id: str, seq: int) -> str:
    """The same key for the same event, on every server and after every restart."""
    return f"{run_id}:{seq}"


def _read(home: Home, run_id: str, name: str, limit: int) -> str:
    for base in (home.live_dir(run_id), home.archive_dir(run_id)):
        with contextlib.suppress(OSError, ValueError, InterlockError):
            real = real_run_dir(home, base)
            if real is None:
                continue  # a run directory that leads out of the state directory
            path = home.inside(real, name)
            with open(path, encoding="utf-8") as handle:
                return handle.read(limit)
    return ""


def notification(home: Home, stored: StoredEvent, state: RunState) -> dict[str, Any] | None:
    """What to tell people about `stored`, or None if it is not worth a notification."""
    kind = KINDS.get(stored.kind)
    if kind is None:
        return None
    note: dict[str, Any] = {
        "kind": kind,
        "idempotency_key": idempotency_key(stored.run_id, stored.seq),
        "run_id": stored.run_id,
        "seq": stored.seq,
        "at": stored.at,
        "pipeline": state.pipeline,
        "topic": state.topic,
    }
    if kind == "paused":
        phase = stored.data.get("phase", "")
        outputs = []
        task_ids = state.current.task_ids if state.current else []
        for task_id in task_ids:
            task = state.tasks[task_id]
            if task.artifact:
                excerpt = _read(home, stored.run_id, task.artifact, EXCERPT)
                outputs.append({"role": task.role, "name": task.artifact, "excerpt": excerpt})
        note["title"] = f"{state.pipeline}: paused after {phase}, waiting for approval"
        note["phase"] = phase
        note["outputs"] = outputs
        note["text"] = "\n\n".join(f"## {o['name']}\n{o['excerpt']}" for o in outputs)
    elif kind == "delivered":
        name = str(stored.data.get("artifact", ""))
        note["title"] = f"{state.pipeline}: delivered {name}"
        note["output"] = name
        note["text"] = _read(home, stored.run_id, name, FULL)
    else:
        note["title"] = f"{state.pipeline}: {kind}"
        note["text"] = state.failure or ""
    return note


def annotator(home: Home) -> Callable[[StoredEvent, RunState], dict[str, Any] | None]:
    """The hub's annotate hook: attach the notification (title and text) to stream messages."""

    def annotate(stored: StoredEvent, state: RunState) -> dict[str, Any] | None:
        return notification(home, stored, state)

    return annotate


def backoff(attempts: int) -> float:
    """Seconds before the next try: 1, 2, 4... capped at five minutes."""
    return float(min(300, 2 ** max(0, attempts - 1)))


class Webhooks:
    """The outbox producer and sender for the configured webhook URLs."""

    def __init__(self, store: Store, home: Home, urls: list[str], owner: str) -> None:
        self.store, self.home, self.urls, self.owner = store, home, urls, owner
        self.states: dict[str, RunState] = {}
        self.wake = asyncio.Event()
        self.on_sent: Callable[[str], None] = lambda outcome: None

    def start(self) -> None:
        """First start against this store: begin at the end of the feed, not its beginning."""
        if self.store.event_cursor(CURSOR) == 0:
            end = last_event_id(self.store)
            if end:
                self.store.outbox_enqueue(CURSOR, end, [], time.time())

    def produce(self, fold_state: Callable[[StoredEvent], RunState]) -> int:
        """Queue notifications for events after the cursor; returns how many were queued."""
        queued = 0
        while True:
            cursor = self.store.event_cursor(CURSOR)
            batch = self.store.all_events(cursor, 200)
            if not batch:
                return queued
            items = []
            for stored in batch:
                if stored.kind not in KINDS:
                    continue
                note = notification(self.home, stored, fold_state(stored))
                for url in self.urls:
                    key = hashlib.sha256(f"{note and note['idempotency_key']}|{url}".encode())
                    items.append(
                        OutboxItem(
                            key=key.hexdigest()[:40],
                            sink=url,
                            run_id=stored.run_id,
                            payload=note or {},
                        )
                    )
            self.store.outbox_enqueue(CURSOR, batch[-1].id, items, time.time())
            queued += len(items)
            if items:
                self.wake.set()

    async def send_due(self, client: httpx.AsyncClient) -> int:
        """POST every due notification once; returns how many were delivered."""
        delivered = 0
        for item in self.store.outbox_claim(self.owner, time.time(), hold=60.0):
            headers = {"Idempotency-Key": str(item.payload.get("idempotency_key", item.key))}
            try:
                response = await client.post(item.sink, json=item.payload, headers=headers)
                error = None if response.is_success else f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                error = masked_error(f"{type(exc).__name__}: {exc}", item.sink)
            now = time.time()
            if error is None:
                self.store.outbox_settle(item.key, self.owner, now)
                delivered += 1
                self.on_sent("delivered")
                continue
            retry_at = now + backoff(item.attempts) if item.attempts < MAX_ATTEMPTS else None
            log.warning(
                "webhook %s: %s", sink_label(item.sink), error, extra={"run_id": item.run_id}
            )
            self.store.outbox_settle(item.key, self.owner, now, error=error, retry_at=retry_at)
            self.on_sent("failed" if retry_at is not None else "gave_up")
        return delivered

    async def run(self, stop: asyncio.Event, fold_state: Callable[[StoredEvent], RunState]) -> None:
        """Produce and send until `stop` is set (woken by new events, else every half second)."""
        async with httpx.AsyncClient(timeout=10.0, headers={"User-Agent": "interlock"}) as client:
            while not stop.is_set():
                try:
                    self.produce(fold_state)
                    await self.send_due(client)
                except Exception:  # keep sending; a failed round is retried from the outbox
                    log.exception("webhook round failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), 0.5)
                self.wake.clear()
