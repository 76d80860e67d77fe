"""Model workers with `tools:`: the MCP tool loop on both wire formats, and its faults."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Interlock, RunStatus
from interlock.runtime.explain import prompts

from .fake_llm_server import FakeServer, Fault
from .project import app_for, attempt_usage, make_project, one_worker

SERVER = Path(__file__).with_name("mcp_server.py")
MCP = f"[{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]"


def tool_flow(
    project: Path, model: str, extra: str = "", tools: str = "", name: str = "flow.yaml"
) -> Path:
    """A one-worker pipeline whose model may call the test MCP server's tools."""
    tools = tools or f"[{{mcp: {MCP}}}]"
    return one_worker(project, f"      model: {model}\n      tools: {tools}\n{extra}", name)


def failure(app: Interlock, run_id: str) -> dict[str, Any]:
    """The data of the run's first failed attempt."""
    return next(e.data for e in app.events(run_id) if e.kind == "task_failed")


def transcript(app: Interlock, run_id: str) -> str:
    """The tool transcript of the first attempt of task w@1."""
    return (app.run_dir(run_id) / "prompts" / "w@1.1.tools.md").read_text()


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_a_tool_call_runs_on_the_mcp_server_and_its_result_goes_back_to_the_model(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """The model's call of `add` (streamed in fragments) reaches the real MCP server; the
    next request carries the call and its result in the wire format's own shape; tokens and
    cost are summed over both calls and the transcript holds the call and the result."""
    server.fail_next(Fault(tool_calls=[("add", {"a": 2, "b": 3})], tool_text="Adding."))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, model), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "Hello, world."
    first, second = (r.body for r in server.requests)
    if model == "gpt":
        names = [t["function"]["name"] for t in first["tools"]]
        assistant, result = second["messages"][-2:]
        assert assistant["content"] == "Adding."
        call = assistant["tool_calls"][0]
        assert call["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
        assert result == {"role": "tool", "tool_call_id": call["id"], "content": "5"}
    else:
        names = [t["name"] for t in first["tools"]]
        assistant, result = second["messages"][-2:]
        text, use = assistant["content"]
        assert text == {"type": "text", "text": "Adding."}
        assert (use["type"], use["name"], use["input"]) == ("tool_use", "add", {"a": 2, "b": 3})
        assert result["content"] == [
            {"type": "tool_result", "tool_use_id": use["id"], "content": "5"}
        ]
    assert names == ["add", "lookup", "sleep", "getenv", "notes_count", "crash", "note", "spoil"]
    usage = attempt_usage(app, state.run_id)[0]
    assert (usage["input_tokens"], usage["output_tokens"]) == (2000, 1000)
    price = (2.0, 8.0) if model == "gpt" else (3.0, 15.0)
    assert usage["cost_usd"] == pytest.approx((2000 * price[0] + 1000 * price[1]) / 1e6)
    assert (usage["turns"], usage["tool_calls"]) == (2, 1)
    written = transcript(app, state.run_id)
    assert "## Call `add`" in written and '"a": 2' in written
    shown = [name for name, _ in prompts(app.run_dir(state.run_id), "w@1")]
    assert shown == ["w@1.1", "w@1.1.tools"]  # explain --prompt shows it beside the prompt
    assert "## Result of `add`" in written and "\n5\n" in written


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_tool_errors_and_unknown_tools_are_answered_to_the_model(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """A tool's own error, a tool no server offers and arguments that are not JSON come
    back to the model as error results it can act on; the attempt goes on. (Asked for one
    JSON answer; the server sees the variables its entry names, and no key of this process;
    a dotted tool name is offered as one the APIs accept.)"""
    calls = [
        ("lookup", {"word": "zeta"}),
        ("nope", {}),
        ("add", '{"a": 1,'),
        ("getenv", {"name": "PASSED_TO_TOOLS"}),
        ("getenv", {"name": "FAKE_KEY"}),
        ("notes_count", {"text": "one two three"}),
    ]
    server.fail_next(Fault(tool_calls=calls))
    monkeypatch.setenv("PASSED_TO_TOOLS", "visible")
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, env: [PASSED_TO_TOOLS]}}]"
    flow = tool_flow(project, model, "      params: {stream: false}\n", tools=tools)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    messages = server.requests[1].body["messages"]
    assert "stream" not in server.requests[0].body
    if model == "gpt":
        results = [m["content"] for m in messages if m["role"] == "tool"]
        assert all(text.startswith("error: ") for text in results[:3])
    else:
        thinking = {"type": "thinking", "thinking": "Let me see.", "signature": "sig"}
        assert messages[-2]["content"][0] == thinking  # sent back first, unchanged
        blocks = messages[-1]["content"]
        assert [b.get("is_error", False) for b in blocks] == [True, True, True, False, False, False]
        results = [b["content"] for b in blocks]
    assert "no entry for 'zeta'" in results[0]
    assert (
        "unknown tool 'nope'; the tools are: "
        "add, crash, getenv, lookup, note, notes_count, sleep, spoil" in results[1]
    )
    # Whole Messages answers carry the input as an object: the server refuses the empty one.
    assert ("must be a JSON object" if model == "gpt" else "Field required") in results[2]
    assert results[3:] == ["visible", "<unset>", "3"]  # notes.count, by its safe name
    assert transcript(app, state.run_id).count("## Error result of") == 3


