"""GET /api/runs: search, filters, sorting and cursor pages over a real server."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tests.server.conftest import ServerFactory
from tests.server.helpers import Server, write_workflow

FLOW = """
params:
  inputs:
    region: {default: north, description: Where the survey is}
    count: {default: 3}
    ratio: {default: 0.5}
    loud: {default: false}
    who: {required: true, description: Who asked}
  phases:
    - id: only
      workers:
        - {role: solo, call: srv.many, final: true}
quick:
  phases:
    - id: only
      workers:
        - {role: solo, call: srv.many, final: true}
"""


def pages(server: Server, query: str) -> list[list[str]]:
    """Every page of the list for `query`, following `X-Next-Cursor`."""
    found: list[list[str]] = []
    cursor = ""
    while True:
        answer = server.http.get(f"/api/runs?{query}{cursor}")
        assert answer.status_code == 200, answer.text
        found.append([r["run_id"] for r in answer.json()])
        following = answer.headers.get("x-next-cursor")
        if not following:
            return found
        cursor = f"&cursor={following}"


def test_search_filter_sort_and_pages(make_server: ServerFactory, tmp_path: Path) -> None:
    """Seven runs: pages of three cover them once, newest first; a search finds one by an
    input value and by a part of its topic; pipeline, status and date filters apply; a bad
    cursor or date is a 400 that says what to do."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    started = []
    for n in range(6):
        inputs = {"who": f"ana{n}", "count": n, "region": "south" if n == 4 else "north"}
        started.append(server.start_run("params", f"Survey {n}", inputs=inputs))
    started.append(server.start_run("quick", "Something else"))
    for run_id in started:
        server.wait_status(run_id, "delivered")
    found = pages(server, "limit=3")
    assert [len(p) for p in found] == [3, 3, 1]
    assert [r for p in found for r in p] == started[::-1]
    assert pages(server, "q=south") == [[started[4]]]
    assert pages(server, "q=SURVEY%202") == [[started[2]]]
    assert pages(server, "pipeline=quick&status=delivered") == [[started[6]]]
    assert pages(server, "status=failed") == [[]]
    today = dt.datetime.now(dt.UTC).date()
    assert len(pages(server, f"since={today}&until={today}")[0]) == 7
    assert pages(server, f"until={today - dt.timedelta(days=1)}") == [[]]
    ascending = [r for p in pages(server, "sort=cost&order=asc&limit=2") for r in p]
    assert sorted(ascending) == sorted(started)
    bad = server.http.get("/api/runs?cursor=bm9wZQ")
    assert bad.status_code == 400 and "start again without `cursor`" in bad.text
    wrong = server.http.get("/api/runs?since=yesterday")
    assert wrong.status_code == 400 and "ISO 8601" in wrong.text
    run = server.http.get(f"/api/runs/{started[3]}").json()
    assert run["inputs"] == {
        "region": "north",
        "count": 3,
        "ratio": 0.5,
        "loud": False,
        "who": "ana3",
    }
