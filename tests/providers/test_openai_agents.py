"""An OpenAI Agents SDK agent as a `call:` worker: `InterlockModelProvider` sends its
requests through `ctx.model`. The SDK pins websockets below 17, which interlock's server
needs, so it runs from a virtualenv of its own (`tests/providers/openai_agents/setup.sh`),
this checkout's source on its path, against the local fake model server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .agent_runs import (
    agent_env,
    agent_project,
    check_resumed_without_repaying,
    kill_and_resume,
    tool_turns,
)
from .fake_llm_server import FakeServer

VERSION = "0.24.0"  # as tests/providers/openai_agents/setup.sh pins it
ENV = Path(
    os.environ.get("INTERLOCK_OPENAI_AGENTS_ENV")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "interlock"
    / f"openai-agents-{VERSION}"
)

AGENT = '''
from agents import Agent, RunConfig, Runner, function_tool

from interlock.agents.openai_agents import InterlockModelProvider


@function_tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def solve(ctx):
    agent = Agent(
        name="solver", model="gpt", instructions="Use the lookup tool.", tools=[lookup]
    )
    config = RunConfig(model_provider=InterlockModelProvider(ctx))
    result = await Runner.run(agent, ctx.task, run_config=config)
    return result.final_output
'''


@pytest.fixture
def python() -> str:
    """The Python of the SDK's virtualenv (the test fails when it is missing)."""
    binary = ENV / "bin" / "python"
    if not binary.exists():
        pytest.fail(
            f"openai-agents is not installed in {ENV}: run tests/providers/openai_agents/setup.sh"
        )
    return str(binary)


def _env(project: Path, cli_env: dict[str, str]) -> dict[str, str]:
    # The SDK's own trace export goes to OpenAI: not from a test.
    return agent_env(project, cli_env, OPENAI_AGENTS_DISABLE_TRACING="1")


def test_an_agents_sdk_agent_runs_as_a_call_worker(
    tmp_path: Path, server: FakeServer, cli_env: dict[str, str], python: str
) -> None:
    """The agent's requests reach the server through the alias, its tool's results go back
    to the model, and the run counts each call's cost."""
    project = agent_project(tmp_path, server, AGENT)
    server.state.faults.extend(tool_turns("a"))
    env = _env(project, cli_env)
    run = subprocess.run(
        [python, "-m", "interlock", "run", "flow.yaml", "p", "-t", "t", "--run-id", "r1"],
        env=env, cwd=project, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    bodies = [r.body for r in server.state.requests]
    assert len(bodies) == 2
    assert bodies[0]["model"] == "gpt-test"
    assert bodies[0]["messages"][0] == {"role": "system", "content": "Use the lookup tool."}
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["lookup"]
    tool_messages = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["value of a"]
    shown = subprocess.run(
        [python, "-m", "interlock", "status", "r1", "--json"],
        env=env, cwd=project, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    status = json.loads(shown.stdout)
    assert status["status"] == "delivered"
    assert status["cost_usd"] == pytest.approx(2 * (1000 * 2.0 + 500 * 8.0) / 1_000_000)


def test_a_killed_agents_sdk_agent_resumes_without_paying_its_finished_turns_again(
    tmp_path: Path, server: FakeServer, cli_env: dict[str, str], python: str
) -> None:
    """Killed (SIGKILL) while the agent's third request is in flight, then resumed: the two
    answered requests are not sent again, and each answered call is counted once."""
    project = agent_project(tmp_path, server, AGENT)
    status = kill_and_resume(project, server, _env(project, cli_env), python)
    check_resumed_without_repaying(server, status)
