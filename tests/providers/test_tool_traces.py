"""A tool loop's trace: a `chat` span per model call and an `execute_tool` span per tool
call, each at its own time within the attempt's span, with the GenAI conventions, and a
`call:` worker's `ctx.model` calls each a `chat` span; against the fake model server and
the real MCP test server, exported to the SDK's memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interlock import RunStatus
from interlock.runtime import tracing
from interlock.runtime.executors import TaskContext, register

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project, one_worker
from .test_tools import tool_flow


def test_each_model_call_and_tool_call_of_a_loop_is_a_span_of_its_own(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, exporter: Any
) -> None:
    """Two tool calls, then the answer: three chat spans with their own tokens, two
    execute_tool spans naming the tool, its call id and turn, all children of the attempt's
    span and inside it in time; the chat spans' tokens add up to the attempt's."""
    tracer = tracing.configured_tracer({}, exporter=exporter)
    assert tracer is not None
    server.fail_next(Fault(tool_calls=[("add", {"a": 2, "b": 3})]))
    server.fail_next(Fault(tool_calls=[("add", {"a": 1, "b": 1})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    events = app.events(state.run_id)
    app.close()
    tracer.provider.force_flush()  # type: ignore[attr-defined]
    spans = list(exporter.get_finished_spans())
    [task] = [s for s in spans if s.name == "task w@1"]
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time)
    tools = sorted((s for s in spans if s.name == "execute_tool add"), key=lambda s: s.start_time)
    assert len(chats) == 3 and len(tools) == 2, [s.name for s in spans]
    for span in (*chats, *tools):
        assert span.parent is not None and span.parent.span_id == task.context.span_id
        assert task.start_time <= span.start_time <= span.end_time <= task.end_time
    # In the order the loop took them: chat, tool, chat, tool, chat.
    order = sorted((*chats, *tools), key=lambda s: s.start_time)
    assert [s.name.split()[0] for s in order] == ["chat", "execute_tool"] * 2 + ["chat"]
    first = tools[0].attributes
    assert first["gen_ai.operation.name"] == "execute_tool"
    assert first["gen_ai.tool.name"] == "add"
    assert first["interlock.turn"] == 1 and first["interlock.tool_call"] == 1
    assert first["gen_ai.tool.call.id"]
    assert tools[1].attributes["interlock.turn"] == 2
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    usage = next(e.data for e in events if e.kind == "task_completed")["usage"]
    summed = sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats)
    assert summed == usage["output_tokens"]
    assert [s["kind"] for s in usage["steps"]] == ["chat", "tool"] * 2 + ["chat"]


def test_a_tool_that_answers_an_error_makes_an_error_span(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, exporter: Any
) -> None:
    """A call of a tool the server does not have goes back to the model as an error: its
    span has an error status; the run still delivers."""
    tracer = tracing.configured_tracer({}, exporter=exporter)
    assert tracer is not None
    server.fail_next(Fault(tool_calls=[("no_such_tool", {})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    app.close()
    tracer.provider.force_flush()  # type: ignore[attr-defined]
    [span] = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert span.status.status_code.name == "ERROR"


def _two_calls(ctx: TaskContext) -> str:
    client = ctx.model("gpt")
    first = client.complete("Say hello.")
    return client.complete(f"Again: {first.text}").text


register("traces.two_calls", _two_calls)


def test_each_model_call_of_a_call_worker_is_a_chat_span(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, exporter: Any
) -> None:
    """A `call:` worker's two `ctx.model` calls: two chat spans under its attempt, in order,
    each with its own tokens and the alias's provider."""
    tracer = tracing.configured_tracer({}, exporter=exporter)
    assert tracer is not None
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(one_worker(project, "      call: traces.two_calls\n"), "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    app.close()
    tracer.provider.force_flush()  # type: ignore[attr-defined]
    spans = list(exporter.get_finished_spans())
    [task] = [s for s in spans if s.name == "task w@1"]
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time)
    assert len(chats) == 2, [s.name for s in spans]
    assert chats[0].end_time <= chats[1].start_time
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id == task.context.span_id
        assert chat.attributes["gen_ai.usage.input_tokens"] == 1000
        assert chat.attributes["gen_ai.request.model"] == "gpt"


def test_a_call_decided_by_a_person_is_a_span_of_the_attempt_that_made_it(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, exporter: Any
) -> None:
    """The attempt that stopped at a call waiting for approval ends `awaiting_approval`,
    with no error; approved, the next attempt's span holds the call's `execute_tool` span
    (made before that attempt's own model call), and a refused one is marked refused."""
    from .test_tool_approvals import TOOLS, note

    tracer = tracing.configured_tracer({}, exporter=exporter)
    assert tracer is not None
    monkeypatch.setenv("MCP_CALL_LOG", str(tmp_path / "calls.jsonl"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    spans: list[Any] = []
    for approved in (True, False):
        server.fail_next(note("launch"))
        state = app.run(tool_flow(project, "gpt", tools=TOOLS), topic="t")
        assert state.status is RunStatus.PAUSED, state.failure
        app.decide_call(state.run_id, "w@1/1/1", approved=approved, note="no")
        assert app.resume(state.run_id).status is RunStatus.DELIVERED
    app.close()
    tracer.provider.force_flush()  # type: ignore[attr-defined]
    spans = list(exporter.get_finished_spans())
    paused = [s for s in spans if s.name == "task w@1" and s.attributes["interlock.attempt"] == 1]
    assert [s.attributes["interlock.outcome"] for s in paused] == ["awaiting_approval"] * 2
    assert all(s.status.status_code.name != "ERROR" for s in paused)
    tools = [s for s in spans if s.name == "execute_tool note"]
    assert len(tools) == 2, [s.name for s in spans]
    by_id = {s.context.span_id: s for s in spans}
    for span in tools:
        assert by_id[span.parent.span_id].attributes["interlock.attempt"] == 2
    assert sorted(bool(s.attributes.get("interlock.refused")) for s in tools) == [False, True]
