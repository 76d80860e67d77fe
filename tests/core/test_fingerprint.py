"""Fingerprints: equal for the same work, different when any part of it changes."""

from __future__ import annotations

from typing import Any

from interlock.core import events as ev
from interlock.core.fingerprint import fingerprint
from interlock.core.loader import Definition
from interlock.core.reuse import ReuseReason, judge
from interlock.core.state import RunState, fold
from interlock.core.workflow import Pipeline

SPEC: dict[str, Any] = {
    "phases": [
        {"id": "one", "workers": [{"role": "a", "model": "m", "task": "Write about {{ topic }}"}]},
        {"id": "two", "workers": [{"role": "b", "model": "m", "final": True, "reads": ["a.md"]}]},
    ]
}


def history(topic: str = "t", a_sha: str = "1" * 64, rerun_from: str | None = None) -> RunState:
    """A run where a completed (with output hash `a_sha`) and b was dispatched."""
    return fold(
        [
            ev.RunCreated(
                at=0,
                run_id="r",
                pipeline="p",
                definition_hash="h",
                topic=topic,
                rerun_of="src",
                rerun_from=rerun_from,
            ),
            ev.PhaseStarted(at=0, phase="one", visit=1),
            ev.TaskDispatched(
                at=0, task_id="a@1", phase="one", role="a", visit=1, item=None, attempt=1, model="m"
            ),
            ev.TaskCompleted(at=1, task_id="a@1", attempt=1, artifact="a.md", sha256=a_sha, size=1),
            ev.PhaseStarted(at=1, phase="two", visit=1),
            ev.TaskDispatched(
                at=1, task_id="b@1", phase="two", role="b", visit=1, item=None, attempt=1, model="m"
            ),
        ]
    )


def pipeline(**worker_b: object) -> Pipeline:
    """The two-phase pipeline, with fields of worker b replaced."""
    spec = {"phases": [SPEC["phases"][0], {**SPEC["phases"][1]}]}
    spec["phases"][1]["workers"] = [{**SPEC["phases"][1]["workers"][0], **worker_b}]
    return Definition.of("p", Pipeline.model_validate(spec)).pipeline


def test_same_work_same_fingerprint() -> None:
    """Folding the same history twice gives the same fingerprint."""
    one, two = history(), history()
    assert fingerprint(pipeline(), one, one.tasks["b@1"]) == fingerprint(
        pipeline(), two, two.tasks["b@1"]
    )


def test_each_part_names_itself_when_it_changes() -> None:
    """A changed read, task, model identity or topic changes exactly its own part."""
    base = history()
    base_print = fingerprint(pipeline(), base, base.tasks["b@1"], ["id-1"])
    cases = {
        "reads": (pipeline(), history(a_sha="2" * 64), ["id-1"]),
        "task": (pipeline(task="new words"), base, ["id-1"]),
        "worker": (pipeline(), base, ["id-2"]),
        "inputs": (pipeline(), history(topic="u"), ["id-1"]),
    }
    for part, (pipe, state, identity) in cases.items():
        other = fingerprint(pipe, state, state.tasks["b@1"], identity)
        assert other.digest != base_print.digest
        assert other.changed(base_print.parts) == [part], part


def test_the_topic_reaches_the_task_part_through_the_template() -> None:
    """A task that renders the topic changes its rendered task with the topic."""
    one, two = history(), history(topic="u")
    a1 = fingerprint(pipeline(), one, one.tasks["a@1"])
    a2 = fingerprint(pipeline(), two, two.tasks["a@1"])
    assert set(a2.changed(a1.parts)) == {"task", "inputs"}


