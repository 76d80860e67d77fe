"""Every validation problem is reported in the file's own words: pipeline, phase, worker, key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from interlock.core.loader import build_workflow
from interlock.errors import WorkflowError

from .runs import worker


def problems_of(data: dict[str, Any]) -> list[str]:
    """The problems a workflow's data is rejected with (fails the test if it is accepted)."""
    with pytest.raises(WorkflowError) as info:
        build_workflow(data)
    assert info.value.problems, "a rejected workflow lists at least one problem"
    return info.value.problems


def one_problem(data: dict[str, Any]) -> str:
    """The single problem a workflow's data is rejected with."""
    problems = problems_of(data)
    assert len(problems) == 1, problems
    return problems[0]


def translate() -> dict[str, Any]:
    """A sound polish-loop pipeline to break in one place per test."""
    return {
        "t": {
            "phases": [
                {"id": "translate", "workers": [worker("translator")]},
                {
                    "id": "review",
                    "workers": [
                        worker(
                            "reviewer",
                            reads=["translator.md", "polisher.md?"],
                            extract={"score": {"regex": r"score: (\d+)", "type": "number"}},
                        )
                    ],
                    "next": [
                        {"if": "reviewer.score < 8.0", "goto": "polish", "max_visits": 2},
                        {"goto": "publish"},
                    ],
                },
                {
                    "id": "polish",
                    "workers": [worker("polisher", reads=["translator.md", "reviewer.md"])],
                    "next": [{"goto": "review"}],
                },
                {"id": "publish", "workers": [worker("publisher", final=True)]},
            ]
        }
    }


def test_the_base_pipeline_is_sound() -> None:
    """The pipeline the other tests break is itself accepted."""
    assert list(build_workflow(translate()).definitions) == ["t"]


def test_unknown_key_is_a_typo() -> None:
    """A misspelt worker key is named with its place, never silently ignored."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["timout"] = 30
    assert one_problem(data) == (
        "pipeline 't', phase 'translate', worker 'translator', key 'timout': "
        "unknown key (a typo?); remove it or check the spelling (did you mean 'timeout'?)"
    )


def test_unknown_key_on_a_phase_and_a_rule() -> None:
    """Typos in a phase and in a next rule are both reported, each at its place."""
    data = translate()
    data["t"]["phases"][1]["pause_afer"] = True
    data["t"]["phases"][1]["next"][0]["max_visit"] = 3
    problems = problems_of(data)
    assert (
        "pipeline 't', phase 'review', key 'pause_afer': unknown key" in problems[0] + problems[1]
    )
    assert any(
        p.startswith("pipeline 't', phase 'review', next rule 1, key 'max_visit': unknown key")
        for p in problems
    )


def test_duplicate_role() -> None:
    """A role used twice names both phases and says roles must be unique."""
    data = translate()
    data["t"]["phases"][2]["workers"][0]["role"] = "translator"
    data["t"]["phases"][2]["workers"][0]["output"] = "polished.md"
    assert problems_of(data)[0] == (
        "pipeline 't', phase 'polish', worker 'translator': role 'translator' is already used "
        "in phase 'translate'; roles must be unique in a pipeline"
    )


def test_a_file_read_twice() -> None:
    """`reads: [x.md, "x.md?"]` says both spellings and the fix: a read is required or
    optional, not both."""
    data = translate()
    data["t"]["phases"][2]["workers"][0]["reads"] = ["translator.md", "translator.md?"]
    assert one_problem(data) == (
        "pipeline 't', phase 'polish', worker 'polisher': reads 'translator.md' twice "
        "('translator.md' and 'translator.md?'); list it once, as 'translator.md' or, if the "
        "task can do without it, 'translator.md?'"
    )


def test_a_condition_reading_a_value_its_role_does_not_extract() -> None:
    """`reviewer.scor` is refused with the names the reviewer extracts; the run would fail
    at the review, after the paid work, with "reviewer has no 'scor'"."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["if"] = "reviewer.scor < 8.0"
    assert one_problem(data) == (
        "pipeline 't', phase 'review', next rule 1: expression 'reviewer.scor < 8.0' reads "
        "reviewer.scor, which worker 'reviewer' does not extract (did you mean 'score'?); it "
        "extracts score (add it under the worker's 'extract')"
    )
    data["t"]["phases"][1]["next"][0]["if"] = 'roles["translator"].score < 8.0'
    assert "which worker 'translator' does not extract; it extracts nothing" in one_problem(data)


