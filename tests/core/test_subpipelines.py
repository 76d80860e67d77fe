"""Sub-pipelines in the core: the loader pins children and refuses loops, the decision table
pauses a parent with its child, and `check` explores through children."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import RuleName
from interlock.core.explore import explore
from interlock.core.loader import build_workflow, load_workflow
from interlock.core.observe import Command, CommandKind, interpret_command
from interlock.core.quote import ModelTerms, TextSizes, quote
from interlock.core.state import RunStatus, listed_status
from interlock.core.subpipelines import MAX_DEPTH, child_run_id
from interlock.core.workflow import Pipeline
from interlock.errors import WorkflowError

from .runs import Run

CHILD = {"phases": [{"id": "c", "workers": [{"role": "cw", "model": "m", "final": True}]}]}


def parent(**over: Any) -> dict[str, Any]:
    """A parent whose one worker runs the pipeline `child`."""
    sub = {"role": "sub", "pipeline": "child", "final": True, **over}
    return {"phases": [{"id": "p", "workers": [sub]}]}


def problems(data: dict[str, Any]) -> list[str]:
    """The validation problems of a workflow given as data."""
    with pytest.raises(WorkflowError) as caught:
        build_workflow(data)
    return caught.value.problems


def test_the_child_definition_is_pinned_into_the_parent() -> None:
    """A parent's hash changes with its child, so a run keeps the child it started with."""
    first = build_workflow({"parent": parent(), "child": CHILD}).get("parent")
    worker = first.pipeline.worker("sub")
    assert worker.kind == "pipeline" and worker.pipeline_definition is not None
    assert worker.pipeline_definition.worker("cw").model == "m"
    changed = {"phases": [{"id": "c", "workers": [{"role": "cw", "model": "n", "final": True}]}]}
    second = build_workflow({"parent": parent(), "child": changed}).get("parent")
    assert first.hash != second.hash


def test_a_child_in_another_file_is_read_relative_to_the_workflow(tmp_path: Path) -> None:
    """`file.yaml#name` names a pipeline of a file next to the workflow file."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "more.yaml").write_text(
        textwrap.dedent("""
            child:
              phases:
                - id: c
                  workers: [{role: cw, model: m, final: true}]
        """)
    )
    (tmp_path / "flow.yaml").write_text(
        "parent: {phases: [{id: p, workers: "
        "[{role: sub, pipeline: 'lib/more.yaml#child', final: true}]}]}\n"
    )
    definition = load_workflow(tmp_path / "flow.yaml").get("parent")
    assert definition.pipeline.worker("sub").child_name == "child"
    missing = tmp_path / "bad.yaml"
    missing.write_text(
        "parent: {phases: [{id: p, workers: [{role: sub, pipeline: 'no.yaml#x', final: true}]}]}"
    )
    with pytest.raises(WorkflowError, match=r"pipeline 'no.yaml#x': cannot read .*no.yaml"):
        load_workflow(missing)


def test_a_pipeline_that_calls_itself_is_an_error_naming_the_chain() -> None:
    """A loop through children cannot end: it is refused, with the chain of pipelines."""
    loop = {
        "a": {"phases": [{"id": "x", "workers": [{"role": "w", "pipeline": "b", "final": True}]}]},
        "b": {"phases": [{"id": "x", "workers": [{"role": "w", "pipeline": "a", "final": True}]}]},
    }
    found = problems(loop)
    assert any("calls itself without bound (a -> b -> a)" in p for p in found)
    selfish = {"a": {"phases": [{"id": "x", "workers": [{"role": "w", "pipeline": "a"}]}]}}
    assert "(a -> a)" in problems(selfish)[0]


def test_children_nested_too_deep_are_refused() -> None:
    """A chain of children longer than MAX_DEPTH is an error naming it."""
    data: dict[str, Any] = {}
    for level in range(MAX_DEPTH + 1):
        data[f"p{level}"] = parent(pipeline=f"p{level + 1}")
    data[f"p{MAX_DEPTH + 1}"] = CHILD
    assert any(f"nested more than {MAX_DEPTH} deep" in p for p in problems(data))


def test_bad_child_references_and_inputs_name_the_place_and_the_fix() -> None:
    """Unknown pipelines, inputs the child does not declare or lacks, and `inputs` on other
    workers are each refused with the fix."""
    assert (
        "has no pipeline named 'nope' (pipelines there: child, parent)"
        in problems({"parent": parent(pipeline="nope"), "child": CHILD})[0]
    )
    needs = {**CHILD, "inputs": {"lang": {"required": True}}}
    found = problems({"parent": parent(inputs={"color": "red"}), "child": needs})
    assert any("has no input 'color'; its inputs are lang" in p for p in found)
    assert any("needs input 'lang': add 'lang: ...'" in p for p in found)
    plain = {"phases": [{"id": "p", "workers": [{"role": "w", "model": "m", "inputs": {"a": 1}}]}]}
    assert any("'inputs' only applies to 'pipeline' workers" in p for p in problems({"p": plain}))


def test_the_child_run_id_is_derived_from_parent_task_and_attempt() -> None:
    """The same attempt always names the same child; a retry names a new one."""
    first = child_run_id("run-1", "sub@1", 1)
    assert first == child_run_id("run-1", "sub@1", 1)
    assert first != child_run_id("run-1", "sub@1", 2) and first.startswith("run-1-c")


def child_driver() -> Run:
    """A parent run whose pipeline task is in flight with its child running."""
    definition = build_workflow({"parent": parent(), "child": CHILD}).get("parent")
    run = Run(definition.pipeline)
    run.start()
    run.record(ev.TaskStarted(at=0.0, task_id="sub@1", attempt=1))
    run.record(ev.ChildUpdated(at=0.0, task_id="sub@1", attempt=1, child_run="k", status="running"))
    run.settle()
    return run


def test_a_paused_child_pauses_its_parent_and_its_going_on_resumes_it() -> None:
    """CHILD_PAUSED and CHILD_RESUMED follow the child; a person's approval of the parent
    is refused with the child to approve instead."""
    run = child_driver()
    run.record(ev.ChildUpdated(at=1.0, task_id="sub@1", attempt=1, child_run="k", status="paused"))
    assert [d.rule for d in run.settle()] == [RuleName.CHILD_PAUSED]
    assert run.state.status is RunStatus.PAUSED and run.state.pause_reason == "child"
    refused = interpret_command(run.state, Command(kind=CommandKind.APPROVE), 2.0)
    assert refused == "run run-1 is paused by its child run k: approve that run"
    run.record(ev.ChildUpdated(at=2.0, task_id="sub@1", attempt=1, child_run="k", status="running"))
    assert [d.rule for d in run.settle()] == [RuleName.CHILD_RESUMED]
    assert run.state.status is RunStatus.RUNNING
    run.record(ev.ChildUpdated(at=3.0, task_id="sub@1", attempt=1, child_run="k", status="waiting"))
    assert run.settle() == [] and listed_status(run.state) == "waiting"


def test_a_pipeline_task_never_times_out_and_completes_with_its_child() -> None:
    """A child may wait for days: the parent's task has no deadline of its own."""
    run = child_driver()
    run.now = 10 * 24 * 3600.0
    assert run.settle() == []
    run.complete("sub@1")
    assert run.state.status is RunStatus.DELIVERED


