"""Fan-outs that tolerate failed items (`for_each: {tolerate: N | "P%"}`), driven step by step
through `RunMachine`: within the tolerance the run goes on without the failed items' outputs,
one past it the run fails naming how many items failed and which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName, expression_context
from interlock.core.explore import explore
from interlock.core.loader import load_workflow
from interlock.core.review import RejectRequest, interpret_reject
from interlock.core.state import RunStatus, TaskStatus
from interlock.core.tolerance import allowed_failures
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import Run, pipeline_of, worker


def fan_out(
    tolerate: Any, *, retries: int = 0, for_each: dict[str, Any] | None = None, **phase: Any
) -> Pipeline:
    """plan -> a fan-out of one worker per item (with `tolerate`) -> a final editor."""
    return pipeline_of(
        {
            "phases": [
                {
                    "id": "plan",
                    "workers": [
                        worker("planner", extract={"parts": {"json": "parts", "type": "list"}})
                    ],
                },
                {
                    "id": "write",
                    "for_each": {
                        "items": "planner.parts",
                        "tolerate": tolerate,
                        **(for_each or {}),
                    },
                    "workers": [worker("writer", retries=retries)],
                    **phase,
                },
                {
                    "id": "edit",
                    "workers": [worker("editor", reads=["writer.md"], final=True)],
                },
            ]
        }
    )


def started(pipeline: Pipeline, items: int) -> Run:
    """A run whose plan listed `items` parts: every writer is dispatched."""
    run = Run(pipeline)
    run.start()
    run.complete("planner@1", {"parts": [f"part {n}" for n in range(items)]})
    return run


def test_within_tolerance_the_run_goes_on_without_the_failed_items() -> None:
    """Two of five items fail for good under `tolerate: 2`: each is recorded as a failed
    item, the phase completes, and the next phase reads only the completed items' outputs."""
    run = started(fan_out(2), 5)
    run.fail("writer@1.1", retryable=False)
    run.fail("writer@1.3", error="bad gateway", retryable=False)
    for n in (0, 2, 4):
        run.complete(f"writer@1.{n}")
    failed = run.events_of(ev.ItemFailed)
    assert [(e.item, e.failed) for e in failed] == [(1, 1), (3, 2)]
    assert RuleName.TOLERATE in run.rules() and RuleName.GIVE_UP not in run.rules()
    assert run.state.status is RunStatus.RUNNING
    assert run.in_flight() == ["editor@1"]
    # The editor reads the completed writers' files only.
    assert sorted(i for i in run.state.outputs["writer"][1] if i is not None) == [0, 2, 4]
    assert run.state.tasks["writer@1.3"].status is TaskStatus.ITEM_FAILED
    items = expression_context(run.state, run.pipeline)["failed_items"]["write"]
    assert [(i["index"], i["item"], i["error"]) for i in items] == [
        (1, "part 1", "boom"),
        (3, "part 3", "bad gateway"),
    ]
    run.complete("editor@1")
    assert run.state.status is RunStatus.DELIVERED


def test_one_past_the_tolerance_fails_the_run_naming_count_and_items() -> None:
    """A third item failing under `tolerate: 2` fails the run; the reason says 3 of 5 items
    failed and names items 0, 2 and 4."""
    run = started(fan_out(2), 5)
    for n in (0, 2):
        run.fail(f"writer@1.{n}", retryable=False)
    run.complete("writer@1.1")
    run.begin("writer@1.3")
    run.fail("writer@1.4", retryable=False)
    assert run.state.status is RunStatus.RUNNING  # it fails once writer@1.3 has ended
    run.complete("writer@1.3")
    assert run.state.status is RunStatus.FAILED
    reason = run.state.failure or ""
    assert "3 of 5 items failed" in reason, reason
    assert "tolerate 2" in reason and "failed items: 0, 2, 4" in reason, reason
    assert "writer@1.4" in reason
    assert len(run.events_of(ev.ItemFailed)) == 2


@pytest.mark.parametrize(
    ("tolerate", "items", "allowed"),
    [
        ("10%", 30, 3),
        ("10%", 29, 2),
        ("2%", 120, 2),
        ("2%", 49, 0),
        ("12.5%", 8, 1),
        ("100%", 7, 7),
        ("0%", 9, 0),
    ],
)
def test_a_percentage_allows_the_whole_items_not_past_it(
    tolerate: str, items: int, allowed: int
) -> None:
    """A percentage rounds down, exactly: 10% of 30 allows 3, of 29 allows 2."""
    assert allowed_failures(tolerate, items) == allowed


