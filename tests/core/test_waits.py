"""Durable waits in the decision table: signals before and after a phase, timeouts, delays."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName, next_wake
from interlock.core.observe import CommandKind, SignalMessage
from interlock.core.state import RunStatus, fold, listed_status
from interlock.core.waits import start_time
from interlock.engine import inputs as obs
from interlock.errors import WorkflowError

from .runs import Run, pipeline_of, worker

R = RuleName


def gated(wait: dict[str, Any] | None = None, *, next_rules: Any = None, **phase: Any) -> Run:
    """A started run of `a` -> `b` -> `c`, where `b` has the given wait keys and `next`
    rules (before the default: on to `c`)."""
    b: dict[str, Any] = {"id": "b", "workers": [worker("wb")], **phase}
    if wait is not None:
        b["wait_for"] = wait
    b["next"] = [*(next_rules or []), {"goto": "c"}]
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {"id": "a", "workers": [worker("wa")]},
                    b,
                    {"id": "late", "workers": [worker("wl")]},
                    {"id": "c", "workers": [worker("wc", final=True)]},
                ]
            }
        )
    )
    d.start()
    return d


def signal(
    d: Run, name: str, data: Any = None, key: str | None = None, sent: float | None = None
) -> Any:
    """Send a signal command to the run and step: the decisions that followed, or why the
    run refused it."""
    message = SignalMessage(name=name, data=data, key=key, sent_at=sent)
    made = d.step(obs.PersonCommand(kind=CommandKind.SIGNAL, message=message.to_message()))
    if made.refused:
        return made.refused[0]
    return [r for r in made.events if r.rule is not None]


def test_wait_before_holds_the_phase_until_the_signal_arrives() -> None:
    """A phase with wait_for starts no task until its signal arrives; then its data is read."""
    d = gated({"signal": "go", "timeout": "1h"})
    d.complete("wa@1")
    assert d.rules()[-1] is R.WAIT
    waiting = d.state.waiting
    assert waiting is not None and waiting.signal == "go" and waiting.until == 3600.0
    assert d.in_flight() == [] and listed_status(d.state) == "waiting"
    assert next_wake(d.pipeline, d.state) == 3600.0
    d.now = 10
    signal(d, "go", {"amount": 3})
    assert [x.rule for x in d.decisions[-2:]] == [R.SIGNAL, R.DISPATCH]
    assert d.state.signals == {"go": {"amount": 3}} and d.in_flight() == ["wb@1"]
    assert listed_status(d.state) == "running"


def test_a_signal_sent_before_the_wait_is_kept_and_taken_by_it() -> None:
    """A signal that arrives while an earlier phase runs waits in the inbox for the wait."""
    d = gated({"signal": "go"})
    assert signal(d, "go", "early") == []
    assert [s.name for s in d.state.inbox] == ["go"]
    d.complete("wa@1")
    assert [x.rule for x in d.decisions[-3:]] == [R.WAIT, R.SIGNAL, R.DISPATCH]
    assert d.state.inbox == [] and d.state.signals["go"] == "early"


def test_timeout_goes_on_with_the_signal_null_and_the_next_rules_decide() -> None:
    """A timed-out wait records signals.NAME as null, and a rule on it chooses the path."""
    d = gated(
        {"signal": "go", "timeout": 60, "when": "after"},
        next_rules=[{"if": "signals.go == null", "goto": "late"}],
    )
    d.complete("wa@1")
    d.complete("wb@1")
    assert d.rules()[-1] is R.WAIT and d.state.waiting is not None
    d.advance(59)
    assert d.state.waiting is not None
    d.advance_to_wake()
    assert R.WAIT_TIMEOUT in d.rules()
    assert d.state.signals == {"go": None}
    assert d.state.current is not None and d.state.current.phase == "late"


def test_timeout_before_the_phase_skips_its_tasks() -> None:
    """A phase whose signal never came does not run: its next rules decide at once."""
    d = gated(
        {"signal": "go", "timeout": 5}, next_rules=[{"if": "signals.go == null", "goto": "late"}]
    )
    d.complete("wa@1")
    d.advance(5)
    assert "wb@1" not in d.state.tasks
    assert d.state.current is not None and d.state.current.phase == "late"


def test_timeout_before_the_last_phase_fails_the_run_naming_it() -> None:
    """The last phase cannot be skipped: a timed-out wait before it fails the run."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "wait_for": {"signal": "go", "timeout": 1},
                        "workers": [worker("w", final=True)],
                    }
                ]
            }
        )
    )
    d.start()
    d.advance(1)
    assert d.state.status is RunStatus.FAILED
    assert "signal 'go' did not arrive" in (d.state.failure or "")