def test_duplicate_output_file() -> None:
    """Two workers writing the same file are told to rename one output."""
    data = translate()
    data["t"]["phases"][2]["workers"][0]["output"] = "translator.md"
    problem = problems_of(data)[0]
    assert "worker 'polisher': output 'translator.md' is also written by 'translator'" in problem


def test_duplicate_phase_id() -> None:
    """A phase id used twice is reported."""
    data = translate()
    data["t"]["phases"][2]["id"] = "review"
    data["t"]["phases"][2]["next"] = []
    data["t"]["phases"][1]["next"] = []
    assert "phase id 'review' is used twice" in one_problem(data)


def test_read_of_a_file_nobody_writes() -> None:
    """Reading a file no worker writes suggests the closest output and lists them all."""
    data = translate()
    data["t"]["phases"][2]["workers"][0]["reads"] = ["translater.md"]
    assert one_problem(data) == (
        "pipeline 't', phase 'polish', worker 'polisher': reads 'translater.md', which no worker "
        "writes (did you mean 'translator.md'?); outputs are polisher.md, publisher.md, "
        "reviewer.md, translator.md"
    )


def test_read_of_a_file_written_only_later() -> None:
    """A required read of a file written by a later phase suggests the optional 'name?' form."""
    data = translate()
    data["t"]["phases"][1]["workers"][0]["reads"] = ["translator.md", "polisher.md"]
    assert one_problem(data) == (
        "pipeline 't', phase 'review', worker 'reviewer': reads 'polisher.md', which is written "
        "by phase 'polish', not by an earlier phase; if it is only there after a loop, mark it "
        "optional as 'polisher.md?'"
    )


def branches(final_reads: list[str]) -> dict[str, Any]:
    """Plan, then one of two branches (`big` skips `small`), then a final phase."""
    return {
        "b": {
            "inputs": {"n": 1},
            "phases": [
                {
                    "id": "plan",
                    "workers": [worker("planner")],
                    "next": [{"if": "inputs.n > 3", "goto": "big"}, {"goto": "small"}],
                },
                {"id": "small", "workers": [worker("s")], "next": [{"goto": "final"}]},
                {"id": "big", "workers": [worker("b")]},
                {"id": "final", "workers": [worker("editor", reads=final_reads, final=True)]},
            ],
        }
    }


def test_read_of_a_file_only_one_branch_writes() -> None:
    """A required read of a file written on one branch only is refused before any run, with
    the way that skips its writer and the two fixes."""
    assert problems_of(branches(["planner.md", "s.md", "b.md"])) == [
        "pipeline 'b', phase 'final', worker 'editor': reads 's.md', which only phase 'small' "
        "writes, but the run can reach phase 'final' without it (plan -> big -> final); mark it "
        "optional as 's.md?' if the task can do without it, or read a file that every branch "
        "writes",
        "pipeline 'b', phase 'final', worker 'editor': reads 'b.md', which only phase 'big' "
        "writes, but the run can reach phase 'final' without it (plan -> small -> final); mark "
        "it optional as 'b.md?' if the task can do without it, or read a file that every branch "
        "writes",
    ]


def test_branch_reads_marked_optional_and_reads_before_the_branch_are_accepted() -> None:
    """`name?` excuses a branch, and a file written before the branch is there on every way."""
    assert build_workflow(branches(["planner.md", "s.md?", "b.md?"]))


def test_read_after_a_loop_back_is_not_certain_either() -> None:
    """A phase reached both straight on and from a later loop cannot count on the loop's file."""
    data = translate()
    data["t"]["phases"][3]["workers"][0]["reads"] = ["polisher.md"]
    assert (
        "which only phase 'polish' writes, but the run can reach phase 'publish' without it "
        in (one_problem(data))
    )
    assert "(translate -> review -> publish)" in one_problem(data)


