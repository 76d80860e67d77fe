"""The review API: PUT an edited output, POST a rejection, GET a run's bundle."""

from __future__ import annotations

import io
import tarfile
import time
from typing import Any

from tests.server.helpers import Server


def _events(server: Server, run_id: str, kind: str) -> list[dict[str, Any]]:
    found = server.http.get(f"/api/runs/{run_id}/events").json()
    return [e for e in found if e["kind"] == kind]


def test_edit_reject_and_export_over_http(server: Server) -> None:
    """An edit and a rejection are recorded by the serving orchestrator; bad ones are
    refused with the CLI's message and nothing recorded; the export is a bundle."""
    run_id = server.start_run("review", "tides")
    server.wait_status(run_id, "paused")
    missing = server.http.put(f"/api/runs/{run_id}/outputs/nope.md", content=b"x")
    assert missing.status_code == 400 and "has no output 'nope.md'" in missing.text
    bad_phase = server.http.post(f"/api/runs/{run_id}/reject", json={"to": "nope"})
    assert bad_phase.status_code == 400 and "has no phase 'nope'" in bad_phase.text
    edited = server.http.put(
        f"/api/runs/{run_id}/outputs/draft.md",
        content=b"# drafter\n\nRewritten by the reviewer.\n",
        headers={"X-Interlock-Note": "tone"},
    )
    assert edited.status_code == 200, edited.text
    deadline = time.time() + 15
    while not _events(server, run_id, "output_edited"):
        assert time.time() < deadline, "the edit was never recorded"
        time.sleep(0.1)
    assert _events(server, run_id, "output_edited")[0]["data"]["note"] == "tone"
    # A note in any script rides in the query string; the header keeps plain ASCII.
    again = server.http.put(
        f"/api/runs/{run_id}/outputs/draft.md",
        params={"note": "nuance: «ton» — 語調"},
        content=b"# drafter\n\nRewritten twice.\n",
    )
    assert again.status_code == 200, again.text
    deadline = time.time() + 15
    while len(_events(server, run_id, "output_edited")) < 2:
        assert time.time() < deadline, "the second edit was never recorded"
        time.sleep(0.1)
    assert _events(server, run_id, "output_edited")[1]["data"]["note"] == "nuance: «ton» — 語調"
    too_long = server.http.put(
        f"/api/runs/{run_id}/outputs/draft.md", params={"note": "x" * 2_001}, content=b"y"
    )
    assert too_long.status_code == 413 and "note" in too_long.text
    rejected = server.http.post(
        f"/api/runs/{run_id}/reject", json={"to": "draft", "message": "start over"}
    )
    assert rejected.status_code == 200, rejected.text
    deadline = time.time() + 15
    while not _events(server, run_id, "rejected"):
        assert time.time() < deadline, "the rejection was never recorded"
        time.sleep(0.1)
    server.wait_status(run_id, "paused")
    approved = server.http.post(f"/api/runs/{run_id}/approve", json={"message": "ok"})
    assert approved.status_code == 200, approved.text
    server.wait_status(run_id, "delivered")
    wrong = server.http.put(f"/api/runs/{run_id}/outputs/draft.md", content=b"late")
    assert wrong.status_code == 409 and "not paused" in wrong.text
    exported = server.http.get(f"/api/runs/{run_id}/export")
    assert exported.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(exported.content)) as tar:
        names = tar.getnames()
    assert "manifest.json" in names and "events.jsonl" in names
