"""A Pydantic AI agent as a `call:` worker: `InterlockModel` routes each of its requests
through `ctx.model`, against the local fake model server, with the real library."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.runtime.executors import register

from .agent_runs import (
    agent_env,
    agent_project,
    check_resumed_without_repaying,
    kill_and_resume,
    tool_turns,
)
from .fake_llm_server import FakeServer
from .project import app_for, attempt_usage, make_project, one_worker

GPT_CALL = (1000 * 2.0 + 500 * 8.0) / 1_000_000

AGENT = '''
from pydantic_ai import Agent

from interlock.agents.pydantic_ai import InterlockModel


async def solve(ctx):
    agent = Agent(InterlockModel(ctx, "gpt"), instructions="Use the lookup tool.")

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    result = await agent.run(ctx.task)
    return result.output
'''


def test_an_agent_with_a_tool_runs_as_a_call_worker(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request of the agent reaches the server through the alias, the tool's results
    go back to the model, and the run counts every call's tokens and cost."""
    project = make_project(tmp_path, server, monkeypatch)
    namespace: dict[str, object] = {}
    exec(compile(AGENT, "agent_module", "exec"), namespace)  # the agent as users write it
    register("pai.solve", namespace["solve"])  # type: ignore[arg-type]
    server.state.faults.extend(tool_turns("a", "b"))
    flow = one_worker(project, "      call: pai.solve\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "Hello, world."
    bodies = [r.body for r in server.state.requests]
    assert len(bodies) == 3
    assert bodies[0]["messages"][0] == {"role": "system", "content": "Use the lookup tool."}
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["lookup"]
    tool_messages = [m for m in bodies[2]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["value of a", "value of b"]
    (usage,) = attempt_usage(app, state.run_id)
    assert usage["calls"] == 3
    assert state.cost_usd == pytest.approx(3 * GPT_CALL)


def test_a_killed_agent_resumes_without_paying_its_finished_turns_again(
    tmp_path: Path, server: FakeServer, cli_env: dict[str, str]
) -> None:
    """`interlock run` is killed (SIGKILL) while the agent's third request is in flight;
    `interlock resume` sends that request again but not the two answered before, and the run
    counts each answered call once."""
    project = agent_project(tmp_path, server, AGENT)
    status = kill_and_resume(project, server, agent_env(project, cli_env), sys.executable)
    check_resumed_without_repaying(server, status)


SYNC_AGENT = """
from pydantic_ai import Agent

from interlock.agents.pydantic_ai import InterlockModel


def solve(ctx):
    agent = Agent(InterlockModel(ctx, "claude"), instructions="Answer.")
    return agent.run_sync(ctx.task).output
"""


def test_a_plain_function_runs_an_agent_with_run_sync(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agent.run_sync` in a plain function (an event loop of its own, in the worker's
    thread) runs the agent through an Anthropic alias, its call priced and counted."""
    project = make_project(tmp_path, server, monkeypatch)
    namespace: dict[str, object] = {}
    exec(compile(SYNC_AGENT, "sync_agent_module", "exec"), namespace)
    register("pai.solve_sync", namespace["solve"])  # type: ignore[arg-type]
    app = app_for(project)
    state = app.run(one_worker(project, "      call: pai.solve_sync\n"), "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state
    assert server.state.requests[0].path == "/v1/messages"
    assert server.state.requests[0].body["system"] == "Answer."
    assert state.cost_usd == pytest.approx((1000 * 3.0 + 500 * 15.0) / 1_000_000)


STRUCTURED_AGENT = """
from pydantic import BaseModel
from pydantic_ai import Agent

from interlock.agents.pydantic_ai import InterlockModel


class Answer(BaseModel):
    value: int


async def solve(ctx):
    agent = Agent(InterlockModel(ctx, "gpt"), output_type=Answer)
    result = await agent.run(ctx.task)
    return f"value={result.output.value}"
"""


def test_an_agent_with_structured_output_gets_it_through_its_output_tool(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `output_type` is offered to the model as Pydantic AI's output tool; the model's call
    of it is the agent's validated output."""
    from .fake_llm_server import Fault

    project = make_project(tmp_path, server, monkeypatch)
    namespace: dict[str, object] = {}
    exec(compile(STRUCTURED_AGENT, "structured_agent_module", "exec"), namespace)
    register("pai.structured", namespace["solve"])  # type: ignore[arg-type]
    server.state.faults.append(Fault(tool_calls=[("final_result", {"value": 42})]))
    app = app_for(project)
    state = app.run(one_worker(project, "      call: pai.structured\n"), "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "value=42"
    (body,) = [r.body for r in server.state.requests]
    (tool,) = body["tools"]
    assert tool["function"]["name"] == "final_result"
    assert tool["function"]["parameters"]["properties"]["value"]["type"] == "integer"
