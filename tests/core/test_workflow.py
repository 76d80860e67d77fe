"""The workflow language: files load in YAML and JSON and mean what the design says."""

from __future__ import annotations

import json

import pytest

from interlock.core.extract import ExtractionError, extract_values
from interlock.core.loader import Definition, canonical_json, load_workflow, parse_workflow
from interlock.core.validate import read_name, transitions
from interlock.errors import UsageError, WorkflowError

from .runs import FIXTURES, fixture


def test_research_pipeline_loads_unchanged() -> None:
    """The research pipeline from the design article loads as written, with no edits."""
    workflow = load_workflow(FIXTURES / "research.json")
    assert list(workflow.definitions) == ["research"]
    pipeline = workflow.get("research").pipeline
    assert pipeline.description == "Pure research + analysis"
    assert [p.id for p in pipeline.phases] == ["collect", "synthesis"]


def test_research_pipeline_means_what_the_article_says() -> None:
    """Two parallel researchers on sonnet feed one final opus synthesizer that reads both."""
    pipeline = fixture("research.json", "research").pipeline
    collect, synthesis = pipeline.phases
    assert collect.mode == "parallel"
    assert [(w.role, w.model, w.timeout) for w in collect.workers] == [
        ("researcher-a", "sonnet", 600),
        ("researcher-b", "sonnet", 600),
    ]
    assert synthesis.mode == "sequential"
    final = pipeline.final_worker
    assert (final.role, final.model, final.timeout) == ("synthesizer", "opus", 420)
    assert final.reads == ["researcher-a.md", "researcher-b.md"]
    assert [w.output_name for w in collect.workers] == ["researcher-a.md", "researcher-b.md"]
    # The article's table: a task may run past its timeout by 120 s before the engine acts.
    assert all(w.grace == 120 for p in pipeline.phases for w in p.workers)
    assert transitions(pipeline, 0) == [("synthesis", False)]


def test_yaml_and_json_give_the_same_definition() -> None:
    """The same pipeline written in YAML and in JSON pins the same canonical text and hash."""
    as_json = (FIXTURES / "research.json").read_text()
    data = json.loads(as_json)
    synth = data["research"]["phases"][1]["workers"][0]
    as_yaml = f"""
research:
  description: Pure research + analysis
  phases:
    - id: collect
      mode: parallel
      workers:
        - role: researcher-a
          model: sonnet
          timeout: 600
          task: "{data["research"]["phases"][0]["workers"][0]["task"]}"
        - role: researcher-b
          model: sonnet
          timeout: 600
          task: "{data["research"]["phases"][0]["workers"][1]["task"]}"
    - id: synthesis
      mode: sequential
      workers:
        - role: synthesizer
          model: opus
          timeout: 420
          final: true
          reads: [researcher-a.md, researcher-b.md]
          task: {synth["task"]}
"""
    from_json = parse_workflow(as_json).get("research")
    from_yaml = parse_workflow(as_yaml).get("research")
    assert from_json.canonical == from_yaml.canonical
    assert from_json.hash == from_yaml.hash


def test_translate_fixture_describes_the_polish_loop() -> None:
    """The review phase loops to polish while the score is below 8.0, at most twice."""
    pipeline = fixture("translate.yaml", "translate").pipeline
    assert [p.id for p in pipeline.phases] == ["fetch", "translate", "review", "polish", "publish"]
    review = pipeline.phase("review")
    loop, default = review.next
    assert (loop.if_, loop.goto, loop.max_visits) == ("reviewer.score < 8.0", "polish", 2)
    assert (default.if_, default.goto, default.max_visits) == (None, "publish", None)
    assert pipeline.worker("reviewer").reads == ["translator.md", "polisher.md?"]
    assert read_name("polisher.md?") == ("polisher.md", True)
    assert pipeline.phase("polish").next[0].goto == "review"
    assert pipeline.final_worker.role == "publisher"
    assert pipeline.inputs["language"].default == "French"


def test_reviewer_score_extracts_as_a_number() -> None:
    """The reviewer's regex turns 'score: 7.5' at the end of a review into the number 7.5."""
    spec = fixture("translate.yaml", "translate").pipeline.worker("reviewer").extract
    assert extract_values(spec, "Good flow, some stiff idioms.\nscore: 7.5\n") == {"score": 7.5}
    with pytest.raises(ExtractionError, match="score"):
        extract_values(spec, "no score given")


