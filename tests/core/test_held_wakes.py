"""`next_wake` names only a time the engine acts at: nothing it holds back counts.

A runtime sleeps until `next_wake` and then settles. A time that has passed for something
`decide` will not act on (a retry held while the run fails, or while its attempt waits for a
task slot; anything of a run that is inert or over) would wake it at once, to find nothing to
do, again and again: a busy loop until some report arrives.
"""

from __future__ import annotations

from interlock.core import events as ev
from interlock.core.decide import RuleName, next_wake, settle

from .runs import Run, pipeline_of, worker


def acts_at_wake(d: Run) -> bool:
    """Whether settling a copy of the run at its next wake-up records anything."""
    wake = next_wake(d.pipeline, d.state)
    assert wake is not None
    return bool(settle(d.pipeline, d.state.copy(), wake))


def test_a_retry_waiting_for_its_task_slot_does_not_wake_the_engine() -> None:
    """Once a due retry is recorded as waiting for a slot of its key, its backoff (passed)
    no longer counts: the engine wakes for the other attempt's deadline, and the retry is
    dispatched when the slot is taken."""
    key = {"key": "inputs.customer", "limit": 1}
    d = Run(
        pipeline_of(
            {
                "inputs": {"customer": {"required": True}},
                "phases": [
                    {
                        "id": "a",
                        "workers": [
                            worker("w", concurrency=key, retries=1, backoff={"jitter": 0}),
                            worker("x", timeout=50, grace=0),
                        ],
                    },
                    {"id": "b", "workers": [worker("v", final=True)]},
                ],
            }
        )
    )
    d.start(inputs={"customer": "acme"})
    wait = d.state.task_slot_waits["w@1"]
    d.record(ev.TaskSlotTaken(at=d.now, task_id="w@1", attempt=1, key=wait.key))
    d.settle()
    d.begin("x@1")  # due at 50
    d.fail("w@1")  # its retry is due at 2 (default backoff)
    assert next_wake(d.pipeline, d.state) == 2.0
    assert [m.rule for m in d.advance_to_wake()] == [RuleName.TASK_SLOT]
    assert d.state.task_slot_waits["w@1"].attempt == 2
    assert next_wake(d.pipeline, d.state) == 50.0 and acts_at_wake(d)
    d.complete("x@1")
    assert next_wake(d.pipeline, d.state) is None  # only the slot moves the run on now
    d.record(ev.TaskSlotTaken(at=d.now, task_id="w@1", attempt=2, key=wait.key))
    assert [m.rule for m in d.settle()] == [RuleName.RETRY_DUE]


def test_an_inert_run_gives_no_wake_up() -> None:
    """An imported run not yet trusted decides nothing, so its attempts in flight (as the
    bundle recorded them) give no deadline to wake for; once trusted, they do."""
    d = Run(pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]}))
    d.start()
    d.begin("w@1")
    d.record(ev.RunImported(at=d.now, bundle="run.tar"))
    d.now = 10_000.0
    assert next_wake(d.pipeline, d.state) is None
    assert d.settle() == []
    d.record(ev.BundleTrusted(at=d.now, by="someone"))
    assert next_wake(d.pipeline, d.state) == 720.0 and acts_at_wake(d)
