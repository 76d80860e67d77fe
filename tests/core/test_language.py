"""A workflow file may say which workflow language it was written for (`$language: 1`);
without it the loader assumes the one it reads and `check` says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from interlock.core.loader import LANGUAGE, parse_workflow
from interlock.core.workflow_schema import workflow_schema
from interlock.errors import WorkflowError

PIPELINE = {
    "x": {
        "phases": [
            {"id": "p", "workers": [{"role": "w", "model": "m", "task": "t", "final": True}]}
        ]
    }
}


def test_a_file_without_the_key_is_read_as_the_current_language() -> None:
    workflow = parse_workflow(json.dumps(PIPELINE))
    assert (workflow.language, workflow.language_stated) == (LANGUAGE, False)


def test_a_stated_language_is_recorded_and_is_no_pipeline() -> None:
    workflow = parse_workflow(json.dumps({"$language": 1, "$schema": "s.json", **PIPELINE}))
    assert (workflow.language, workflow.language_stated) == (1, True)
    assert list(workflow.definitions) == ["x"]


def test_the_key_does_not_change_the_pipelines_hash() -> None:
    """Pinning the language is no change to what a run pins."""
    plain = parse_workflow(json.dumps(PIPELINE)).get("x")
    stated = parse_workflow(json.dumps({"$language": 1, **PIPELINE})).get("x")
    assert plain.hash == stated.hash


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (2, "written for workflow language 2, and this interlock reads language 1: upgrade"),
        ("1", "'1' is not a workflow language: write $language: 1"),
        (True, "True is not a workflow language"),
        (0, "0 is not a workflow language"),
    ],
)
def test_a_language_it_does_not_read_is_refused(value: object, says: str) -> None:
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(json.dumps({"$language": value, **PIPELINE}))
    assert says in str(caught.value)


def test_other_dollar_keys_are_reserved() -> None:
    with pytest.raises(WorkflowError, match=r"'\$pipeline': keys starting with '\$' are reserved"):
        parse_workflow(json.dumps({"$pipeline": PIPELINE["x"]}))
    with pytest.raises(WorkflowError, match="the top level must map pipeline names"):
        parse_workflow(json.dumps({"$language": 1}))


def test_the_schema_accepts_what_the_loader_accepts() -> None:
    schema = workflow_schema()
    jsonschema.validate({"$language": 1, "$schema": "s.json", **PIPELINE}, schema)
    for bad in ({"$language": 2, **PIPELINE}, {"$other": PIPELINE["x"]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_check_says_what_it_assumed(tmp_path: Path) -> None:
    plain, stated = tmp_path / "plain.json", tmp_path / "stated.json"
    plain.write_text(json.dumps(PIPELINE))
    stated.write_text(json.dumps({"$language": 1, **PIPELINE}))
    cli = [sys.executable, "-m", "interlock", "--home", str(tmp_path / "h"), "check"]
    said = subprocess.run([*cli, str(plain)], capture_output=True, text=True, check=True).stdout
    assert "workflow language 1 (assumed: the file has no '$language: 1' line)" in said
    said = subprocess.run([*cli, str(stated)], capture_output=True, text=True, check=True).stdout
    assert "assumed" not in said
