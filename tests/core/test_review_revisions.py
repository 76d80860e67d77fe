"""What an edit at a review runs again: only the tasks that read the version edited, never
tasks of an earlier visit that read an earlier version of the same output."""

from __future__ import annotations

from typing import Any

from interlock.core import events as ev
from interlock.core.decide import RuleName
from interlock.core.fingerprint import template_values
from interlock.core.review import (
    EditRequest,
    RejectRequest,
    check_reject,
    interpret_edit,
    interpret_reject,
)

from .runs import Run, pipeline_of, worker

LIST = {"items": {"json": "items", "type": "list"}}


def looped() -> Any:
    """`p` lists items; `r` runs once per item reading `p.md`, then a review; `f` delivers."""
    return pipeline_of(
        {
            "phases": [
                {"id": "plan", "workers": [worker("p", extract=LIST)]},
                {
                    "id": "fan",
                    "for_each": {"items": "p.items"},
                    "pause_after": True,
                    "workers": [worker("r", reads=["p.md"])],
                },
                {"id": "end", "workers": [worker("f", final=True)]},
            ]
        }
    )


def edit(driver: Run, output: str) -> list[Any]:
    """A person replaces `output` at the review, then the table settles."""
    message = EditRequest(output=output, body='{"items": []}\n').to_message()
    made = interpret_edit(driver.pipeline, driver.state, message, "tester", driver.now)
    assert not isinstance(made, str), made
    driver.record(made[0])
    return driver.settle()


def reject(driver: Run, to: str) -> list[Any]:
    """A person sends the paused run back to phase `to`, then the table settles."""
    message = RejectRequest(to=to, feedback="again").to_message()
    made = interpret_reject(driver.pipeline, driver.state, message, "tester", driver.now)
    assert isinstance(made, ev.Rejected), made
    driver.record(made)
    return driver.settle()


def test_an_edit_does_not_run_again_the_tasks_of_a_visit_that_read_an_earlier_version() -> None:
    """Visit 1 of the fan-out read `p` of visit 1; sent back, `p` of visit 2 lists no items, so
    visit 2 of the fan-out runs nothing and pauses. Editing `p` of visit 2 then makes nothing
    stale: the tasks of visit 1 never read it (they ran again in a visit already over, still
    in flight when the next one began, and a fingerprint read the items of the wrong visit)."""
    driver = Run(looped())
    driver.start()
    driver.complete("p@1", {"items": ["x", "y"]})
    driver.complete("r@1.0")
    driver.complete("r@1.1")
    assert driver.state.status.value == "paused"
    reject(driver, "plan")
    driver.complete("p@2", {"items": []})
    current = driver.state.current
    assert current is not None and (current.phase, current.visit, current.completed) == (
        "fan",
        2,
        True,
    )
    assert driver.state.status.value == "paused"
    assert edit(driver, "p.v2.md") == []
    assert driver.in_flight() == []
    made = driver.approve()
    assert RuleName.REVISE not in [d.rule for d in made]
    assert driver.in_flight() == ["f@1"]


def test_an_edit_runs_again_the_tasks_that_read_the_version_edited() -> None:
    """Editing `p` at the fan-out's review makes both items' tasks of that visit run again
    once the run is approved."""
    driver = Run(looped())
    driver.start()
    driver.complete("p@1", {"items": ["x", "y"]})
    driver.complete("r@1.0")
    driver.complete("r@1.1")
    assert edit(driver, "p.md") == []
    made = driver.approve()
    assert [(d.rule, getattr(d.event, "task_id", None)) for d in made] == [
        (RuleName.REVISE, "r@1.0"),
        (RuleName.REVISE, "r@1.1"),
    ]


def test_a_task_of_another_visit_is_given_no_item_of_the_current_one() -> None:
    """A task's template item is its own visit's: for a task of a visit that is over, the
    current visit's items (another list, here an empty one) are not read."""
    driver = Run(looped())
    driver.start()
    driver.complete("p@1", {"items": ["x", "y"]})
    assert template_values(driver.state, driver.state.tasks["r@1.1"])["item"] == "y"
    driver.complete("r@1.0")
    driver.complete("r@1.1")
    reject(driver, "plan")
    driver.complete("p@2", {"items": []})
    assert template_values(driver.state, driver.state.tasks["r@1.1"])["item"] is None


def test_a_run_with_a_failed_attempt_not_yet_retried_is_not_rejected() -> None:
    """At a budget pause a running task fails; its report is folded before the engine settles
    (with a reject command in the same look). The rejection is refused as for a task waiting
    for its retry: accepted, the retry scheduled after it ran a task of the visit left
    behind while the new visit waited for a signal."""
    driver = Run(
        pipeline_of(
            {
                "budget": {"max_tokens": 10, "on_exceed": "pause"},
                "phases": [
                    {"id": "a", "workers": [worker("w1"), worker("w2", retries=1)]},
                    {"id": "b", "workers": [worker("w3", final=True)]},
                ],
            }
        )
    )
    driver.start()
    driver.complete("w1@1", input_tokens=20)
    assert driver.state.status.value == "paused"
    driver.record(
        ev.TaskFailed(at=driver.now, task_id="w2@1", attempt=1, error="boom", retryable=True)
    )
    problem = check_reject(driver.pipeline, driver.state, "a")
    assert problem is not None and "waiting for a retry" in problem


def test_a_run_with_a_task_waiting_for_its_slot_is_not_rejected() -> None:
    """At a budget pause a keyed task still waits for its slot: the rejection is refused.
    Accepted, the slot that attempt got afterwards was held for good, and the keyed tasks
    of the new visit waited for it forever (the run was stuck)."""
    driver = Run(
        pipeline_of(
            {
                "budget": {"max_tokens": 10, "on_exceed": "pause"},
                "phases": [
                    {
                        "id": "a",
                        "workers": [
                            worker("w1"),
                            worker("w2", concurrency={"key": '"k"', "limit": 1}),
                        ],
                    },
                    {"id": "b", "workers": [worker("w3", final=True)]},
                ],
            }
        )
    )
    driver.start()
    assert set(driver.state.task_slot_waits) == {"w2@1"}
    driver.complete("w1@1", input_tokens=20)
    assert driver.state.status.value == "paused"
    problem = check_reject(driver.pipeline, driver.state, "a")
    assert problem is not None and "waiting for a retry or a slot" in problem