def test_read_of_a_phase_a_timed_out_wait_passes_over() -> None:
    """A phase that waits for a signal with a timeout does not run when the wait times out:
    a required read of its output is refused; without a timeout, or `?`, it is accepted."""
    data = translate()
    publish = data["t"]["phases"][3]
    publish["workers"][0]["final"] = False
    data["t"]["phases"].append(
        {"id": "after", "workers": [worker("closer", reads=["publisher.md"], final=True)]}
    )
    publish["wait_for"] = {"signal": "go", "timeout": "1h"}
    assert one_problem(data) == (
        "pipeline 't', phase 'after', worker 'closer': reads 'publisher.md', which phase "
        "'publish' writes only if signal 'go' arrives before its wait times out; mark it "
        "optional as 'publisher.md?' if the task can do without it"
    )
    data["t"]["phases"][4]["workers"][0]["reads"] = ["publisher.md?"]
    assert build_workflow(data)
    data["t"]["phases"][4]["workers"][0]["reads"] = ["publisher.md"]
    del publish["wait_for"]["timeout"]
    assert build_workflow(data)


def test_optional_read_of_an_unknown_file_is_still_an_error() -> None:
    """The '?' form only excuses order: the file must still be written by some worker."""
    data = translate()
    data["t"]["phases"][1]["workers"][0]["reads"] = ["polsher.md?"]
    assert "reads 'polsher.md', which no worker writes (did you mean 'polisher.md'?)" in (
        one_problem(data)
    )


def test_read_within_a_phase_depends_on_mode() -> None:
    """A sequential phase may read an earlier worker of the same phase; a parallel one may not."""
    phases = [
        {
            "id": "a",
            "mode": "sequential",
            "workers": [worker("w1"), worker("w2", reads=["w1.md"], final=True)],
        }
    ]
    assert build_workflow({"p": {"phases": phases}})
    phases[0]["mode"] = "parallel"
    assert "reads 'w1.md', which is written by phase 'a', not by an earlier phase" in one_problem(
        {"p": {"phases": phases}}
    )


def test_no_final_worker() -> None:
    """A pipeline with no final worker is told which worker to mark."""
    data = translate()
    del data["t"]["phases"][3]["workers"][0]["final"]
    assert one_problem(data) == (
        "pipeline 't': no worker has 'final: true'; mark the last worker of the last phase "
        "('publisher' in 'publish') as final"
    )


def test_final_worker_not_last() -> None:
    """A final worker outside the last phase is named and told where the final worker goes."""
    data = translate()
    del data["t"]["phases"][3]["workers"][0]["final"]
    data["t"]["phases"][0]["workers"][0]["final"] = True
    assert one_problem(data) == (
        "pipeline 't', phase 'translate', worker 'translator': the final worker must be the "
        "last worker of the last phase ('publish')"
    )


def test_several_final_workers() -> None:
    """Two final workers are both named."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["final"] = True
    problems = problems_of(data)
    assert (
        "pipeline 't': several workers are final ('translator', 'publisher'); exactly one may be"
        in problems
    )


def test_final_phase_cannot_branch() -> None:
    """The final phase may not have next rules: its output is the result."""
    data = translate()
    data["t"]["phases"][3]["next"] = [{"goto": "review", "max_visits": 1}]
    assert (
        one_problem(data)
        == "pipeline 't', phase 'publish': the final phase cannot have 'next' rules"
    )


def test_goto_names_no_phase() -> None:
    """A goto to a missing phase suggests the closest id and lists every phase."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["goto"] = "polsh"
    assert one_problem(data) == (
        "pipeline 't', phase 'review', next rule 1: goto 'polsh' names no phase "
        "(did you mean 'polish'?); phases are translate, review, polish, publish"
    )


def test_loop_without_bound_names_the_cycle() -> None:
    """A cycle with no max_visits on any rule is rejected and the cycle is spelled out."""
    data = translate()
    del data["t"]["phases"][1]["next"][0]["max_visits"]
    assert one_problem(data) == (
        "pipeline 't': loop review -> polish -> review has no bound; give one of its rules "
        "'max_visits: N'"
    )


def test_bound_on_either_edge_of_the_loop_is_enough() -> None:
    """Bounding the way back instead of the way in also ends the loop."""
    data = translate()
    del data["t"]["phases"][1]["next"][0]["max_visits"]
    data["t"]["phases"][2]["next"][0]["max_visits"] = 3
    assert build_workflow(data)