def test_max_turns_fails_the_attempt_or_keeps_the_last_answer_when_asked(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that still asks for tools at `max_turns` fails the attempt saying so, with
    the spend of every call; with `accept_max_turns` its last text is the output."""
    asks = Fault(tool_calls=[("add", {"a": 1, "b": 1})], tool_text="Still working.")
    server.fail_next(asks, asks)
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt", "      max_turns: 2\n"), topic="t")
    assert state.status is RunStatus.FAILED
    failed = failure(app, state.run_id)
    assert "still asked for tools after max_turns (2) model calls" in failed["error"]
    assert "accept_max_turns: true" in failed["error"]
    assert (failed["usage"]["turns"], failed["usage"]["input_tokens"]) == (2, 2000)
    assert len(server.requests) == 2

    server.fail_next(asks, asks)
    extra = "      max_turns: 2\n      accept_max_turns: true\n"
    state = app.run(tool_flow(project, "gpt", extra, name="kept.yaml"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "Still working."


def test_a_tool_server_that_exits_mid_loop_fails_the_attempt_saying_so(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that exits while a call runs fails the attempt (retryable, its spend
    recorded) naming the server and the tool, quoting the end of its 2 MB of stderr; the
    transcript keeps the call."""
    server.fail_next(Fault(tool_calls=[("crash", {})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "claude"), topic="t")
    assert state.status is RunStatus.FAILED
    failed = failure(app, state.run_id)
    assert "tool server" in failed["error"] and "mcp_server.py" in failed["error"]
    assert "exited while tool 'crash' was running" in failed["error"]
    assert failed["error"].endswith("last words: crashed on purpose")
    assert failed["retryable"] is True and failed["usage"]["input_tokens"] == 1000
    assert "## Call `crash`" in transcript(app, state.run_id)


def test_a_tool_call_that_outlasts_its_timeout_fails_the_attempt(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool that hangs past the entry's `timeout` stops the attempt (retryable) saying
    which tool and how long it was given."""
    server.fail_next(Fault(tool_calls=[("sleep", {"seconds": 30})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, timeout: 0.5}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.FAILED
    failed = failure(app, state.run_id)
    assert "tool 'sleep' did not answer within 0.5 s" in failed["error"]
    assert failed["retryable"] is True


def test_a_tool_server_command_that_does_not_exist_is_a_final_failure(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No model call is made and the attempt is not retried: the workflow must change."""
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = "[{mcp: [no-such-mcp-server-here, --stdio]}]"
    state = app.run(tool_flow(project, "gpt", "      retries: 2\n", tools=tools), topic="t")
    assert state.status is RunStatus.FAILED
    failed = failure(app, state.run_id)
    assert "command 'no-such-mcp-server-here' was not found" in failed["error"]
    assert failed["retryable"] is False
    assert server.requests == []
    assert sum(1 for e in app.events(state.run_id) if e.kind == "task_failed") == 1


def test_an_agent_command_model_cannot_take_tools(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tools run only where interlock makes the model calls: an agent command is refused."""
    extra = """
[providers.agent]
kind = "cli"
command = ["cat"]

[models.agent]
provider = "agent"
model = "x"
"""
    project = make_project(tmp_path, server, monkeypatch, extra)
    app = app_for(project)
    state = app.run(tool_flow(project, "agent"), topic="t")
    assert state.status is RunStatus.FAILED
    assert "cannot call the worker's tools" in failure(app, state.run_id)["error"]


@pytest.fixture
def http_tools() -> Iterator[str]:
    """The test MCP server over streamable HTTP: its endpoint URL, the server stopped after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the MCP test server exited"
                assert time.monotonic() < deadline, "the MCP test server did not listen"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_streamable_http_tool_server_is_called_by_url(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, http_tools: str
) -> None:
    """`{url: ...}` reaches a server over streamable HTTP; a URL where nothing listens fails
    the attempt naming it."""
    server.fail_next(Fault(tool_calls=[("lookup", {"word": "alpha"})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt", tools=f"[{{url: '{http_tools}'}}]"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert server.requests[1].body["messages"][-1]["content"] == "the first letter"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}/mcp"
    tools = f"[{{url: '{nowhere}'}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools, name="nowhere.yaml"), topic="t")
    assert state.status is RunStatus.FAILED
    assert f"tool server '{nowhere}' could not be reached" in failure(app, state.run_id)["error"]