def test_a_signal_after_the_timeout_does_not_end_the_wait_even_when_recorded_late() -> None:
    """A signal sent after the deadline times the wait out and stays in the inbox."""
    d = gated({"signal": "go", "timeout": 60})
    d.complete("wa@1")
    d.now = 500  # no orchestrator ran in between
    signal(d, "go", "late", sent=200)
    assert R.WAIT_TIMEOUT in d.rules() and R.SIGNAL not in d.rules()
    assert [s.data for s in d.state.inbox] == ["late"]


def test_a_signal_sent_in_time_counts_when_recorded_after_the_deadline() -> None:
    """The sender's time decides: sent before the timeout, it ends the wait."""
    d = gated({"signal": "go", "timeout": 60})
    d.complete("wa@1")
    d.now = 500
    signal(d, "go", "in time", sent=30)
    assert R.SIGNAL in d.rules() and d.state.signals["go"] == "in time"


def test_duplicate_idempotency_key_is_ignored_and_says_so() -> None:
    """A second signal with the same key is refused by the command and ignored by the fold."""
    d = gated({"signal": "go"})
    signal(d, "go", 1, key="k")
    refused = signal(d, "go", 2, key="k")
    assert isinstance(refused, str) and "already received" in refused and "'k'" in refused
    twice = fold([*d.history, ev.SignalReceived(at=1, name="go", data=2, key="k")])
    assert [s.data for s in twice.inbox] == [1]


def test_a_signal_for_an_ended_run_names_the_states_it_can_be_sent_in() -> None:
    """Signals are refused once a run ended, with the states that accept them."""
    d = gated({"signal": "go"})
    d.record(ev.RunCancelled(at=0, reason="x"))
    refused = signal(d, "go")
    assert isinstance(refused, str)
    assert "cancelled" in refused and "running, waiting or paused" in refused


def test_delay_is_recorded_once_and_ends_at_its_due_time() -> None:
    """A delay's due time is fixed when the wait starts; the phase starts when it comes."""
    d = gated(delay="2h")
    d.now = 100
    d.complete("wa@1")
    waiting = d.state.waiting
    assert waiting is not None and waiting.signal is None and waiting.until == 100 + 7200
    # A restart folds the same history: the due time is read back, not computed again.
    assert fold(d.history).waiting == waiting
    d.advance(7199)
    assert d.in_flight() == []
    d.advance(1)
    assert R.WAIT_DUE in d.rules() and d.in_flight() == ["wb@1"]


def test_delay_then_signal_then_tasks_in_that_order() -> None:
    """With both a delay and a wait_for before, the delay passes first, then the signal."""
    d = gated({"signal": "go"}, delay=10)
    d.complete("wa@1")
    signal(d, "go", "x")
    assert d.state.waiting is not None and d.state.waiting.gate == "delay"
    d.advance(10)
    assert [x.rule for x in d.decisions[-4:]] == [R.WAIT_DUE, R.WAIT, R.SIGNAL, R.DISPATCH]