def test_self_loop_without_bound() -> None:
    """A phase that goes back to itself with no bound is a loop of one phase."""
    data = translate()
    data["t"]["phases"][0]["next"] = [{"if": "true", "goto": "translate"}]
    assert "loop translate -> translate has no bound" in one_problem(data)


@pytest.mark.parametrize("role", ["../x", "a/b", "", "..", "x..y", ".hidden", "a\\b", "a b"])
def test_unsafe_role_names(role: str) -> None:
    """Role names that could escape the run directory or hide are refused, at their place."""
    data = translate()
    data["t"]["phases"][2]["workers"][0]["role"] = role
    problems = problems_of(data)
    assert any(
        p.startswith("pipeline 't', phase 'polish', worker ")
        and f"key 'role': role {role!r} is not a safe name" in p
        for p in problems
    ), problems


@pytest.mark.parametrize("phase_id", ["../up", "a/b", ".."])
def test_unsafe_phase_ids(phase_id: str) -> None:
    """Phase ids become directory names too, so they follow the same rule as roles."""
    data = translate()
    data["t"]["phases"][0]["id"] = phase_id
    assert any(f"phase id {phase_id!r} is not a safe name" in p for p in problems_of(data))


def test_unsafe_output_name() -> None:
    """An output file name with a path separator is refused."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["output"] = "../../etc/passwd"
    assert "key 'output': output '../../etc/passwd' is not a safe name" in one_problem(data)


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        (-5, "must be greater than 0"),
        (0, "must be greater than 0"),
        (10**9, "must be less than or equal to 604800"),
    ],
)
def test_negative_or_absurd_timeouts(timeout: float, expected: str) -> None:
    """A timeout must be positive and at most a week; the message names worker and key."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["timeout"] = timeout
    assert one_problem(data) == (
        f"pipeline 't', phase 'translate', worker 'translator', key 'timeout': {expected}"
    )


def test_negative_grace_and_retries() -> None:
    """Grace and retries cannot be negative."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["grace"] = -1
    data["t"]["phases"][0]["workers"][0]["retries"] = -1
    problems = problems_of(data)
    assert any("key 'grace': must be greater than or equal to 0" in p for p in problems)
    assert any("key 'retries': must be greater than or equal to 0" in p for p in problems)


def test_model_and_command_both_given() -> None:
    """A worker runs one way only: model, command, call or pipeline."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["command"] = ["python", "x.py"]
    assert one_problem(data) == (
        "pipeline 't', phase 'translate', worker 'translator': worker 'translator' needs exactly "
        "one of 'model', 'command', 'call' or 'pipeline' (found: model, command)"
    )


def test_no_executor_given() -> None:
    """A worker with neither model, command nor call says none was found."""
    data = translate()
    del data["t"]["phases"][0]["workers"][0]["model"]
    assert "(found: none)" in one_problem(data)


def test_fallback_models_need_a_model() -> None:
    """Fallback models only make sense for a model worker."""
    data = translate()
    w = data["t"]["phases"][0]["workers"][0]
    del w["model"]
    w.update(command=["python", "x.py"], fallback_models=["other"])
    assert "'fallback_models' only applies to 'model' workers" in one_problem(data)


def test_bad_cel_syntax() -> None:
    """A condition that does not parse is reported with its rule and CEL's pointer."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["if"] = "reviewer.score <"
    problem = one_problem(data)
    assert problem.startswith(
        "pipeline 't', phase 'review', next rule 1: expression 'reviewer.score <' does not parse"
    )
    # One line saying where, not CEL's caret, which is misplaced inside the sentence.
    assert "\n" not in problem and problem.endswith("does not parse at character 16, at '<'")
    data["t"]["phases"][1]["next"][0]["if"] = "reviewer.score < < 8"
    assert one_problem(data).endswith("does not parse at character 18, at '< 8'")


def test_unknown_name_in_expression() -> None:
    """A condition reading an unknown name suggests the closest role."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["if"] = "reviewr.score < 8.0"
    assert one_problem(data) == (
        "pipeline 't', phase 'review', next rule 1: expression 'reviewr.score < 8.0' reads "
        "'reviewr', which is not a role, 'topic', 'inputs', 'visits' or 'roles' "
        "(did you mean 'reviewer'?)"
    )


