"""What a worker lets its model do with a tool server: `allow` and `deny` lists of the
server's tools, `max_calls` per attempt, and `timeouts` per tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from interlock import RunStatus
from interlock.core.tools import ToolServer

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project
from .test_tools import MCP, failure, tool_flow


def offered(server: FakeServer) -> list[str]:
    return [t["function"]["name"] for t in server.requests[0].body["tools"]]


def results(server: FakeServer) -> list[str]:
    return [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]


def test_allow_offers_only_its_tools_and_a_denied_one_cannot_be_called(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.fail_next(Fault(tool_calls=[("add", {"a": 1, "b": 2}), ("getenv", {"name": "HOME"})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, allow: [add, lookup]}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert offered(server) == ["add", "lookup"]
    said = results(server)
    assert said[0] == "3"
    assert said[1].startswith("error: unknown tool 'getenv'; the tools are: add, lookup")


def test_deny_leaves_a_tool_out(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, deny: [crash, getenv]}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert offered(server) == ["add", "lookup", "sleep", "notes_count", "note", "spoil"]


def test_max_calls_answers_the_calls_past_it_with_an_error(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.fail_next(Fault(tool_calls=[("add", {"a": 1, "b": 2})] * 3))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, max_calls: 2}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    said = results(server)
    assert said[:2] == ["3", "3"]
    assert said[2] == (
        "error: the tools of this server may be called 2 time(s) in this task, and were: "
        "answer without 'add'"
    )


def test_a_tools_own_timeout_stops_it_sooner_than_the_servers(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.fail_next(Fault(tool_calls=[("sleep", {"seconds": 30})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, timeout: 60, timeouts: {{sleep: 0.5}}}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.FAILED
    error = failure(app, state.run_id)["error"]
    assert "tool 'sleep' did not answer within 0.5 s (its 'timeouts' entry)" in error


def test_an_allowed_tool_the_server_does_not_offer_fails_saying_what_it_offers(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, allow: [add, search]}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.FAILED
    failed = failure(app, state.run_id)
    assert (
        "offers no tool 'search', which its 'allow' names; it offers: add, crash"
        in (failed["error"])
    )
    assert failed["retryable"] is False
    assert not server.requests  # no model call is paid for a worker that cannot start


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"allow": ["add"], "deny": ["add"]}, "'add' is both in 'allow' and in 'deny'"),
        ({"allow": [""]}, "'allow' lists tool names"),
        ({"allow": ["add"], "timeouts": {"sleep": 5}}, "'timeouts' names 'sleep'"),
        ({"max_calls": 0}, "greater than or equal to 1"),
        ({"timeouts": {"sleep": 0}}, "greater than 0"),
    ],
)
def test_bad_governance_is_refused_at_load(entry: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        ToolServer.model_validate({"mcp": ["server"], **entry})
