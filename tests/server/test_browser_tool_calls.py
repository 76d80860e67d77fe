"""A tool call that waits for approval, over HTTP and on the run page: the route decides it
(409 `call_not_waiting` for a call that does not wait), and the page shows the call and lets
a person approve it; against the fake model server and the real MCP test server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.providers.conftest import API_KEY
from tests.providers.fake_llm_server import FakeServer, FakeState, Fault
from tests.providers.project import make_project
from tests.providers.test_tools import MCP
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import write_workflow

__all__ = ["browser"]
FLOW = f"""p:
  phases:
  - id: a
    workers:
    - role: w
      final: true
      model: gpt
      tools: [{{mcp: {MCP}, env: [MCP_CALL_LOG], approve: [note]}}]
"""


@pytest.fixture
def llm() -> Iterator[FakeServer]:
    """The fake OpenAI server, stopped after the test."""
    state = FakeState(api_key=API_KEY, models={"gpt-test"}, reply=["Done", "."])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        state.stopping.set()
        srv.shutdown()
        srv.server_close()
        thread.join()


def test_a_waiting_tool_call_is_shown_and_approved_on_the_run_page(
    browser: Browser,
    make_server: ServerFactory,
    llm: FakeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run pauses at the call; the status names it; deciding a call that does not wait
    is 409 `call_not_waiting`; the page shows the tool and its arguments, and its Approve
    button lets the tool run once and the run deliver."""
    log = tmp_path / "calls.jsonl"
    log.write_text("")
    monkeypatch.setenv("MCP_CALL_LOG", str(log))
    make_project(tmp_path, llm, monkeypatch)
    llm.fail_next(Fault(tool_calls=[("note", {"word": "ship"})]))
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("p", "t")
    run = server.wait_status(run_id, "paused", timeout=90)
    [call] = run["pause"]["tool_calls"]
    assert (call["ref"], call["tool"], call["turn"]) == ("w@1/1/1", "note", 1)
    wrong = server.http.post(f"/api/runs/{run_id}/tool-calls/w@1/2/1/approve", json={})
    assert wrong.status_code == 409, wrong.text
    assert wrong.json()["error"]["code"] == "call_not_waiting"
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    panel = page.locator("#tool-calls")
    expect(panel).to_contain_text("note")
    expect(panel).to_contain_text('"ship"')
    expect(page.locator("#approve")).to_be_disabled()
    panel.locator(".approve-call").click()
    server.wait_status(run_id, "delivered", timeout=90)
    assert [json.loads(line)["word"] for line in log.read_text().splitlines()] == ["ship"]
    expect(page.locator("#tool-calls")).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]