def test_expression_may_read_roles_visits_inputs_and_topic() -> None:
    """The documented names are all readable in a condition, including non-identifier roles."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["if"] = (
        "reviewer.score < 8.0 && visits.review < 5 && size(topic) > 0 && "
        "roles['translator'].size() >= 0 && inputs.size() >= 0"
    )
    assert build_workflow(data)


def test_unknown_name_in_template() -> None:
    """A task template reading an undeclared name lists what is available."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["task"] = "Translate {{ topic }} into {{ language }}"
    assert one_problem(data) == (
        "pipeline 't', phase 'translate', worker 'translator': key 'task' uses {{ language }}, "
        "which is not defined; available: failed_items, feedback, inputs, run_id, signals, "
        "topic, visit (declare it under 'inputs')"
    )
    data["t"]["inputs"] = {"language": "French"}
    assert build_workflow(data)
    data["t"]["phases"][0]["workers"][0]["task"] = "Translate {{ topc }}"
    assert "uses {{ topc }}, which is not defined (did you mean 'topic'?)" in one_problem(data)


def test_template_syntax_error() -> None:
    """A task template that does not parse names the worker and the key."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["task"] = "Translate {{ topic"
    problem = one_problem(data)
    assert problem.startswith(
        "pipeline 't', phase 'translate', worker 'translator': key 'task': template does not parse"
    )


def test_template_in_command_arguments() -> None:
    """Command arguments are templates too, checked like tasks."""
    data = translate()
    w = data["t"]["phases"][0]["workers"][0]
    del w["model"]
    w["command"] = ["python", "fetch.py", "{{ url }}"]
    assert "key 'command' uses {{ url }}, which is not defined" in one_problem(data)


def test_item_outside_for_each() -> None:
    """`{{ item }}` is only defined in a for_each phase."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["task"] = "Translate {{ item }}"
    assert one_problem(data) == (
        "pipeline 't', phase 'translate', worker 'translator': key 'task' uses {{ item }} "
        "outside a for_each phase: it is set only in a phase that fans out (give phase "
        "'translate' a 'for_each', or take it out)"
    )


def fan_out(extract_type: str, items: str = "planner.topics") -> dict[str, Any]:
    """A plan -> write (for_each) -> merge pipeline whose planner extracts `topics`."""
    return {
        "f": {
            "phases": [
                {
                    "id": "plan",
                    "workers": [
                        worker("planner", extract={"topics": {"json": "t", "type": extract_type}})
                    ],
                },
                {
                    "id": "write",
                    "for_each": items,
                    "workers": [worker("writer", task="Write about {{ item }}")],
                },
                {"id": "merge", "workers": [worker("editor", final=True)]},
            ]
        }
    }


def test_for_each_over_a_list_is_sound() -> None:
    """A for_each over a list extracted by an earlier worker is accepted."""
    assert build_workflow(fan_out("list"))


def test_for_each_over_a_non_list_value() -> None:
    """A for_each over a value extracted as a string says the type must be 'list'."""
    assert one_problem(fan_out("string")) == (
        "pipeline 'f', phase 'write', for_each: items 'planner.topics': worker 'planner' must "
        "extract 'topics' with type 'list'"
    )


def test_for_each_over_an_unknown_value() -> None:
    """A for_each over a value the worker does not extract is reported the same way."""
    assert "worker 'planner' must extract 'subjects'" in one_problem(
        fan_out("list", "planner.subjects")
    )


def test_for_each_over_a_later_worker() -> None:
    """A for_each may only use a list from an earlier phase."""
    assert one_problem(fan_out("list", "editor.topics")) == (
        "pipeline 'f', phase 'write', for_each: items 'editor.topics': no earlier worker 'editor'"
    )


def test_for_each_reference_shape() -> None:
    """for_each items must look like '<role>.<value>'."""
    problem = one_problem(fan_out("list", "topics"))
    assert "phase 'write', key 'for_each'" in problem
    assert "must be '<role>.<extracted value>'" in problem


