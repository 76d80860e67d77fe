"""The worst-case quote: hand-computed costs and tokens for small pipelines, and the cases
that have no bound, each naming the worker and the setting that bounds it."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core.explore import explore
from interlock.core.quote import ModelTerms, Quote, TextSizes, quote
from interlock.core.workflow import Budget, Pipeline

from .runs import pipeline_of, worker

# Every prompt below: 300 (PROMPT_TOKENS) + the topic (100) + what the worker reads.
SIZES = TextSizes(topic=100)
CHEAP = ModelTerms(input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, max_output_tokens=1000)
DEAR = ModelTerms(input_usd_per_mtok=10.0, output_usd_per_mtok=20.0, max_output_tokens=500)


def quoted(pipeline: Pipeline, terms: dict[str, ModelTerms] | None = None, **over: Any) -> Quote:
    """Quote `pipeline` over the paths the explorer finds; aliases priced by `terms`."""
    prices = {"m": CHEAP, **(terms or {})}
    report = explore(pipeline)
    table = {
        (w.role, alias): prices[alias]
        for p in pipeline.phases
        for w in p.workers
        if w.model is not None
        for alias in (w.model, *w.fallback_models)
    }
    return quote(
        "p",
        pipeline,
        terms=table,
        sizes=over.get("sizes", SIZES),
        visit_counts=report.ways,
        complete=report.complete,
    )


def test_retries_count_every_attempt() -> None:
    """Two retries make three calls, each a 400-token prompt answered with 1,000 tokens."""
    p = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", retries=2, final=True)]}]})
    q = quoted(p)
    assert q.tokens == 3 * (400 + 1000)
    assert q.usd == pytest.approx(3 * (400 * 1.0 + 1000 * 2.0) / 1e6)
    assert q.tasks[0].calls == 3 and q.tasks[0].prompt_tokens == 400


def test_fallback_models_are_priced_each_at_their_own_rate() -> None:
    """A fallback model gets its own retries at its own price and output limit."""
    w = worker("w", retries=1, fallback_models=["dear"], final=True)
    q = quoted(pipeline_of({"phases": [{"id": "a", "workers": [w]}]}), {"dear": DEAR})
    cheap = 2 * (400 * 1.0 + 1000 * 2.0) / 1e6
    dear = 2 * (400 * 10.0 + 500 * 20.0) / 1e6
    assert q.usd == pytest.approx(cheap + dear)  # 0.0048 + 0.028
    assert q.tokens == 2 * 1400 + 2 * 900


def test_a_loop_counts_every_visit_max_visits_allows() -> None:
    """A review that may send the draft back (max_visits 2: two drafts in all) costs two
    drafts, two reviews and one publish."""
    p = pipeline_of(
        {
            "phases": [
                {"id": "draft", "workers": [worker("writer")]},
                {
                    "id": "review",
                    "workers": [
                        worker(
                            "reviewer",
                            reads=["writer.md"],
                            extract={"ok": {"json": "ok", "type": "bool"}},
                        )
                    ],
                    "next": [{"if": "!reviewer.ok", "goto": "draft", "max_visits": 2}],
                },
                {"id": "publish", "workers": [worker("publisher", final=True)]},
            ]
        }
    )
    q = quoted(p)
    draft, review, publish = 400 + 1000, (400 + 30 + 1000) + 1000, 400 + 1000
    assert q.tokens == 2 * draft + 2 * review + publish  # 9,060
    assert q.usd == pytest.approx((2 * 2400 + 2 * (1430 + 2000) + 2400) / 1e6)
    assert dict(q.usd_path) == {"draft": 2, "review": 2, "publish": 1}


def test_a_fan_out_counts_max_items_lanes_and_their_reader_reads_them_all() -> None:
    """Three lanes each read the item (the planner's output at most) and one reader gets
    all three outputs."""
    planner = ModelTerms(input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, max_output_tokens=100)
    p = pipeline_of(
        {
            "phases": [
                {
                    "id": "plan",
                    "workers": [
                        {
                            "role": "planner",
                            "model": "small",
                            "extract": {"items": {"json": "items", "type": "list"}},
                        }
                    ],
                },
                {
                    "id": "each",
                    "for_each": {"items": "planner.items", "max_items": 3},
                    "workers": [worker("writer", task="Write about {{ item }}")],
                },
                {"id": "join", "workers": [worker("joiner", reads=["writer.md"], final=True)]},
            ]
        }
    )
    q = quoted(p, {"small": planner})
    plan = 400 + 100
    lane = (300 + 6 + 100 + 100) + 1000  # task text: 22 characters, 6 tokens
    join = (400 + 3 * (30 + 1000)) + 1000
    assert q.tokens == plan + 3 * lane + join  # 9,508
    assert [t.lanes for t in q.tasks] == [1, 3, 1]


def test_commands_cost_nothing() -> None:
    """A command worker adds no cost and no tokens."""
    p = pipeline_of(
        {
            "phases": [
                {"id": "a", "workers": [{"role": "c", "command": ["true"]}]},
                {"id": "b", "workers": [worker("w", final=True)]},
            ]
        }
    )
    q = quoted(p)
    assert q.tokens == 1400 and q.tasks[0].usd == 0.0 and q.tasks[0].tokens == 0


def test_a_call_workers_own_model_calls_are_named_as_not_quoted() -> None:
    """A `call:` function may call models itself (`ctx.model`): the quote's amounts leave
    those calls out, and it says so for that worker alone, in words and in JSON."""
    p = pipeline_of(
        {
            "phases": [
                {"id": "a", "workers": [{"role": "agent", "call": "pkg.mod:solve"}]},
                {"id": "b", "workers": [{"role": "c", "command": ["true"]}]},
                {"id": "z", "workers": [worker("w", final=True)]},
            ]
        }
    )
    q = quoted(p)
    assert q.usd is not None and q.tokens == 400 + 1000
    assert q.not_quoted == (
        "phase 'a', worker 'agent': the model calls its call: function makes (ctx.model), "
        "held back one by one by the run's budget",
    )
    assert q.to_json()["not_quoted"] == list(q.not_quoted)
    assert (
        quoted(
            pipeline_of({"phases": [{"id": "z", "workers": [worker("w", final=True)]}]})
        ).not_quoted
        == ()
    )


def test_a_model_without_a_price_leaves_the_cost_without_a_bound() -> None:
    """No price: the cost has no bound and says how to set one; tokens are still bounded."""
    unpriced = ModelTerms(input_usd_per_mtok=None, output_usd_per_mtok=None, max_output_tokens=10)
    p = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]})
    q = quoted(p, {"m": unpriced})
    assert q.usd is None and q.tokens == 410
    assert q.usd_unbounded == (
        "phase 'a', worker 'w': model 'm' has no known price: set input_price_per_mtok and "
        "output_price_per_mtok in [models.m]",
    )
    assert q.tokens_unbounded == ()


def test_a_model_without_an_output_limit_leaves_both_without_a_bound() -> None:
    """No output limit: neither cost nor tokens are bounded, and the fix is named."""
    open_ended = ModelTerms(input_usd_per_mtok=1.0, output_usd_per_mtok=1.0, max_output_tokens=None)
    p = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]})
    q = quoted(p, {"m": open_ended})
    assert q.usd is None and q.tokens is None
    assert q.tokens_unbounded == (
        "phase 'a', worker 'w': model 'm' has no output limit: set max_output_tokens in "
        "[models.m] or in the worker's params",
    )


def test_reading_a_command_output_is_bounded_only_by_the_context_window() -> None:
    """A prompt holding a command's output has no bound, unless the window caps it."""
    p = pipeline_of(
        {
            "phases": [
                {"id": "a", "workers": [{"role": "fetch", "command": ["true"]}]},
                {"id": "b", "workers": [worker("w", reads=["fetch.md"], final=True)]},
            ]
        }
    )
    q = quoted(p)
    assert q.usd is None and q.tokens is None
    assert "it reads 'fetch.md', written by command worker 'fetch'" in q.usd_unbounded[0]
    assert "set context_tokens in [models.m] (the model's window" in q.usd_unbounded[0]
    windowed = ModelTerms(
        input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, max_output_tokens=1000,
        context_tokens=8000,
    )  # fmt: skip
    assert quoted(p, {"m": windowed}).tokens == 8000 + 1000


def test_the_free_stand_in_costs_nothing_even_without_a_limit() -> None:
    """The offline stand-in is never charged: $0, while its tokens have no bound."""
    free = ModelTerms(
        input_usd_per_mtok=None, output_usd_per_mtok=None, max_output_tokens=None, free=True
    )
    p = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True)]}]})
    q = quoted(p, {"m": free})
    assert q.usd == 0.0 and q.tokens is None and q.usd_unbounded == ()


