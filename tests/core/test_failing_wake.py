"""A run failing because of a task with no attempt left waits for the attempts under way,
and wakes for their deadlines only: the retries it holds never come due."""

from __future__ import annotations

from interlock.core.decide import RuleName, next_wake

from .runs import Run, pipeline_of, worker


def test_a_failing_run_wakes_for_the_deadline_of_what_runs_not_for_a_held_retry() -> None:
    """w1 waits for its retry, w3 runs, then w2 fails for good: the run fails once w3 has
    ended, so its next wake is w3's deadline. The retry's due time (earlier) woke a loop
    that found nothing to do, again and again, and hid the deadline (the run was stuck)."""
    driver = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "workers": [
                            worker("w1", retries=1, backoff={"initial": 4, "max": 8}),
                            worker("w2"),
                            worker("w3", timeout=50, grace=5),
                        ],
                    },
                    {"id": "b", "workers": [worker("f", final=True)]},
                ]
            }
        )
    )
    driver.start()
    driver.begin("w3@1")
    assert [d.rule for d in driver.fail("w1@1")] == [RuleName.RETRY]
    retry_due = driver.state.tasks["w1@1"].not_before
    assert retry_due is not None and retry_due < 55.0
    assert driver.fail("w2@1", retryable=False) == []  # waits for w3 before failing
    assert next_wake(driver.pipeline, driver.state) == 55.0
    driver.now = retry_due
    assert driver.settle() == []  # the held retry does not run
    assert next_wake(driver.pipeline, driver.state) == 55.0
    made = driver.advance_to_wake()
    assert [d.rule for d in made] == [RuleName.TIMEOUT, RuleName.GIVE_UP]
