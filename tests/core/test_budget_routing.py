"""Conditions read the budget: `budget.spent_usd`, `budget.remaining_usd` and the token
equivalents, folded from recorded usage, so a rule can send a run down a cheaper path."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName, expression_context
from interlock.core.explore import explore
from interlock.errors import WorkflowError

from .runs import Run, pipeline_of, worker


def routed(budget: dict[str, Any], condition: str = "budget.remaining_usd < 0.5") -> Any:
    """Draft, then `short` when the condition holds, else `full`; both end in publish."""
    return pipeline_of(
        {
            "budget": budget,
            "phases": [
                {"id": "draft", "workers": [worker("writer")], "next": [
                    {"if": condition, "goto": "short"}
                ]},
                {"id": "full", "workers": [worker("expander")], "next": [{"goto": "publish"}]},
                {"id": "short", "workers": [worker("summarizer")]},
                {"id": "publish", "workers": [worker("editor", final=True)]},
            ],
        }
    )  # fmt: skip


def branch_after_draft(driver: Run) -> ev.BranchTaken:
    [branch] = driver.events_of(ev.BranchTaken)
    return branch


def test_little_budget_left_takes_the_cheaper_path() -> None:
    """$0.60 of $1 spent leaves $0.40: the rule holds and the run goes to `short`."""
    driver = Run(routed({"max_cost_usd": 1.0}))
    driver.start()
    driver.complete("writer@1", cost_usd=0.6, input_tokens=100, output_tokens=50)
    branch = branch_after_draft(driver)
    assert (branch.goto, branch.rule, branch.condition) == (
        "short",
        1,
        "budget.remaining_usd < 0.5",
    )
    assert driver.in_flight() == ["summarizer@1"]
    assert expression_context(driver.state, driver.pipeline)["budget"] == {
        "spent_usd": 0.6,
        "spent_tokens": 150,
        "remaining_usd": 0.4,
        "remaining_tokens": None,
    }


def test_enough_budget_left_takes_the_full_path() -> None:
    """$0.10 of $1 spent leaves $0.90: the rule does not hold and the run goes on to `full`."""
    driver = Run(routed({"max_cost_usd": 1.0}))
    driver.start()
    driver.complete("writer@1", cost_usd=0.1)
    assert branch_after_draft(driver).goto == "full"
    assert driver.in_flight() == ["expander@1"]


def test_usage_recorded_on_its_own_counts_too() -> None:
    """Usage recorded apart from a result (a stopped call's) is spent like any other: with
    it the tokens left fall under the rule's threshold."""
    driver = Run(routed({"max_tokens": 1000}, "budget.remaining_tokens < 500"))
    driver.start()
    usage = {"input_tokens": 400, "output_tokens": 200}
    driver.record(ev.UsageRecorded(at=0.0, task_id="writer@1", attempt=1, usage=usage))
    driver.complete("writer@1")
    assert branch_after_draft(driver).goto == "short"
    assert expression_context(driver.state, driver.pipeline)["budget"]["remaining_tokens"] == 400


def test_what_is_left_never_goes_below_zero() -> None:
    """Past the limit (an approved budget pause), what is left reads 0, not a negative."""
    driver = Run(routed({"max_cost_usd": 1.0, "max_tokens": 10, "on_exceed": "pause"}))
    driver.start()
    driver.complete("writer@1", cost_usd=1.5, input_tokens=20)
    assert driver.rules()[-1] is RuleName.BUDGET
    values = expression_context(driver.state, driver.pipeline)["budget"]
    assert (values["remaining_usd"], values["remaining_tokens"]) == (0.0, 0)
    driver.approve()
    assert branch_after_draft(driver).goto == "short"


def test_check_explores_both_branches_of_a_budget_rule() -> None:
    """The explorer forces a budget condition both ways: both paths are reached."""
    report = explore(routed({"max_cost_usd": 1.0}))
    assert report.problems == []
    assert report.phases_reached == {"draft", "full", "short", "publish"}


def test_a_budget_name_that_does_not_exist_is_refused() -> None:
    """`budget.left` is no budget value: the error lists the ones there are."""
    with pytest.raises(WorkflowError) as info:
        routed({"max_cost_usd": 1.0}, "budget.left < 0.5")
    assert (
        "phase 'draft', next rule 1: expression 'budget.left < 0.5' reads budget.left; the "
        "budget has budget.spent_usd, budget.spent_tokens, budget.remaining_usd, "
        "budget.remaining_tokens"
    ) in str(info.value)


def test_what_is_left_of_a_limit_not_set_is_refused() -> None:
    """Reading `budget.remaining_usd` needs a `max_cost_usd`: the error says to add it."""
    with pytest.raises(WorkflowError) as info:
        routed({"max_tokens": 1000})
    assert (
        "reads budget.remaining_usd, but the pipeline's budget sets no max_cost_usd; add "
        "budget: {max_cost_usd: ...} to the pipeline"
    ) in str(info.value)
