"""A problem with a key or a value names the line where it is written, in YAML and JSON."""

from __future__ import annotations

import json

import pytest
import yaml

from interlock.core.loader import parse_workflow
from interlock.errors import WorkflowError

YAML = """\
t:
  phases:
  - id: a
    workers:
      - role: w
        model: m
        timout: 5
        final: true
  - id: b
    workers: [{role: v, model: m, timeout: "soon"}]
  - workers: [{role: x, model: m}]
"""

JSON = """{"t": {"phases": [
  {"id": "a",
   "workers": [{"role": "w", "model": "m",
                "timout": 5, "final": true}]}]}}
"""


def problems(text: str, *, json_only: bool = False) -> list[str]:
    with pytest.raises(WorkflowError) as info:
        parse_workflow(text, "flow", json_only=json_only)
    return info.value.problems


def test_yaml_problems_name_their_lines() -> None:
    """An unknown key, a wrong value and a missing key (placed at its mapping) each start with
    the line to open."""
    found = problems(YAML)
    assert found[0].startswith("line 7: pipeline 't', phase 'a', worker 'w', key 'timout'")
    assert found[1].startswith("line 10: pipeline 't', phase 'b', worker 'v', key 'timeout'")
    assert any(p.startswith("line 11: pipeline 't', phase 3, key 'id'") for p in found), found


def test_json_problems_name_their_lines() -> None:
    """A `.json` file's problems are placed the same way."""
    assert problems(JSON, json_only=True)[0].startswith("line 4: pipeline 't', phase 'a'")


def test_problems_of_data_without_text_have_no_line() -> None:
    """Data built in Python has no lines: its problems read as before."""
    from interlock.core.loader import build_workflow

    with pytest.raises(WorkflowError) as info:
        build_workflow({"t": {"phases": [{"id": "a", "workers": [{"role": "w", "timout": 1}]}]}})
    assert info.value.problems[0].startswith("pipeline 't'")


@pytest.mark.parametrize(
    ("written", "meant"),
    [("int", "integer"), ("float", "number"), ("strng", "text"), ("boolen", "boolean")],
)
def test_a_choice_written_another_way_names_the_one_meant(written: str, meant: str) -> None:
    """`type: int` is told the choices in the file's words ("must be", not pydantic's "Input
    should be", which reads as if about the pipeline's inputs) and the one meant."""
    text = f"t:\n  inputs:\n    n: {{type: {written}}}\n  phases:\n"
    text += "    - {id: a, workers: [{role: w, final: true, command: [echo]}]}\n"
    (problem,) = problems(text)
    assert problem == (
        "line 3: pipeline 't', input 'n', key 'type': must be 'text', 'integer', 'number' or "
        f"'boolean' (did you mean {meant!r}?)"
    )


CROSS = """\
p:
  inputs:
    n: {type: integer}
  phases:
    - id: a
      workers:
        - role: w
          command: [echo, hi]
          reads: [x.md, "x.md?"]
      next:
        - {if: "w.score > 3 &&", goto: b}
    - id: b
      workers:
        - role: x
          final: true
          command: [echo, "{{ inputs.m }}"]
"""


def test_cross_reference_problems_name_their_lines() -> None:
    """A problem found after the schema (a read, a condition, a template) names the line of
    the key it is about, or of its worker or rule: the place is found from the words that
    start the problem."""
    lines = [problem.split(":", 1)[0] for problem in problems(CROSS)]
    assert lines == ["line 9", "line 9", "line 11", "line 16"], problems(CROSS)
    as_json = json.dumps(yaml.safe_load(CROSS), indent=1)
    assert all(p.startswith("line ") for p in problems(as_json, json_only=True))


def test_a_place_that_is_not_found_leaves_the_problem_as_it_is() -> None:
    """A problem whose place names nothing in the file (a sub-pipeline's label, say) is
    shown without a line rather than with a wrong one."""
    from interlock.core.loader import _place_path

    data = yaml.safe_load(CROSS)
    assert _place_path("pipeline 'p > other.yaml#c', phase 'a': x", data) == ["p > other.yaml#c"]
    assert _place_path("pipeline 'p', phase 'zz', worker 'w': x", data) == ["p"]
    assert _place_path("several pipelines: x", data) == []


def test_inputs_and_extracted_values_take_each_others_type_words() -> None:
    """`string`/`bool` (an extract's words) on an input and `text`/`boolean` (an input's) on
    an extract mean the same types, so neither is refused for using the other's words."""
    from interlock.core.loader import parse_workflow as parse

    text = (
        "t:\n  inputs:\n    a: {type: string, default: 3}\n    b: {type: bool}\n  phases:\n"
        "    - id: a\n      workers:\n        - role: w\n          final: true\n"
        "          command: [echo]\n"
        "          extract: {ok: {regex: '(y)', type: boolean}, t: {regex: '(z)', type: text}}\n"
    )
    pipeline = parse(text, "flow").get("t").pipeline
    assert pipeline.inputs["a"].type == "text" and pipeline.inputs["a"].default == "3"
    assert pipeline.inputs["b"].type == "boolean"
    extract = pipeline.phases[0].workers[0].extract
    assert extract["ok"].type == "bool" and extract["t"].type == "string"
