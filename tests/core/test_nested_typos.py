"""A misspelt key inside budget, concurrency, wait_for or for_each names the key it meant."""

from __future__ import annotations

import pytest

from interlock.errors import WorkflowError

from .runs import pipeline_of, worker


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        ({"budget": {"max_cost_usd": 1, "on_exeed": "fail"}}, "(did you mean 'on_exceed'?)"),
        ({"concurrency": {"kye": "topic", "limit": 1}}, "(did you mean 'key'?)"),
        (
            {"phases": [{"id": "a", "wait_for": {"signal": "go", "timout": 5}}]},
            "(did you mean 'timeout'?)",
        ),
    ],
)
def test_a_nested_typo_names_the_closest_key(pipeline: dict[str, object], expected: str) -> None:
    """The unknown key's message ends with the known key of that mapping closest to it."""
    data: dict[str, object] = {"phases": [{"id": "a"}], **pipeline}
    phases = data["phases"]
    assert isinstance(phases, list)
    phases[0]["workers"] = [worker("w", final=True)]
    with pytest.raises(WorkflowError) as info:
        pipeline_of(data)
    assert expected in str(info.value)
