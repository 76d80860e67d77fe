"""Folding a child run's spend into its parent: counted while it runs, replaced by its end."""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.state import RunState, fold


def history(*tail: ev.Event) -> RunState:
    """A parent whose task `sub@1` runs a child, then `tail`."""
    return fold(
        [
            ev.RunCreated(at=0.0, run_id="dad", pipeline="p", definition_hash="", topic="t"),
            ev.PhaseStarted(at=0.0, phase="p", visit=1),
            ev.TaskDispatched(
                at=0.0, task_id="sub@1", phase="p", role="sub", visit=1, item=None, attempt=1
            ),
            *tail,
        ]
    )


def spent(cost: float, tokens: int, attempt: int = 1) -> ev.ChildSpent:
    """The child of `attempt` has spent so much so far."""
    return ev.ChildSpent(
        at=1.0, task_id="sub@1", attempt=attempt, child_run="kid", cost_usd=cost, tokens=tokens
    )


def test_a_later_running_total_replaces_an_earlier_one() -> None:
    """Two records of a running child's spend count as the later one, not their sum."""
    state = history(spent(0.25, 100), spent(0.75, 300))
    assert (state.cost_usd, state.tokens) == (0.75, 300)
    assert state.tasks["sub@1"].child_spend == {1: (0.75, 300)}


def test_the_childs_final_usage_replaces_what_was_counted_while_it_ran() -> None:
    """The attempt's result carries the child's whole spend: it counts once, and a running
    total recorded late (after the result) changes nothing."""
    usage = {"cost_usd": 1.0, "input_tokens": 300, "output_tokens": 100}
    failed = ev.TaskFailed(at=2.0, task_id="sub@1", attempt=1, error="x", usage=usage)
    state = history(spent(0.5, 200), failed, spent(0.9, 390))
    assert (state.cost_usd, state.tokens) == (1.0, 400)
    assert state.tasks["sub@1"].child_spend == {}


def test_usage_recorded_after_the_parent_ended_settles_the_running_total() -> None:
    """A parent cancelled while its child ran records the child's final spend as late usage;
    it replaces the running total instead of adding to it."""
    usage = {"cost_usd": 0.5, "input_tokens": 250, "output_tokens": 0}
    state = history(
        spent(0.25, 100),
        ev.RunCancelled(at=2.0, reason="stop"),
        ev.UsageRecorded(at=3.0, task_id="sub@1", attempt=1, usage=usage),
    )
    assert (state.cost_usd, state.tokens) == (0.5, 250)