def test_final_phase_cannot_fan_out() -> None:
    """The final phase has one result, so it cannot use for_each."""
    data = fan_out("list")
    phases = data["f"]["phases"]
    phases[2]["for_each"] = "planner.topics"
    assert "pipeline 'f', phase 'merge': the final phase cannot use 'for_each'" in problems_of(data)


def test_extract_needs_exactly_one_source() -> None:
    """An extraction gives either a JSON path or a regex, not both and not neither."""
    data = translate()
    spec = data["t"]["phases"][1]["workers"][0]["extract"]["score"]
    spec["json"] = "score"
    assert "give exactly one of 'json' (a field path) or 'regex'" in one_problem(data)


def test_extract_regex_must_compile() -> None:
    """A regex that does not compile is reported with the engine's reason."""
    data = translate()
    data["t"]["phases"][1]["workers"][0]["extract"]["score"]["regex"] = "score: ("
    assert "regex 'score: (' does not compile" in one_problem(data)


def test_every_problem_is_reported_at_once() -> None:
    """Several independent problems in one file are all listed, not just the first."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["goto"] = "polsh"
    data["t"]["phases"][2]["workers"][0]["reads"] = ["nothing.md"]
    data["t"]["phases"][0]["workers"][0]["task"] = "{{ nope }}"
    problems = problems_of(data)
    assert len(problems) == 3
    other = copy.deepcopy(translate())
    other["t"]["phases"][0]["workers"][0]["timout"] = 1
    other["t"]["phases"][1]["workers"][0]["model"] = None
    assert len(problems_of(other)) == 2


def test_error_message_names_the_file() -> None:
    """The error's text starts with the file it came from and counts the problems."""
    data = translate()
    data["t"]["phases"][1]["next"][0]["goto"] = "polsh"
    with pytest.raises(WorkflowError) as info:
        build_workflow(data, "flows/translate.yaml")
    assert str(info.value).startswith("flows/translate.yaml: invalid workflow (1 problem(s))")