def test_percent_tolerance_in_a_run_rounds_down() -> None:
    """`tolerate: "25%"` of 7 items allows 1 (1.75 rounded down): the second failure fails
    the run, saying 2 of 7."""
    run = started(fan_out("25%"), 7)
    run.fail("writer@1.0", retryable=False)
    assert run.state.status is RunStatus.RUNNING
    run.fail("writer@1.1", retryable=False)
    assert run.state.status is RunStatus.FAILED  # nothing else had started
    assert "2 of 7 items failed, past tolerate 25% (1 of 7 items)" in (run.state.failure or "")


def test_an_item_fails_only_once_its_retries_are_spent() -> None:
    """With `retries: 2`, a failing item is retried twice before it counts against the
    tolerance; one that succeeds on a retry is no failed item."""
    run = started(fan_out(1, retries=2), 3)
    run.fail("writer@1.0")
    assert not run.events_of(ev.ItemFailed)
    run.advance_to_wake()
    run.fail("writer@1.0")
    run.advance_to_wake()
    assert run.attempt("writer@1.0") == 3 and not run.events_of(ev.ItemFailed)
    run.fail("writer@1.0")
    assert [e.task_id for e in run.events_of(ev.ItemFailed)] == ["writer@1.0"]
    run.fail("writer@1.1")
    run.advance_to_wake()
    run.complete("writer@1.1")
    run.complete("writer@1.2")
    assert run.in_flight() == ["editor@1"]
    assert len(run.events_of(ev.ItemFailed)) == 1


def test_a_timeout_past_the_retries_is_a_failed_item() -> None:
    """An item whose last attempt runs past its deadline is a failed item too."""
    run = started(fan_out(1), 2)
    run.begin("writer@1.0")
    run.complete("writer@1.1")
    run.advance(10_000)
    assert [e.task_id for e in run.events_of(ev.ItemFailed)] == ["writer@1.0"]
    assert run.in_flight() == ["editor@1"]


def test_a_rejected_visit_counts_its_own_failed_items() -> None:
    """After a review sends the run back to the fan-out, the new visit starts with no failed
    items: a failure of the first visit does not count against the second."""
    run = started(fan_out(1, pause_after=True), 3)
    run.fail("writer@1.0", retryable=False)
    run.complete("writer@1.1")
    run.complete("writer@1.2")
    assert run.state.status is RunStatus.PAUSED
    made = interpret_reject(
        run.pipeline,
        run.state,
        RejectRequest(to="write", feedback="again").to_message(),
        "tester",
        run.now,
    )
    assert isinstance(made, ev.Rejected), made
    run.record(made)
    run.settle()
    assert run.state.current is not None and run.state.current.visit == 2
    assert expression_context(run.state, run.pipeline)["failed_items"]["write"] == []
    run.fail("writer@2.2", retryable=False)
    run.complete("writer@2.0")
    run.complete("writer@2.1")
    assert run.state.status is RunStatus.PAUSED  # 1 failed item in visit 2: within tolerate 1
    items = expression_context(run.state, run.pipeline)["failed_items"]["write"]
    assert [i["task"] for i in items] == ["writer@2.2"]


@pytest.mark.parametrize("tolerate", [1, 3, "34%", "10%"])
def test_check_explores_both_sides_of_the_tolerance(tolerate: Any) -> None:
    """`check` reaches a path on which an item fails and the run goes on to deliver, and one
    on which one item more fails the run (the placeholder list is long enough for both)."""
    report = explore(fan_out(tolerate, retries=1))
    assert report.sound, report.problems
    assert report.delivered
    assert report.tolerance == {"write": (True, True)}


def test_check_of_a_tolerance_of_every_item_only_holds_it() -> None:
    """`tolerate: "100%"` lets every item fail: no path fails past it."""
    report = explore(fan_out("100%"))
    assert report.sound, report.problems
    assert report.tolerance == {"write": (True, False)}


def test_failed_items_free_their_place_under_the_concurrency_cap() -> None:
    """With `concurrency: 2`, two failed items leave room for the next two: the phase does
    not wait for them forever."""
    run = started(fan_out(2, for_each={"concurrency": 2}), 4)
    assert run.in_flight() == ["writer@1.0", "writer@1.1"]
    run.fail("writer@1.0", retryable=False)
    run.fail("writer@1.1", retryable=False)
    assert run.in_flight() == ["writer@1.2", "writer@1.3"]
    run.complete("writer@1.2")
    run.complete("writer@1.3")
    assert run.in_flight() == ["editor@1"]