def test_over_budget_says_by_how_much_and_what_to_change() -> None:
    """A quote over the budget gives one line per limit it passes; one under gives none."""
    p = pipeline_of({"phases": [{"id": "a", "workers": [worker("w", retries=2, final=True)]}]})
    q = quoted(p)  # $0.0072, 4,200 tokens
    assert q.over_budget(Budget(max_cost_usd=1, max_tokens=10_000)) == []
    lines = q.over_budget(Budget(max_cost_usd=0.005, max_tokens=4000, on_exceed="pause"))
    assert lines[0].startswith(
        "pipeline 'p': a run can use up to $0.0072, over its budget (max_cost_usd 0.005): "
        "the budget would pause such a run"
    )
    assert lines[1].startswith("pipeline 'p': a run can use up to 4,200 tokens, over its budget")


def test_text_sizes_assumed_at_check_and_measured_at_run() -> None:
    """`check` assumes 1,000 tokens (or a longer default); a run measures its own texts."""
    p = pipeline_of(
        {
            "inputs": {"short": "x", "long": "y" * 8000},
            "phases": [{"id": "a", "workers": [worker("w", final=True)]}],
        }
    )
    assumed = TextSizes.assumed_for(p)
    assert assumed.topic == 1000 and dict(assumed.inputs) == {"short": 1000, "long": 2000}
    run = TextSizes.of_run("abcdefghi", {"short": "xy"})
    assert run.topic == 3 and dict(run.inputs) == {"short": 1} and not run.assumed