def test_judge_reuses_a_match_and_forces_from_the_named_phase() -> None:
    """Equal fingerprints reuse; once the --from phase was entered, everything runs."""
    state = history()
    task = state.tasks["b@1"]
    current = fingerprint(pipeline(), state, task)
    source = history()
    candidate = source.tasks["a@1"]  # any completed task with the matching digest
    candidate.fingerprint = current.digest
    assert judge(state, task, current, candidate, source_run="src").reuse
    forced = history(rerun_from="two")
    verdict = judge(forced, forced.tasks["b@1"], current, candidate, source_run="src")
    assert verdict.reason is ReuseReason.FORCED and not verdict.reuse
    candidate.fingerprint = "0" * 64
    changed = judge(state, task, current, candidate, source_run="src", candidate_parts={})
    assert changed.reason is ReuseReason.CHANGED and "runs: changed" in changed.why


def test_a_reuse_folds_as_a_free_completion() -> None:
    """task_reused completes the task, records where from, and adds no cost."""
    state = history()
    reused = ev.TaskReused(
        at=2,
        task_id="b@1",
        attempt=1,
        source_run="src",
        source_task="b@1",
        artifact="b.md",
        sha256="3" * 64,
        size=4,
        values={"x": 1},
    )
    from interlock.core.state import apply

    apply(state, reused)
    task = state.tasks["b@1"]
    assert task.status.value == "completed" and task.reused_from == "src/b@1"
    assert state.cost_usd == 0 and state.outputs["b"] == (1, {None: "b.md"})
    assert state.values["b"] == {"x": 1}
    kind, data = ev.to_record(reused)
    assert ev.from_record(kind, data) == reused


def test_a_kept_worker_part_equals_the_one_computed_per_task() -> None:
    """For a command without templates the worker part does not depend on the task, so the
    runtime may keep it; a templated command is recomputed per task."""
    from interlock.core.fingerprint import renders_per_task, template_values, worker_part

    plain = Pipeline.model_validate(
        {"phases": [{"id": "p", "workers": [
            {"role": "a", "command": ["sh", "-c", "echo {output} $x"], "final": True}]}]}
    ).worker("a")  # fmt: skip
    state = history()
    values = template_values(state, state.tasks["a@1"])
    assert not renders_per_task(plain)
    assert worker_part(plain, None, {}) == worker_part(plain, None, values)
    templated = plain.model_copy(update={"command": ["echo", "{{ topic }}"]})
    assert renders_per_task(templated)
    assert worker_part(templated, None, {"topic": "t"}) != worker_part(
        templated, None, {"topic": "u"}
    )


def test_every_field_that_shapes_the_output_is_in_the_worker_part() -> None:
    """A schema, request params or a system prompt change the worker part; a timeout, retries
    or tags do not (they change how it runs, not what it answers)."""
    from interlock.core.fingerprint import worker_part

    base = Pipeline.model_validate(
        {"phases": [{"id": "p", "workers": [{"role": "a", "model": "m", "final": True}]}]}
    ).worker("a")
    same = worker_part(base, None, {})
    change: dict[str, Any]
    for change in ({"system": "be brief"}, {"output": "other.md"}, {"fallback_models": ["n"]}):
        assert worker_part(base.model_copy(update=change), None, {}) != same, change
    for change in ({"timeout": 5.0}, {"retries": 3}, {"tags": ["x"]}, {"final": False}):
        assert worker_part(base.model_copy(update=change), None, {}) == same, change


def test_a_plain_task_and_no_reads_hash_as_the_recipe_says() -> None:
    """The task part of a task without template syntax is the hash of its text and the reads
    part of a worker that reads nothing the hash of no reads, whichever task asks (the parts
    a fingerprint keeps per worker are the ones it would compute)."""
    from interlock.core.fingerprint import _hash

    state = history()
    plain = pipeline(task="Summarise the notes.", reads=[])
    for _ in range(2):  # the second answer is the kept one
        parts = fingerprint(plain, state, state.tasks["b@1"]).parts
        assert parts["task"] == _hash("Summarise the notes.")[:16]
        assert parts["reads"] == _hash([])[:16]
    templated = fingerprint(pipeline(task="About {{ topic }}"), state, state.tasks["b@1"])
    assert templated.parts["task"] == _hash("About t")[:16]