def test_a_sequential_lane_stops_at_its_failed_worker() -> None:
    """In a sequential fan-out, the item whose first worker failed for good starts no later
    worker of its lane; the other lanes run to the end and the phase completes."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "plan",
                    "workers": [
                        worker("planner", extract={"parts": {"json": "parts", "type": "list"}})
                    ],
                },
                {
                    "id": "write",
                    "mode": "sequential",
                    "for_each": {"items": "planner.parts", "tolerate": "50%"},
                    "workers": [worker("writer"), worker("checker", reads=["writer.md"])],
                },
                {"id": "edit", "workers": [worker("editor", reads=["checker.md"], final=True)]},
            ]
        }
    )
    run = started(pipeline, 2)
    run.fail("writer@1.0", retryable=False)
    run.complete("writer@1.1")
    assert run.in_flight() == ["checker@1.1"]
    run.complete("checker@1.1")
    assert "checker@1.0" not in run.state.tasks
    assert run.in_flight() == ["editor@1"]


FILE = """\
p:
  phases:
    - id: plan
      workers:
        - role: planner
          model: m
          extract: {parts: {json: parts, type: list}}
    - id: write
      for_each: {items: planner.parts, tolerate: TOLERATE}
      workers:
        - {role: writer, model: m}
    - id: edit
      workers:
        - {role: editor, model: m, final: true}
"""


@pytest.mark.parametrize(
    ("tolerate", "says"),
    [
        ("-1", "tolerate -1 is negative"),
        ('"150%"', "tolerate '150%' is more than 100% of the items"),
        ('"abc"', "tolerate 'abc' is neither a count nor a percentage"),
        ("true", "tolerate True is not a number of items"),
    ],
)
def test_a_bad_tolerance_names_the_file_the_line_and_the_fix(
    tmp_path: Path, tolerate: str, says: str
) -> None:
    """`tolerate: -1`, `"150%"`, `"abc"` or `true` are refused naming the file, the line,
    the phase and what to write instead."""
    path = tmp_path / "flow.yaml"
    path.write_text(FILE.replace("TOLERATE", tolerate), encoding="utf-8")
    with pytest.raises(WorkflowError) as caught:
        load_workflow(path)
    message = str(caught.value)
    assert str(path) in message and "line 9" in message, message
    assert "phase 'write', key 'for_each', key 'tolerate'" in message, message
    assert says in message, message
    assert 'tolerate: "2%"' in message or "from 0% to 100%" in message, message


@pytest.mark.parametrize(
    ("where", "line"),
    [("      tolerate: 1\n      workers:\n        - {role: editor", 14), ("", 0)],
)
def test_tolerate_outside_a_fan_out_says_where_it_belongs(
    tmp_path: Path, where: str, line: int
) -> None:
    """A `tolerate` on a phase without `for_each` (or on a worker) is refused saying that
    it belongs under the fan-out's for_each."""
    text = FILE.replace("TOLERATE", "1")
    if where:
        text = text.replace("      workers:\n        - {role: editor", where)
    else:
        text = text.replace(
            "{role: editor, model: m, final: true}",
            "{role: editor, model: m, final: true, tolerate: 1}",
        )
    path = tmp_path / "flow.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(WorkflowError) as caught:
        load_workflow(path)
    message = str(caught.value)
    assert str(path) in message and "phase 'edit'" in message, message
    assert "'tolerate' belongs to a fan-out: write it under the phase's for_each" in message


def test_a_condition_reads_the_failed_items() -> None:
    """`failed_items.write` lists the failed items for the fan-out's `next` rules: a rule
    on `size(failed_items.write) > 0` sends the run to a patch phase."""
    pipeline = pipeline_of(
        {
            "phases": [
                {
                    "id": "plan",
                    "workers": [
                        worker("planner", extract={"parts": {"json": "parts", "type": "list"}})
                    ],
                },
                {
                    "id": "write",
                    "for_each": {"items": "planner.parts", "tolerate": 1},
                    "workers": [worker("writer")],
                    "next": [
                        {"if": "size(failed_items.write) > 0", "goto": "patch", "max_visits": 1},
                        {"goto": "edit"},
                    ],
                },
                {"id": "patch", "workers": [worker("patcher")]},
                {"id": "edit", "workers": [worker("editor", final=True)]},
            ]
        }
    )
    run = started(pipeline, 2)
    run.fail("writer@1.1", retryable=False)
    run.complete("writer@1.0")
    assert run.in_flight() == ["patcher@1"]
