"""Webhooks exactly once across restarts, and one scheduled run per slot across servers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import ServerFactory

from interlock.server.schedule import latest_slot, slot_run_id


class Receiver:
    """A local webhook endpoint that records every POST (and can be told to fail)."""

    def __init__(self) -> None:
        self.fail = False
        self.attempts: list[tuple[str, dict[str, Any], int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = 503 if receiver.fail else 204
                receiver.attempts.append((self.headers["Idempotency-Key"], body, status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def delivered(self) -> list[tuple[str, dict[str, Any]]]:
        """(key, body) of each successful POST."""
        return [(k, b) for k, b, status in self.attempts if status == 204]

    def wait(self, condition: Any, timeout: float = 15) -> None:
        """Poll until `condition()` holds."""
        deadline = time.time() + timeout
        while not condition():
            assert time.time() < deadline, f"receiver saw {self.attempts}"
            time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A running receiver."""
    found = Receiver()
    yield found
    found.httpd.shutdown()
    found.httpd.server_close()


def test_webhooks_exactly_once_across_restarts(
    make_server: ServerFactory, receiver: Receiver
) -> None:
    """A notification queued before a restart is sent after it, and none is ever sent twice."""
    receiver.fail = True
    first = make_server(webhooks=[receiver.url])
    quick = first.start_run("quick", "hooks")
    first.wait_status(quick, "delivered")
    receiver.wait(lambda: len(receiver.attempts) >= 1)
    first.stop()  # the delivery notification is still undelivered in the outbox

    receiver.fail = False
    second = make_server(webhooks=[receiver.url])
    review = second.start_run("review", "hooks")
    second.wait_status(review, "paused")
    receiver.wait(lambda: len(receiver.delivered()) >= 2)
    notes = second.http.get(f"/api/runs/{quick}/notifications").json()
    assert notes[0]["delivered_at"] and notes[0]["attempts"] >= 2
    second.stop()

    # A restart must not send anything again. Rather than watch for a while, run one more
    # pipeline and wait until its notification arrives: by then the third server has been
    # through its outbox, so a resend of the first two would have come before it.
    third = make_server(webhooks=[receiver.url])
    later = third.start_run("quick", "later")
    third.wait_status(later, "delivered")
    receiver.wait(lambda: any(b["run_id"] == later for _, b in receiver.delivered()))
    third.stop()
    delivered = receiver.delivered()
    keys = [k for k, _ in delivered]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 3
    assert delivered[-1][1]["run_id"] == later
    bodies = {b["kind"]: b for _, b in delivered[:2]}
    assert (
        bodies["delivered"]["run_id"] == quick
        and "Notes on **hooks**" in bodies["delivered"]["text"]
    )
    assert (
        bodies["paused"]["run_id"] == review
        and bodies["paused"]["outputs"][0]["name"] == "draft.md"
    )
    for key, body in delivered:
        assert key == body["idempotency_key"] == f"{body['run_id']}:{body['seq']}"


SCHEDULED = """
nightly:
  schedule: "0 0 * * *"
  phases:
    - id: only
      workers:
        - {role: solo, call: srv.slow, final: true}
"""


def test_one_scheduled_run_per_slot_with_two_servers(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Two servers on one store start the due slot once; a restart does not start it again."""
    workflow = tmp_path / "scheduled.yaml"
    workflow.write_text(SCHEDULED)
    options = {"workflows": [workflow], "schedule_catch_up": 2 * 86400.0}
    servers = [make_server(**options), make_server(**options)]
    run_id = slot_run_id("nightly", latest_slot("0 0 * * *", time.time()))
    servers[0].wait_status(run_id, "delivered")
    for server in servers:
        server.stop()
    again = make_server(**options)
    # A restart must not start the slot again: wait for a scheduler round that begins after
    # the server is up (a positive signal), then look.
    scheduler = again.service.scheduler
    rounds: list[list[str]] = []
    tick = scheduler.tick

    def recorded(now: float) -> list[str]:
        rounds.append(tick(now))
        return rounds[-1]

    scheduler.tick = recorded
    deadline = time.time() + 30
    while not rounds:
        assert time.time() < deadline, "the restarted server's scheduler never ran"
        time.sleep(0.05)
    assert rounds[0] == []
    runs = again.http.get("/api/runs", params={"pipeline": "nightly"}).json()
    assert [r["run_id"] for r in runs] == [run_id]
    assert runs[0]["topic"].startswith("scheduled run of ")


def test_slot_ids_and_times() -> None:
    """Slot run ids are valid run ids, and a slot exactly at `now` is the latest one."""
    slot = latest_slot("*/5 * * * *", 1_700_000_100.0)
    assert slot == 1_700_000_100.0
    assert latest_slot("*/5 * * * *", 1_700_000_101.0) == slot
    assert slot_run_id("Nightly Report", slot) == "nightly-report-at-20231114-221500"