def test_a_tool_loop_counts_max_turns_calls_each_at_the_window() -> None:
    """With tools, an attempt is up to max_turns calls whose prompts hold tool results: each
    counts at the context window, and without one the quote has no bound."""
    tools = [{"mcp": ["python", "server.py"]}]
    w = worker("w", retries=1, tools=tools, max_turns=3, final=True)
    p = pipeline_of({"phases": [{"id": "a", "workers": [w]}]})
    unbounded = quoted(p)
    assert unbounded.tokens is None
    assert unbounded.tokens_unbounded == (
        "phase 'a', worker 'w': model 'm': its prompt holds tool results, whose size has no "
        "limit: set context_tokens in [models.m] (the model's window: no larger prompt is sent)",
    )
    windowed = ModelTerms(
        input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, max_output_tokens=1000,
        context_tokens=8000,
    )  # fmt: skip
    q = quoted(p, {"m": windowed})
    assert q.tasks[0].calls == 2 * 3
    assert q.tokens == 2 * 3 * (8000 + 1000)
    assert q.usd == pytest.approx(2 * 3 * (8000 * 1.0 + 1000 * 2.0) / 1e6)


def test_a_task_holding_signal_data_counts_at_the_window() -> None:
    """Signal data comes from outside with no size limit: a task that uses it has no bound
    without a context window, and counts at the window with one."""
    w = worker("w", task="Act on {{ signals.approval }}", final=True)
    p = pipeline_of(
        {
            "phases": [
                {
                    "id": "a",
                    "wait_for": {"signal": "approval", "timeout": 60},
                    "workers": [w],
                }
            ]
        }
    )
    q = quoted(p)
    assert q.tokens is None
    assert "its task holds signal data, whose size has no limit" in q.tokens_unbounded[0]
    windowed = ModelTerms(
        input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, max_output_tokens=1000,
        context_tokens=5000,
    )  # fmt: skip
    assert quoted(p, {"m": windowed}).tokens == 5000 + 1000


def test_when_every_path_is_free_the_longest_is_shown() -> None:
    """Equal totals ($0 offline) pick the path with the most visits, not the shortest."""
    free = ModelTerms(
        input_usd_per_mtok=None, output_usd_per_mtok=None, max_output_tokens=10, free=True
    )
    p = pipeline_of(
        {
            "phases": [
                {
                    "id": "draft",
                    "workers": [worker("writer", extract={"ok": {"json": "ok", "type": "bool"}})],
                    "next": [{"if": "!writer.ok", "goto": "draft", "max_visits": 3}],
                },
                {"id": "publish", "workers": [worker("publisher", final=True)]},
            ]
        }
    )
    q = quoted(p, {"m": free})
    assert q.usd == 0.0 and dict(q.usd_path) == {"draft": 3, "publish": 1}