def test_check_reports_a_child_that_can_never_deliver() -> None:
    """The child's own problems are reported at the worker, and its task cannot complete."""
    stuck = {
        "phases": [
            {"id": "a", "workers": [{"role": "x", "model": "m"}], "next": [{"goto": "a"}]},
            {"id": "b", "workers": [{"role": "y", "model": "m", "final": True}]},
        ]
    }
    # Built without the loader's checks, which would refuse the child's endless loop.
    sub = {"role": "sub", "pipeline": "child", "pipeline_definition": stuck, "final": True}
    report = explore(Pipeline.model_validate({"phases": [{"id": "p", "workers": [sub]}]}))
    assert not report.delivered
    assert any(
        "worker 'sub': its child pipeline 'child' can never deliver" in p for p in report.problems
    )
    unreached = "child pipeline 'child': phase 'b': no path reaches it"
    assert any(unreached in p for p in report.problems)


def test_check_explores_a_child_that_pauses() -> None:
    """A child with pause_after is explored pausing its parent and going on again."""
    paused = {**CHILD, "phases": [{**CHILD["phases"][0], "pause_after": True}]}
    definition = build_workflow({"parent": parent(), "child": paused}).get("parent")
    report = explore(definition)
    assert report.sound and report.delivered and report.paused
    assert report.children["sub"].paused


def test_the_quote_counts_the_childs_worst_case_once_per_attempt() -> None:
    """A worker with one retry can start two children, each at the child's worst case."""
    definition = build_workflow({"parent": parent(retries=1), "child": CHILD}).get("parent")
    terms = {("cw", "m"): ModelTerms(input_usd_per_mtok=1.0, output_usd_per_mtok=2.0,
                                     max_output_tokens=1000)}  # fmt: skip
    child_pipeline = definition.pipeline.worker("sub").pipeline_definition
    assert child_pipeline is not None
    report = explore(definition)
    child_quote = quote(
        "child", child_pipeline, terms=terms, sizes=TextSizes(topic=100),
        visit_counts=report.children["sub"].visit_counts,
    )  # fmt: skip
    whole = quote(
        "parent", definition.pipeline, terms={}, sizes=TextSizes(topic=100),
        visit_counts=report.visit_counts, children={"sub": child_quote},
    )  # fmt: skip
    assert child_quote.usd is not None and child_quote.tokens == 1400
    assert whole.usd == pytest.approx(2 * child_quote.usd)
    assert whole.tokens == 2 * 1400 and whole.tasks[0].calls == 2