def two_phases(first: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    """A pipeline whose first phase holds `first` (and `more`) before a final phase."""
    return {
        "p": {
            "phases": [
                {"id": "a", "workers": [first, *more]},
                {"id": "z", "workers": [worker("last", final=True)]},
            ]
        }
    }


@pytest.mark.parametrize("name", ["final.md", "status.json", "logs", "prompts", "Final.md"])
def test_outputs_the_run_directory_reserves_are_refused(name: str) -> None:
    """An output named like the run's own files would lose or jam the run: refused."""
    problem = one_problem(two_phases(worker("w", output=name)))
    assert problem.startswith(f"pipeline 'p', phase 'a', worker 'w': output {name!r} is ")
    assert "choose another 'output'" in problem


@pytest.mark.parametrize(
    ("other", "version"),
    [("x.v2.md", "visit 2"), ("x.0.md", "item 0"), ("x.3.v2.md", "visit 2 item 3")],
)
def test_outputs_that_are_another_outputs_versions_are_refused(other: str, version: str) -> None:
    """`x.v2.md` is where the second visit of `x.md` is kept, so no worker may write it."""
    problem = one_problem(two_phases(worker("w", output="x.md"), worker("v", output=other)))
    assert problem == (
        f"pipeline 'p', phase 'a', worker 'v': output {other!r} is the name of {version} of "
        "'w''s output ('x.md'); choose another 'output'"
    )


def test_version_clash_without_an_extension() -> None:
    """Outputs without an extension have versions too: `notes.v2` belongs to `notes`."""
    problem = one_problem(two_phases(worker("w", output="notes"), worker("v", output="notes.v2")))
    assert "is the name of visit 2 of 'w''s output ('notes')" in problem


def test_outputs_that_only_look_like_versions_are_fine() -> None:
    """`report.v1.md` is never written by a visit (visit 1 has no suffix): accepted."""
    build_workflow(two_phases(worker("w", output="report.md"), worker("v", output="report.v1.md")))


@pytest.mark.parametrize(
    "role", ["topic", "inputs", "visits", "roles", "feedback", "signals", "budget"]
)
def test_roles_named_like_condition_names_are_refused(role: str) -> None:
    """A role named `topic` could never be read by a condition: `topic` is the run's topic."""
    problem = one_problem(two_phases(worker(role)))
    assert problem.startswith(f"pipeline 'p', phase 'a', worker {role!r}: role {role!r} is a name")


def test_unknown_command_placeholder_suggests_the_right_one() -> None:
    """`{outptu}` in a command is refused with 'did you mean {output}'."""
    problem = one_problem(two_phases({"role": "w", "command": ["tool", "--out={outptu}"]}))
    assert problem.startswith(
        "pipeline 'p', phase 'a', worker 'w': key 'command', argument 2 ('--out={outptu}'): "
        "unknown placeholder '{outptu}' (did you mean '{output}'?)"
    )


def test_read_placeholder_must_name_a_read_file() -> None:
    """`{input:NAME}` / `{read:NAME}` is the path of a file the worker reads: NAME must be read."""
    first = {"role": "w", "command": ["tool", "{input:notes.md}", "{read:w0.md}"], "reads": []}
    problems = problems_of(two_phases(first))
    assert len(problems) == 2
    assert "'{input:notes.md}' is the path of a file the worker reads" in problems[0]
    assert "it reads nothing (add it to 'reads')" in problems[0]


def test_known_placeholders_and_other_braces_are_accepted() -> None:
    """Every documented placeholder passes, and braces that are no placeholder are left alone."""
    data = two_phases(worker("w"))
    data["p"]["phases"][1]["workers"] = [
        {
            "role": "last",
            "final": True,
            "reads": ["w.md"],
            "command": [
                "{python}", "{workflow_dir}/x.py", "{output}", "{task}", "{topic}", "{item}",
                "{run_dir}", "{inputs}", "{input:w.md}", "--in={read:w.md}", "awk", "{print $1}",
                "{{ '{literal}' }}", "{{ topic }}",
            ],
        }
    ]  # fmt: skip
    build_workflow(data)


def test_inputs_placeholder_inside_an_argument_is_refused() -> None:
    """`{inputs}` expands to several arguments, so it cannot sit inside one."""
    problem = one_problem(two_phases({"role": "w", "command": ["tool", "--in={inputs}"]}))
    assert "'{inputs}' expands to several arguments" in problem


def test_thousands_of_phases_validate_without_exhausting_the_stack() -> None:
    """The loop check walks 3,000 chained phases without a RecursionError, and finds a loop."""
    phases: list[dict[str, Any]] = [
        {"id": f"p{n}", "workers": [worker(f"w{n}")]} for n in range(3000)
    ]
    phases[-1]["workers"][0]["final"] = True
    build_workflow({"long": {"phases": phases}})
    phases[2000]["next"] = [{"goto": "p10"}, {"goto": "p2001"}]
    problem = one_problem({"long": {"phases": phases}})
    assert problem.startswith("pipeline 'long': loop p10 -> p11 -> ")
    assert problem.endswith("p2000 -> p10 has no bound; give one of its rules 'max_visits: N'")


def test_input_placeholder_naming_a_pipeline_input_explains_the_difference() -> None:
    """`{input:language}` for a declared input says inputs are written `{{ language }}`."""
    data = two_phases({"role": "w", "command": ["tool", "{input:language}"]})
    data["p"]["inputs"] = {"language": "French"}
    problem = one_problem(data)
    assert problem.endswith(
        "it reads nothing (add it to 'reads'); the pipeline input 'language' is written "
        "{{ language }}"
    )


def test_a_number_where_a_mapping_goes_names_the_keys_not_a_class() -> None:
    """A worker's `concurrency: 2` (or `budget: 3`) is refused in the file's words, listing the
    mapping's keys and how a worker's key is written, never an internal class name."""
    data = translate()
    data["t"]["budget"] = 3
    data["t"]["phases"][0]["workers"][0]["concurrency"] = 2
    problems = problems_of(data)
    assert not any("instance of" in problem for problem in problems), problems
    budget = next(p for p in problems if "key 'budget'" in p)
    assert "expected a mapping, not a number (3); its keys are max_cost_usd" in budget
    slots = next(p for p in problems if "key 'concurrency'" in p)
    assert "worker 'translator'" in slots
    assert "a worker's concurrency is {key: EXPR, limit: N}" in slots


def test_a_command_written_as_one_line_says_how_to_write_it() -> None:
    """`command: "echo hi out.md"` is refused saying that a command is a list of arguments
    run without a shell, with both ways to write it, not pydantic's "a valid list"; a line
    with shell syntax (`>`, `|`, `&&`, `$`, ...) is offered the shell form only, since split
    into arguments its `>` would be a literal word."""
    data = translate()
    worker = data["t"]["phases"][0]["workers"][0]
    worker.pop("model", None)
    worker.pop("task", None)
    worker["command"] = "echo hi out.md"
    (problem,) = [p for p in problems_of(data) if "key 'command'" in p]
    assert "valid list" not in problem
    assert "a command is a list of arguments, not one line (no shell runs it)" in problem
    assert "[sh, -c, 'echo hi out.md']" in problem
    assert "split it, ['echo', 'hi', 'out.md'], or" in problem
    for line in ("echo {topic} > {output}", "a | b", "a && b", "a || b", "echo $HOME", "a; b",
                 "a < in", "echo `date`", "a & b"):  # fmt: skip
        worker["command"] = line
        (problem,) = [p for p in problems_of(data) if "key 'command'" in p]
        assert "split it" not in problem, line
        assert "no shell runs it): for a shell line write [sh, -c, '" in problem, line


def test_a_path_placeholder_of_an_optional_read_is_refused() -> None:
    """`{read:NAME}` of a read marked `NAME?` would be left as text when the file is absent;
    `{read:NAME?}` is told to drop the '?'. `{inputs}` lists only the files that are there."""
    data = translate()
    publisher = data["t"]["phases"][3]["workers"][0]
    del publisher["model"]
    publisher["reads"] = ["translator.md", "polisher.md?"]
    publisher["command"] = ["sh", "-c", "cat {read:polisher.md} > {output}"]
    assert one_problem(data).endswith(
        "'{read:polisher.md}' is the path of 'polisher.md', which the worker reads as optional "
        "('polisher.md?'): when it is absent there is no path to put there; use '{inputs}' (the "
        "files that are there), or read it without '?'"
    )
    publisher["command"] = ["cat", "{read:polisher.md?}"]
    assert "name the file without '?', as '{read:polisher.md}'" in one_problem(data)
    publisher["command"] = ["cat", "{inputs}"]
    assert build_workflow(data)


def test_a_template_reading_an_undeclared_input_by_name_is_refused() -> None:
    """`{{ inputs.langauge }}` and `{{ inputs["langauge"] }}` would fail when the task renders,
    after the phases before it: `check` names the input and the closest declared one."""
    data = translate()
    data["t"]["inputs"] = {"language": "French"}
    worker = data["t"]["phases"][2]["workers"][0]
    worker["task"] = "Polish it into {{ inputs.langauge }}."
    assert one_problem(data).endswith(
        "key 'task' uses inputs.langauge, which is not a declared input (did you mean "
        "'language'?); declared inputs: language (declare it under the pipeline's 'inputs')"
    )
    worker["task"] = 'Polish it into {{ inputs["langauge"] }}.'
    assert "uses inputs.langauge" in one_problem(data)
    worker["task"] = "Polish it into {{ inputs.language }} ({{ inputs['language'] }})."
    assert build_workflow(data)


def test_item_index_outside_a_for_each_is_named_and_not_offered() -> None:
    """`{{ item_index + 1 }}` in a phase that does not fan out: the problem names the name
    used and the fix, and a misspelled name's list of what is available leaves out the
    names such a phase does not have."""
    data = translate()
    data["t"]["phases"][0]["workers"][0]["task"] = "Part {{ item_index + 1 }}"
    problem = one_problem(data)
    assert "uses {{ item_index }} outside a for_each phase" in problem, problem
    assert "give phase 'translate' a 'for_each'" in problem, problem
    data = translate()
    data["t"]["phases"][0]["workers"][0]["task"] = "About {{ topc }}"
    problem = one_problem(data)
    assert "did you mean 'topic'" in problem or "'topic'" in problem, problem
    available = problem.split("available: ", 1)[1]
    assert "item" not in available.split(" (")[0].split(", "), problem