def test_score_can_come_from_json_instead() -> None:
    """A JSON field path extracts a typed value from a fenced JSON block in the output."""
    workflow = parse_workflow(
        """
p:
  phases:
    - id: a
      workers:
        - role: reviewer
          model: m
          final: true
          extract:
            score: {json: verdict.score, type: number}
            notes: {json: verdict.notes, type: list}
"""
    )
    spec = workflow.get("p").pipeline.worker("reviewer").extract
    text = 'Review:\n```json\n{"verdict": {"score": "8.5", "notes": ["a", "b"]}}\n```\n'
    assert extract_values(spec, text) == {"score": 8.5, "notes": ["a", "b"]}
    # Text where the JSON should have a list is refused, not read as a list of one item.
    with pytest.raises(ExtractionError, match="is text \\('a and b'\\), not a list"):
        extract_values(spec, '{"verdict": {"score": 8, "notes": "a and b"}}')


def test_definition_hash_is_stable_and_round_trips() -> None:
    """A pinned definition rebuilds from its canonical JSON with the same hash."""
    definition = fixture("translate.yaml", "translate")
    again = Definition.from_canonical(definition.name, definition.canonical)
    assert again.hash == definition.hash
    assert again.pipeline == definition.pipeline
    assert canonical_json(again.pipeline) == definition.canonical


def test_unknown_pipeline_lists_the_known_ones() -> None:
    """Asking for a pipeline that does not exist names the ones that do."""
    workflow = load_workflow(FIXTURES / "research.json")
    with pytest.raises(UsageError, match="no pipeline named 'reserch'; pipelines are research"):
        workflow.get("reserch")


def test_missing_file_suggests_init(tmp_path: object) -> None:
    """A workflow path that does not exist gives a usage error pointing at 'interlock init'."""
    with pytest.raises(UsageError, match="interlock init"):
        load_workflow(f"{tmp_path}/nope.yaml")


def test_yaml_syntax_error_names_line_and_column() -> None:
    """A YAML syntax error says where it is, by line and column."""
    with pytest.raises(WorkflowError) as info:
        parse_workflow("p:\n  phases: [\n", "flow.yaml")
    (problem,) = info.value.problems
    assert problem.startswith("not valid YAML at line")
    assert "flow.yaml" in str(info.value)


@pytest.mark.parametrize("text", ["", "[]", "just text", "{}"])
def test_top_level_must_map_names_to_pipelines(text: str) -> None:
    """A file that is not a mapping of pipeline names is refused with an example."""
    with pytest.raises(WorkflowError, match="must map pipeline names to pipelines"):
        parse_workflow(text)


def test_input_shorthand_is_a_default() -> None:
    """`inputs: {language: French}` declares an input whose default is French."""
    pipeline = fixture("translate.yaml", "translate").pipeline
    spec = pipeline.inputs["language"]
    assert (spec.default, spec.required) == ("French", False)


def test_max_attempts_and_models_per_attempt() -> None:
    """Each model gets (retries + 1) attempts, the own model first and then each fallback."""
    workflow = parse_workflow(
        "p: {phases: [{id: a, workers: [{role: w, model: m1, retries: 1, "
        "fallback_models: [m2, m3], final: true}]}]}"
    )
    w = workflow.get("p").pipeline.worker("w")
    assert w.max_attempts == 6
    assert [w.model_for_attempt(n) for n in range(1, 7)] == ["m1", "m1", "m2", "m2", "m3", "m3"]


def test_for_each_shorthand_is_the_items_reference() -> None:
    """`for_each: planner.topics` is short for `for_each: {items: planner.topics}`."""
    workflow = parse_workflow(
        """
p:
  phases:
    - id: plan
      workers:
        - role: planner
          model: m
          extract: {topics: {json: topics, type: list}}
    - id: write
      for_each: planner.topics
      workers: [{role: writer, model: m, task: "Write about {{ item }}"}]
    - id: merge
      workers: [{role: editor, model: m, final: true}]
"""
    )
    for_each = workflow.get("p").pipeline.phase("write").for_each
    assert for_each is not None
    assert (for_each.items, for_each.concurrency, for_each.max_items) == (
        "planner.topics",
        None,
        1000,
    )
