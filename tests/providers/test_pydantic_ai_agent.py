"""A Pydantic AI agent as a `call:` worker: `InterlockModel` routes each of its requests
through `ctx.model`, against the local fake model server, with the real library."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.runtime.executors import register

from .conftest import API_KEY
from .fake_llm_server import FakeServer, Fault
from .project import CONFIG, app_for, attempt_usage, make_project, one_worker

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


def _tool_turns(*keys: str) -> list[Fault]:
    return [Fault(tool_calls=[("lookup", {"key": key})]) for key in keys]


def test_an_agent_with_a_tool_runs_as_a_call_worker(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request of the agent reaches the server through the alias, the tool's results
    go back to the model, and the run counts every call's tokens and cost."""
    project = make_project(tmp_path, server, monkeypatch)
    namespace: dict[str, object] = {}
    exec(compile(AGENT, "agent_module", "exec"), namespace)  # the agent as users write it
    register("pai.solve", namespace["solve"])  # type: ignore[arg-type]
    server.state.faults.extend(_tool_turns("a", "b"))
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


def _wait_for(predicate: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_a_killed_agent_resumes_without_paying_its_finished_turns_again(
    tmp_path: Path, server: FakeServer, cli_env: dict[str, str]
) -> None:
    """`interlock run` is killed (SIGKILL) while the agent's third request is in flight;
    `interlock resume` sends that request again but not the two answered before, and the run
    counts each answered call once."""
    project = tmp_path
    (project / "interlock.toml").write_text(CONFIG.format(url=server.url))
    (project / "agent_module.py").write_text(AGENT)
    (project / "flow.yaml").write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: 'agent_module:solve', final: true, retries: 1}\n"
    )
    env = {
        **cli_env,
        "FAKE_KEY": API_KEY,
        "PYTHONPATH": os.pathsep.join([str(project), cli_env.get("PYTHONPATH", "")]),
    }
    # Turns 1 and 2 ask for the tool; the third request is held until the process is gone.
    server.state.faults.extend([*_tool_turns("a", "b"), Fault(delay=60)])
    interlock = [sys.executable, "-m", "interlock"]
    with (project / "run.log").open("w") as log:
        run = subprocess.Popen(
            [*interlock, "run", "flow.yaml", "p", "-t", "t", "--run-id", "r1"],
            env=env, cwd=project, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_for(lambda: len(server.state.requests) >= 3 or run.poll() is not None)
            assert run.poll() is None, (project / "run.log").read_text()
            run.send_signal(signal.SIGKILL)
        finally:
            run.wait(30)
    server.state.faults.clear()
    server.state.faults.extend(_tool_turns("c"))
    resumed = subprocess.run(
        [*interlock, "resume", "r1"],
        env=env, cwd=project, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    requests = server.state.requests
    assert len(requests) == 5  # 2 answered + 1 killed, then the third again and a fourth
    assert requests[3].body["messages"] == requests[2].body["messages"]
    contents = [m["content"] for m in requests[4].body["messages"] if m["role"] == "tool"]
    assert contents == ["value of a", "value of b", "value of c"]
    shown = subprocess.run(
        [*interlock, "status", "r1", "--json"],
        env=env, cwd=project, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    import json

    status = json.loads(shown.stdout)
    assert status["status"] == "delivered"
    # Calls 1 and 2 (paid by the killed attempt), 4 and 5: the unanswered third costs nothing.
    assert status["cost_usd"] == pytest.approx(4 * GPT_CALL)