def test_not_before_reads_an_input_timestamp() -> None:
    """`not_before` takes its due time from an expression over the inputs."""
    pipeline = pipeline_of(
        {
            "inputs": {"at": "2030-01-01T00:00:00Z"},
            "phases": [
                {
                    "id": "a",
                    "not_before": "inputs.at",
                    "workers": [worker("w", final=True)],
                }
            ],
        }
    )
    d = Run(pipeline)
    d.start(inputs={"at": "2030-01-01T00:00:00Z"})
    assert d.state.waiting is not None and d.state.waiting.until == 1893456000.0


def test_not_before_that_cannot_be_read_fails_the_run_with_the_place() -> None:
    """A not_before without a usable time fails the run naming the phase and the fix."""
    pipeline = pipeline_of(
        {
            "inputs": {"at": "soon"},
            "phases": [
                {"id": "a", "not_before": "inputs.at", "workers": [worker("w", final=True)]}
            ],
        }
    )
    d = Run(pipeline)
    d.start(inputs={"at": "soon"})
    assert d.state.status is RunStatus.FAILED
    assert "phase 'a', not_before" in (d.state.failure or "")
    assert "RFC 3339" in (d.state.failure or "")


@pytest.mark.parametrize(
    ("expression", "context", "expected"),
    [
        ("inputs.t", {"inputs": {"t": 12.5}}, 12.5),
        ("inputs.t", {"inputs": {"t": "1970-01-01T00:01:00+00:00"}}, 60.0),
        ("timestamp(inputs.t)", {"inputs": {"t": "1970-01-01T00:02:00Z"}}, 120.0),
    ],
)
def test_start_time_accepts_numbers_text_and_timestamps(
    expression: str, context: dict[str, Any], expected: float
) -> None:
    """`not_before` may give epoch seconds, RFC 3339 text or a CEL timestamp."""
    assert start_time(expression, context) == expected


def test_each_visit_waits_again() -> None:
    """A phase visited again by a loop waits for a new signal on its new visit."""
    d = gated(
        {"signal": "go"},
        next_rules=[{"if": "signals.go == 'again'", "goto": "b", "max_visits": 2}],
    )
    d.complete("wa@1")
    signal(d, "go", "again")
    d.complete("wb@1")
    assert d.state.current is not None and d.state.current.visit == 2
    assert d.state.waiting is not None and d.in_flight() == []
    signal(d, "go", "done")
    d.complete("wb@2")
    assert d.state.current is not None and d.state.current.phase == "c"


def test_a_rejection_at_a_budget_pause_during_a_wait_leaves_no_wait_behind() -> None:
    """A run rejected while a budget pause interrupted its wait waits afresh in the new
    visit, instead of ending the old visit's wait there."""
    d = gated({"signal": "go", "timeout": 50})
    d.complete("wa@1")
    assert d.state.waiting is not None and d.state.waiting.phase == "b"
    d.record(ev.Paused(at=d.now, phase="b", visit=1, reason="budget"))
    d.record(ev.Rejected(at=d.now, to="a", feedback="again"))
    d.settle()
    assert d.state.current is not None and d.state.current.phase == "a"
    assert d.state.waiting is None and d.in_flight() == ["wa@2"]
    d.complete("wa@2")
    waiting = d.state.waiting
    assert waiting is not None and (waiting.phase, waiting.visit) == ("b", 2)


