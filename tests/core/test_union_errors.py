"""A key that may be written two ways (`concurrency: 3` or `{key, limit}`) gets the errors
of the way it is written, in the file's words, not one per way with pydantic's type names."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.errors import WorkflowError

from .runs import pipeline_of, worker


def problems(concurrency: Any) -> list[str]:
    """The problems `check` reports for a pipeline with this `concurrency`."""
    with pytest.raises(WorkflowError) as info:
        pipeline_of(
            {
                "inputs": {"customer": "acme"},
                "concurrency": concurrency,
                "phases": [{"id": "a", "workers": [worker("w", final=True)]}],
            }
        )
    return [line.strip() for line in str(info.value).splitlines()[1:]]


def test_a_mapping_is_told_only_what_is_wrong_in_it() -> None:
    """`{key: ..., limit: 0}` is one problem at `limit`, without 'a valid integer'."""
    assert problems({"key": "inputs.customer", "limit": 0}) == [
        "- pipeline 'p', key 'concurrency', key 'limit': must be greater than or equal to 1"
    ]


def test_a_number_is_told_only_what_is_wrong_with_it() -> None:
    """`concurrency: 0` is one problem at `concurrency`, naming no type of the code."""
    assert problems(0) == ["- pipeline 'p', key 'concurrency': must be greater than or equal to 1"]
