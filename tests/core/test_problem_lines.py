"""A problem with a key or a value names the line where it is written, in YAML and JSON."""

from __future__ import annotations

import pytest

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