def test_wait_after_the_last_phase_holds_the_delivery() -> None:
    """A wait after the final phase delivers only once the signal arrived."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "wait_for": {"signal": "ship", "when": "after"},
                        "workers": [worker("w", final=True)],
                    }
                ]
            }
        )
    )
    d.start()
    d.complete("w@1")
    assert d.state.status is RunStatus.RUNNING and d.state.waiting is not None
    signal(d, "ship")
    assert d.state.status is RunStatus.DELIVERED


def test_bad_wait_keys_are_refused_with_the_fix() -> None:
    """A signal name that conditions cannot read, or both delay and not_before, are errors."""
    with pytest.raises(WorkflowError, match="must be an identifier"):
        pipeline_of(
            {
                "phases": [
                    {"id": "a", "wait_for": {"signal": "a-b"}, "workers": [worker("w", final=True)]}
                ]
            }
        )
    with pytest.raises(WorkflowError, match="'delay' or 'not_before', not both"):
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "delay": 1,
                        "not_before": "inputs.x",
                        "workers": [worker("w", final=True)],
                    }
                ]
            }
        )
    with pytest.raises(WorkflowError, match="duration like 30s"):
        pipeline_of(
            {"phases": [{"id": "a", "delay": "soon", "workers": [worker("w", final=True)]}]}
        )


def _explore(data: dict[str, Any]) -> list[str]:
    from interlock.core.explore import explore

    report = explore(pipeline_of(data), name="p")
    assert report.complete
    return report.problems


def _waiting_flow(wait: dict[str, Any], **ship: Any) -> dict[str, Any]:
    return {
        "phases": [
            {"id": "a", "workers": [worker("wa")]},
            {"id": "ship", "wait_for": wait, "workers": [worker("ws")], **ship},
            {"id": "z", "workers": [worker("wz", final=True)]},
        ]
    }


def test_check_explores_arrival_timeout_and_delay_and_finds_them_sound() -> None:
    """Signals that arrive or time out, and delays that pass, all lead to a delivery."""
    read = {"next": [{"if": "signals.pay == null", "goto": "z"}]}
    assert _explore(_waiting_flow({"signal": "pay", "timeout": 60, "schema": {}}, **read)) == []
    assert _explore(_waiting_flow({"signal": "pay", "when": "after"}, delay="1h")) == []


def test_check_reports_signal_data_no_path_reads() -> None:
    """A wait whose signal carries data (a schema) that nothing reads is a dead end."""
    problems = _explore(_waiting_flow({"signal": "pay", "schema": {"type": "object"}}))
    assert problems == [
        "pipeline 'p', phase 'ship': signal 'pay' carries data (its wait has a schema), but no "
        "path reads it after the wait: read signals.pay in a later next rule or task template "
        "(e.g. {{ signals.pay }}), or drop the schema"
    ]
    templated = _waiting_flow({"signal": "pay", "schema": {}})
    templated["phases"][2]["workers"][0]["task"] = "Ship for {{ signals.pay.amount }}"
    assert _explore(templated) == []


def test_check_reports_a_timeout_before_the_last_phase() -> None:
    """A run that times out waiting to start its last phase fails: check says where."""
    problems = _explore(
        {
            "phases": [
                {"id": "a", "workers": [worker("wa")]},
                {
                    "id": "z",
                    "wait_for": {"signal": "go", "timeout": 5},
                    "workers": [worker("wz", final=True)],
                },
            ]
        }
    )
    assert problems == [
        "pipeline 'p', a run can fail on a path where phase 'z': signal 'go' did not arrive "
        "within its timeout, and the last phase cannot be skipped"
    ]


def test_reading_a_signal_no_phase_waits_for_is_an_error_naming_the_fix() -> None:
    """A condition reading signals.X with no wait for X names the place and the fix."""
    data = _waiting_flow({"signal": "pay"}, next=[{"if": "signals.payed != null", "goto": "z"}])
    with pytest.raises(WorkflowError) as caught:
        pipeline_of(data)
    assert caught.value.problems == [
        "pipeline 'p', phase 'ship', next rule 1: reads signals.payed, but no phase waits for "
        "signal 'payed' (signals waited for: pay); add 'wait_for: {signal: payed}' to the phase "
        "that should wait for it, or fix the name"
    ]


def test_one_signal_with_two_schemas_is_an_error() -> None:
    """Two waits for one signal must agree on its schema (it is checked when sent)."""
    data = _waiting_flow({"signal": "pay", "schema": {"type": "object"}})
    data["phases"][2]["wait_for"] = {"signal": "pay", "schema": {"type": "string"}}
    with pytest.raises(WorkflowError, match="wait for signal 'pay' with different schemas"):
        pipeline_of(data)
