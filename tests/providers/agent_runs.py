"""Running an agent module as a `call:` worker through the real CLI, killed mid-agent and
resumed, against the fake server: shared by the agent framework tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import API_KEY
from .fake_llm_server import FakeServer, Fault
from .project import CONFIG

SRC = Path(__file__).resolve().parents[2] / "src"


def tool_turns(*keys: str) -> list[Fault]:
    """Answers that each ask for the `lookup` tool with one key."""
    return [Fault(tool_calls=[("lookup", {"key": key})]) for key in keys]


def agent_project(project: Path, server: FakeServer, module: str) -> Path:
    """A folder with an interlock.toml for the fake server, `agent_module.py` holding
    `module`, and `flow.yaml` whose only worker calls `agent_module:solve` (one retry)."""
    (project / "interlock.toml").write_text(CONFIG.format(url=server.url))
    (project / "agent_module.py").write_text(module)
    (project / "flow.yaml").write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: 'agent_module:solve', final: true, retries: 1}\n"
    )
    return project


def agent_env(project: Path, cli_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The CLI's environment with the fake server's key and this checkout's source and the
    project's module importable."""
    path = os.pathsep.join([str(SRC), str(project), cli_env.get("PYTHONPATH", "")])
    return {**cli_env, "FAKE_KEY": API_KEY, "PYTHONPATH": path, **extra}


def _wait_for(predicate: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def kill_and_resume(
    project: Path, server: FakeServer, env: dict[str, str], python: str
) -> dict[str, Any]:
    """`interlock run` (with `python`), killed (SIGKILL) while the agent's third request is in
    flight after two tool turns; then `interlock resume`, whose agent asks for one more tool
    turn and finishes. Returns the run's status view."""
    # Turns 1 and 2 ask for the tool; the third request is held until the process is gone.
    server.state.faults.extend([*tool_turns("a", "b"), Fault(delay=60)])
    interlock = [python, "-m", "interlock"]
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
    server.state.faults.extend(tool_turns("c"))
    resumed = subprocess.run(
        [*interlock, "resume", "r1"],
        env=env, cwd=project, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    shown = subprocess.run(
        [*interlock, "status", "r1", "--json"],
        env=env, cwd=project, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    status: dict[str, Any] = json.loads(shown.stdout)
    return status


def check_resumed_without_repaying(server: FakeServer, status: dict[str, Any]) -> None:
    """What `kill_and_resume` must leave: the request in flight at the kill is sent again,
    the two answered before it are not, and each answered call is counted once."""
    requests = server.state.requests
    assert len(requests) == 5  # 2 answered + 1 killed, then the third again and a fourth
    assert requests[3].body["messages"] == requests[2].body["messages"]
    contents = [m["content"] for m in requests[4].body["messages"] if m["role"] == "tool"]
    assert contents == ["value of a", "value of b", "value of c"]
    assert status["status"] == "delivered"
    # Calls 1 and 2 (paid by the killed attempt), 4 and 5: the unanswered third costs nothing.
    one_call = (1000 * 2.0 + 500 * 8.0) / 1_000_000
    assert abs(status["cost_usd"] - 4 * one_call) < 1e-9, status["cost_usd"]
