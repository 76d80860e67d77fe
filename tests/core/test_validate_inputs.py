"""Expressions that read `inputs.NAME` are checked against the pipeline's declared inputs:
a run can never have an undeclared one, so a misspelt name is an error at `check`."""

from __future__ import annotations

import pytest

from interlock.errors import WorkflowError

from .runs import pipeline_of, worker


def test_a_concurrency_key_reading_an_undeclared_input_is_refused() -> None:
    """`key: inputs.custmer` names the input it meant and the declared ones."""
    with pytest.raises(WorkflowError) as info:
        pipeline_of(
            {
                "inputs": {"customer": "acme"},
                "concurrency": {"key": "inputs.custmer", "limit": 1},
                "phases": [{"id": "a", "workers": [worker("w", final=True)]}],
            }
        )
    assert (
        "concurrency, key: expression 'inputs.custmer' reads inputs.custmer, which is not a "
        "declared input (did you mean 'customer'?); declared inputs: customer"
    ) in str(info.value)


def test_a_condition_reading_an_undeclared_input_is_refused() -> None:
    """A next rule that reads `inputs.tone` where only `tier` is declared is an error at its
    place; one that reads a declared input passes."""
    with pytest.raises(WorkflowError) as info:
        pipeline_of(
            {
                "inputs": {"tier": "gold"},
                "phases": [
                    {
                        "id": "a",
                        "workers": [worker("w")],
                        "next": [{"if": "inputs.tone == 'x'", "goto": "b"}],
                    },
                    {"id": "b", "workers": [worker("v", final=True)]},
                ],
            }
        )
    assert "phase 'a', next rule 1: expression \"inputs.tone == 'x'\" reads inputs.tone" in str(
        info.value
    )
    pipeline_of(
        {
            "inputs": {"tier": "gold"},
            "phases": [
                {
                    "id": "a",
                    "workers": [worker("w")],
                    "next": [{"if": "inputs.tier == 'x'", "goto": "b"}],
                },
                {"id": "b", "workers": [worker("v", final=True)]},
            ],
        }
    )
