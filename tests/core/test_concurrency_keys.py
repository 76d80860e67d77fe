"""Concurrency keys in the core: a run of a pipeline with `concurrency:` starts its first
phase only once `SlotTaken` is recorded; `check` explores that wait; a key may read only the
topic and the inputs."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName
from interlock.core.explore import explore
from interlock.core.expressions import evaluate_text
from interlock.errors import WorkflowError

from .runs import Run, pipeline_of, worker

KEYED = {"key": "inputs.customer", "limit": 2}


def keyed(concurrency: Any = KEYED) -> Any:
    """Two phases, one worker each, under `concurrency`."""
    return pipeline_of(
        {
            "inputs": {"customer": {"required": True}},
            "concurrency": concurrency,
            "phases": [
                {"id": "a", "workers": [worker("w")]},
                {"id": "b", "workers": [worker("v", final=True)]},
            ],
        }
    )


def test_a_keyed_run_waits_for_its_slot_before_the_first_phase() -> None:
    """Nothing is dispatched until SlotTaken; then the first phase starts as usual."""
    driver = Run(keyed())
    assert driver.start(inputs={"customer": "acme"}) == []
    assert driver.state.current is None and driver.in_flight() == []
    driver.record(ev.SlotTaken(at=0.0, key="acme"))
    made = driver.settle()
    assert [d.rule for d in made] == [RuleName.START, RuleName.DISPATCH]
    assert driver.state.slot == "acme" and driver.in_flight() == ["w@1"]


def test_a_plain_number_is_one_key_for_the_whole_pipeline() -> None:
    """`concurrency: 3` limits runs of the pipeline: a constant key, the same wait."""
    pipeline = keyed(3)
    assert pipeline.slots is not None and pipeline.slots.limit == 3
    assert evaluate_text(pipeline.slots.key, {}) == ""
    assert Run(pipeline).start(inputs={"customer": "x"}) == []


def test_a_pipeline_without_concurrency_starts_at_once() -> None:
    """No `concurrency:`: no wait, as before."""
    assert Run(keyed(None)).start(inputs={"customer": "x"})[0].rule is RuleName.START


def test_check_explores_the_wait_for_a_slot() -> None:
    """The wait is no dead end: every phase is reached and a result delivered."""
    report = explore(keyed())
    assert report.problems == [] and report.delivered
    assert report.phases_reached == {"a", "b"}


def test_a_key_is_text_or_json() -> None:
    """A key's value is a string as it is, anything else as JSON."""
    context = {"topic": "t", "inputs": {"customer": "acme", "tier": 2}}
    assert evaluate_text("inputs.customer", context) == "acme"
    assert evaluate_text("inputs.tier", context) == "2"
    assert evaluate_text("[inputs.customer, topic]", context) == '["acme", "t"]'


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "visits.a",
            "concurrency, key: 'visits.a' reads 'visits'; a key may read only 'topic' and "
            "'inputs' (it is computed when the run is created), e.g. inputs.customer",
        ),
        ("inputs.", "concurrency, key: expression 'inputs.' does not parse"),
    ],
)
def test_a_key_that_reads_more_than_topic_and_inputs_is_refused(key: str, message: str) -> None:
    """A key is computed when the run is created: it can read nothing a run produces."""
    with pytest.raises(WorkflowError) as info:
        keyed({"key": key, "limit": 1})
    assert message in str(info.value)
