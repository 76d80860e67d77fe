"""Tool calls that wait for a person, in the engine: the pause, the decision, the attempt
that continues the loop (no retry), and `check`'s exploration of such a pause."""

from __future__ import annotations

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName, settle
from interlock.core.explore import explore
from interlock.core.observe import Command, CommandKind, interpret_command
from interlock.core.state import RunState, RunStatus, TaskStatus, apply
from interlock.core.tool_calls import CallDecision, waiting_calls
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import pipeline_of, worker

TOOLS = [{"url": "http://localhost:1/mcp", "approve": ["deploy"]}]
APPROVAL = {"turn": 2, "call": 1, "tool": "deploy", "arguments": '{"env": "prod"}'}


def one_worker(**extra: object) -> Pipeline:
    """A one-phase pipeline whose model worker may call an `approve` tool."""
    return pipeline_of(
        {"phases": [{"id": "a", "workers": [worker("w", final=True, tools=TOOLS, **extra)]}]}
    )


def started(pipeline: Pipeline) -> RunState:
    """A run whose task w@1 was dispatched (attempt 1)."""
    state = RunState()
    apply(state, ev.RunCreated(at=0.0, run_id="r", pipeline="p", definition_hash="h", topic="t"))
    for decision in settle(pipeline, state, 1.0):
        assert decision.rule in (RuleName.START, RuleName.DISPATCH)
    assert state.tasks["w@1"].status is TaskStatus.DISPATCHED
    return state


def paused(pipeline: Pipeline) -> RunState:
    """The run after its attempt stopped at a call that waits for approval."""
    state = started(pipeline)
    apply(state, ev.TaskFailed(at=2.0, task_id="w@1", attempt=1, error="x", approval=APPROVAL))
    [decision] = settle(pipeline, state, 2.0)
    assert decision.rule is RuleName.TOOL_APPROVAL
    return state


def test_a_waiting_call_pauses_the_run_and_counts_no_failure() -> None:
    """The attempt's end is no failure: no retry is scheduled, the run pauses for the tool
    call, which `waiting_calls` shows with its ref, tool and arguments."""
    state = paused(one_worker(retries=0))
    assert (state.status, state.pause_reason) == (RunStatus.PAUSED, "tool")
    assert state.tasks["w@1"].status is TaskStatus.AWAITING
    [call] = waiting_calls(state)
    assert (call["ref"], call["tool"], call["arguments"]) == (
        "w@1/2/1",
        "deploy",
        '{"env": "prod"}',
    )


def test_a_decision_resumes_the_run_with_an_attempt_that_is_no_retry() -> None:
    """Decided, the run goes on at once with attempt 2 of the same model; that attempt is
    `held`, so a worker without retries still gets its own retry after a real failure."""
    pipeline = one_worker(retries=1)
    state = paused(pipeline)
    decided = interpret_command(
        state,
        Command(
            kind=CommandKind.DECIDE_CALL,
            message=CallDecision(call="w@1/2/1", approved=True).to_message(),
            by="ops",
        ),
        3.0,
    )
    assert isinstance(decided, ev.ToolCallDecided)
    apply(state, decided)
    assert state.status is RunStatus.RUNNING
    rules = [d.rule for d in settle(pipeline, state, 3.0)]
    assert rules == [RuleName.TOOL_DECIDED, RuleName.RETRY_DUE]
    task = state.tasks["w@1"]
    assert (task.attempt, task.held, task.status) == (2, 1, TaskStatus.DISPATCHED)
    assert task.tool_decisions == {"2/1": {"tool": "deploy", "approved": True, "note": ""}}
    apply(state, ev.TaskFailed(at=4.0, task_id="w@1", attempt=2, error="boom"))
    [retry] = settle(pipeline, state, 4.0)
    assert retry.rule is RuleName.RETRY  # retries: 1 is still unspent


def test_a_decision_for_a_call_that_does_not_wait_is_refused() -> None:
    """A second decision of the same call is refused, naming it as decided already."""
    state = paused(one_worker())
    message = CallDecision(call="w@1/2/1", approved=False, note="no").to_message()
    command = Command(kind=CommandKind.DECIDE_CALL, message=message)
    first = interpret_command(state, command, 3.0)
    assert isinstance(first, ev.ToolCallDecided)
    apply(state, first)
    again = interpret_command(state, command, 3.0)
    assert isinstance(again, str) and "decided already" in again


def test_check_explores_the_pause_of_a_worker_with_approve_tools() -> None:
    """`check` knows the worker can pause at a tool call, and that the run delivers after."""
    report = explore(one_worker(), name="p")
    assert report.problems == [] and report.complete and report.delivered
    assert report.paused
    assert not explore(
        pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]}), name="p"
    ).paused


def test_approve_may_not_name_a_denied_tool_or_one_allow_leaves_out() -> None:
    """A tool both approved and denied, or approved and not allowed, is refused at load,
    naming it and the fix."""
    for entry, said in (
        ({"approve": ["deploy"], "deny": ["deploy"]}, "both in 'approve' and in 'deny'"),
        ({"approve": ["deploy"], "allow": ["read"]}, "'approve' names 'deploy', which 'allow'"),
    ):
        tools = [{"url": "http://localhost:1/mcp", **entry}]
        with pytest.raises(WorkflowError, match=said):
            pipeline_of({"phases": [{"id": "a", "workers": [worker("w", tools=tools)]}]})
