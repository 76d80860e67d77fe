"""Tool calls that wait for a person (`approve:`): the run pauses at such a call, and a
decision lets it run once or answers the model with a refusal; against the fake model
server and the real MCP test server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.reliability.crash_points import cli

from interlock import RunStatus
from interlock.core.tool_calls import waiting_calls
from interlock.errors import CallNotWaiting, ExitCode, UsageError

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project
from .test_tools import MCP, tool_flow

TOOLS = f"[{{mcp: {MCP}, env: [MCP_CALL_LOG], approve: [note]}}]"


def note(word: str) -> Fault:
    """A model answer that asks for the `note` tool."""
    return Fault(tool_calls=[("note", {"word": word})])


def noted(path: Path) -> list[str]:
    """The words the MCP server's `note` tool wrote down, in order."""
    return [json.loads(line)["word"] for line in path.read_text().splitlines()]


@pytest.fixture
def call_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty call log, named to the MCP server by MCP_CALL_LOG."""
    path = tmp_path / "calls.jsonl"
    path.write_text("")
    monkeypatch.setenv("MCP_CALL_LOG", str(path))
    return path


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results an OpenAI request carries."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_an_approve_listed_call_pauses_the_run_and_once_approved_runs_exactly_once(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """The model asks for `note`: the run pauses showing the call (tool, arguments, turn)
    and the tool has not run; approved, the tool runs once, its result goes to the model,
    the run is delivered, and no failure or retry is counted."""
    server.fail_next(note("launch"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt", tools=TOOLS), topic="t")
    assert state.status is RunStatus.PAUSED, state.failure
    assert state.pause_reason == "tool"
    [waiting] = waiting_calls(state)
    assert (waiting["ref"], waiting["tool"], waiting["turn"]) == ("w@1/1/1", "note", 1)
    assert json.loads(waiting["arguments"]) == {"word": "launch"}
    assert noted(call_log) == []
    assert len(server.requests) == 1
    with pytest.raises(UsageError, match="--call"):
        app.approve(state.run_id)
    app.decide_call(state.run_id, "w@1/1/1", approved=True, by="ops")
    done = app.resume(state.run_id)
    assert done.status is RunStatus.DELIVERED, done.failure
    assert noted(call_log) == ["launch"]
    assert len(server.requests) == 2  # the model is not asked turn 1 again
    assert tool_results(server.requests[1].body) == ["noted launch"]
    task = done.tasks["w@1"]
    assert (task.attempt, task.held, task.tool_decisions["1/1"]["approved"]) == (2, 1, True)
    kinds = [e.kind for e in app.events(state.run_id)]
    assert "tool_call_decided" in kinds and "retry_scheduled" in kinds
    decided = next(e.data for e in app.events(state.run_id) if e.kind == "tool_call_decided")
    assert (decided["approved"], decided["by"], decided["tool"]) == (True, "ops", "note")


def test_a_rejected_call_is_answered_with_the_refusal_and_the_loop_goes_on(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """Refused with a reason, the tool never runs; the model's next request carries the
    refusal and the reason as the call's result, and the run is delivered."""
    server.fail_next(note("drop-tables"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt", tools=TOOLS), topic="t")
    assert state.status is RunStatus.PAUSED
    app.decide_call(state.run_id, "w@1/1/1", approved=False, note="not in production")
    done = app.resume(state.run_id)
    assert done.status is RunStatus.DELIVERED, done.failure
    assert noted(call_log) == []
    [told] = tool_results(server.requests[1].body)
    assert "refused" in told and "not in production" in told


def test_a_decision_for_a_call_that_does_not_wait_is_refused_with_its_own_exit_code(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """`status` shows the waiting call and how to decide it; a call never asked for, a
    second decision for a decided call, and a decision on an ended run each fail naming the
    calls that wait; the CLI exits with CALL_NOT_WAITING, without a traceback."""
    server.fail_next(note("one"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt", tools=TOOLS), topic="t")
    run = state.run_id
    home = project / "home"
    shown = cli(home, "status", run)
    assert "tool call w@1/1/1: note(" in shown.stdout, shown.stdout[-800:]
    assert f"interlock approve {run} --call w@1/1/1" in shown.stdout
    unknown = cli(home, "reject", run, "--call", "w@1/9/1", "--reason", "no")
    assert unknown.returncode == ExitCode.CALL_NOT_WAITING, unknown.stderr[-500:]
    assert "calls waiting now: w@1/1/1" in unknown.stderr
    with pytest.raises(CallNotWaiting, match="does not wait"):
        app.decide_call(run, "w@1/2/1", approved=True)
    app.decide_call(run, "w@1/1/1", approved=True)
    with pytest.raises(CallNotWaiting, match="already has a decision waiting"):
        app.decide_call(run, "w@1/1/1", approved=False)
    assert app.resume(run).status is RunStatus.DELIVERED
    again = cli(home, "approve", run, "--call", "w@1/1/1")
    assert again.returncode == ExitCode.CALL_NOT_WAITING, again.stderr[-500:]
    assert "delivered" in again.stderr and "Traceback" not in again.stderr
    assert noted(call_log) == ["one"]


def test_a_kill_while_a_call_waits_keeps_it_waiting_and_approve_then_goes_on(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """The real CLI is killed (SIGKILL) once the waiting call is recorded; `resume` leaves
    the run paused with the same call waiting, and `approve --call` (CLI) runs the tool once
    and delivers."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = tool_flow(project, "gpt", tools=TOOLS)
    home, run = project / "home", "approval-kill"
    app = app_for(project)
    # Killed at each record in turn until the kill comes after the waiting call's record.
    asked = -1
    for n in range(1, 8):
        run = f"approval-kill-{n}"
        if len(server.requests) != asked:  # the last answer asked for was given
            server.fail_next(note("once"))
        asked = len(server.requests)
        at = f"after_append:{n}"
        first = cli(home, "run", str(flow), "--topic", "t", "--run-id", run, crash_at=at)
        assert first.returncode == -9, first.stderr[-500:]
        if any(e.data.get("approval") for e in app.events(run) if e.kind == "task_failed"):
            break
    else:
        raise AssertionError("no kill came after the waiting call was recorded")
    resumed = cli(home, "resume", run)
    assert resumed.returncode == ExitCode.PAUSED, resumed.stderr[-500:]
    # The last line names the call and both commands that decide it, with the run id.
    assert f"interlock approve {run} --call w@1/1/1" in resumed.stdout, resumed.stdout
    assert f"interlock reject {run} --call w@1/1/1 --reason TEXT" in resumed.stdout
    assert "[--message TEXT]" not in resumed.stdout
    state = app.state(run)
    assert [c["ref"] for c in waiting_calls(state)] == ["w@1/1/1"]
    assert noted(call_log) == []
    approved = cli(home, "approve", run, "--call", "w@1/1/1")
    assert approved.returncode == 0, approved.stderr[-500:]
    assert noted(call_log) == ["once"]
    assert app_for(project).state(run).status is RunStatus.DELIVERED


def test_an_approved_tool_the_server_does_not_offer_fails_for_good_saying_what_it_offers(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt `approve` name would let the real tool run unasked: the attempt fails for
    good naming the name and the server's tools, before the model is called."""
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, approve: [note, deploy]}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.FAILED
    assert "offers no tool 'deploy', which its 'approve' names" in str(state.failure)
    assert server.requests == []


def test_an_approved_call_is_not_asked_again_by_a_retry(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """The tool server dies while the approved call runs: the retry makes the call again
    under the same idempotency key without pausing for it a second time, and delivers."""
    server.fail_next(note("die"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    retry = "      retries: 1\n      backoff: {initial: 0}\n"
    state = app.run(tool_flow(project, "gpt", retry, tools=TOOLS), topic="t")
    assert state.status is RunStatus.PAUSED
    app.decide_call(state.run_id, "w@1/1/1", approved=True)
    done = app.resume(state.run_id)
    assert done.status is RunStatus.DELIVERED, done.failure
    assert noted(call_log) == ["die", "die"]
    paused = [e for e in app.events(state.run_id) if e.kind == "paused"]
    assert len(paused) == 1
    assert (done.tasks["w@1"].attempt, done.tasks["w@1"].held) == (3, 1)
