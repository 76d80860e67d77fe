"""The JSON Schema of workflow files: in sync with the models, as lenient as `check` on valid
files and as strict on the mistakes a schema can see; `interlock schema` and `init` serve it."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import given, settings

from interlock.cli.main import cli
from interlock.cli.workflows import TEMPLATES
from interlock.core.loader import build_workflow, load_workflow
from interlock.core.parse import parse_text
from interlock.core.workflow import Pipeline
from interlock.core.workflow_schema import SCHEMA_FILE, schema_text, workflow_schema
from interlock.errors import ExitCode, WorkflowError

from .test_properties import pipelines

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "schema" / "workflow.schema.json"
TEMPLATE_DIR = ROOT / "src" / "interlock" / "cli"
WORKFLOW_FILES = sorted(
    [
        *(p for p in (ROOT / "examples").iterdir() if p.suffix in (".yaml", ".json")),
        *(TEMPLATE_DIR / name for name in TEMPLATES.values()),
        *(ROOT / "tests" / "fixtures" / "workflows").iterdir(),
        ROOT / "tests" / "distributed" / "fanout.yaml",
    ]
)


@functools.cache
def validator() -> jsonschema.protocols.Validator:
    schema = workflow_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(data: Any) -> list[str]:
    return [error.message for error in validator().iter_errors(data)]


def test_committed_schema_matches_the_models() -> None:
    """schema/workflow.schema.json is what the models generate today."""
    assert COMMITTED.read_text(encoding="utf-8") == schema_text(), (
        "schema/workflow.schema.json is stale: regenerate it with "
        "'interlock schema -o schema/workflow.schema.json'"
    )


def test_schema_is_a_valid_draft_7_schema() -> None:
    """The schema itself passes the meta-schema of the dialect it declares."""
    schema = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_every_example_and_template_validates(path: Path) -> None:
    """Each example, init template and test workflow loads and matches the schema."""
    load_workflow(path)
    data = parse_text(path.read_text(encoding="utf-8"), json_only=path.suffix == ".json")
    assert schema_errors(data) == []


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_canonical_forms_validate(path: Path) -> None:
    """The canonical form a run pins (every default and null spelled out) validates too; a
    child pipeline the loader pinned into a worker validates as a pipeline of its own (the
    schema leaves `pipeline_definition` out: it is never written by hand)."""
    definitions = load_workflow(path).definitions
    data = {name: json.loads(d.canonical) for name, d in definitions.items()}
    pinned: dict[str, Any] = {}
    pending = list(data.values())
    while pending:
        for phase in pending.pop()["phases"]:
            for worker in phase["workers"]:
                child = worker.pop("pipeline_definition", None)
                if child is not None:
                    pinned[f"pinned-{len(pinned)}"] = child
                    pending.append(child)
    assert schema_errors(data) == []
    assert not pinned or schema_errors(pinned) == []


@settings(max_examples=60, deadline=None)
@given(pipeline=pipelines())
def test_random_valid_pipelines_validate(pipeline: Pipeline) -> None:
    """Any pipeline the loader accepts (random shapes: loops, fan-out, budgets) validates."""
    written = pipeline.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    assert schema_errors({"p": written}) == []
    assert schema_errors({"p": pipeline.model_dump(mode="json", by_alias=True)}) == []


def test_every_key_has_a_description_and_mode_an_enum() -> None:
    """Editors show a description on hover for every key and complete `mode` from a list."""
    defs = workflow_schema()["$defs"]
    missing = [
        f"{model}.{key}"
        for model, body in defs.items()
        for key, prop in body["properties"].items()
        if not prop.get("description")
    ]
    assert missing == [], "add them to DESCRIPTIONS in interlock.core.workflow_schema"
    assert all(body.get("description") for body in defs.values())
    assert defs["Phase"]["properties"]["mode"]["enum"] == ["parallel", "sequential"]


def worker(**extra: Any) -> dict[str, Any]:
    return {"role": "w", "model": "m", "final": True, **extra}


def pipeline(phase: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"p": {"phases": [phase or {"id": "a", "workers": [worker()]}], **extra}}


VALID = {
    "minimal": pipeline(),
    "input shorthand": pipeline(inputs={"n": 5, "lang": "French", "flag": True, "x": None}),
    "input spec": pipeline(inputs={"lang": {"default": "fr", "required": False}}),
    "cache duration": pipeline(cache={"ttl": "7d"}),
    "cache seconds": pipeline(cache={"ttl": 90}),
    "cache flag": pipeline(cache=True),
    "budget": pipeline(budget={"max_cost_usd": 1.5, "on_exceed": "pause"}),
    "null executors": pipeline(
        {"id": "a", "workers": [{"role": "w", "model": None, "command": ["x"], "final": True}]}
    ),
    "call": pipeline({"id": "a", "workers": [{"role": "w", "call": "pkg.mod:f", "final": True}]}),
    "params stop string": pipeline(
        {"id": "a", "workers": [worker(params={"stop": "END", "temperature": 0.2})]}
    ),
    "schema object": pipeline(
        {
            "id": "a",
            "workers": [
                worker(schema={"type": "object", "properties": {"score": {"type": "number"}}})
            ],
        }
    ),
    "extract and rules": {
        "p": {
            "phases": [
                {
                    "id": "a",
                    "workers": [
                        {"role": "v", "command": ["x"], "extract": {"n": {"regex": r"(\d+)"}}}
                    ],
                    "next": [{"if": "v.n == '1'", "goto": "b", "max_visits": 2}],
                },
                {"id": "b", "mode": "sequential", "workers": [worker()]},
            ]
        }
    },
    "python names": pipeline(
        {
            "id": "a",
            "workers": [
                worker(
                    extract={"v": {"json_path": "v"}},
                    output_schema={"type": "object", "properties": {"s": {"type": "string"}}},
                )
            ],
        }
    ),
}


@pytest.mark.parametrize("data", VALID.values(), ids=list(VALID))
def test_schema_accepts_what_check_accepts(data: dict[str, Any]) -> None:
    """Short forms and optional keys the loader accepts are accepted by the schema too."""
    build_workflow(json.loads(json.dumps(data)))
    assert schema_errors(data) == []


INVALID = {
    "misspelt key": pipeline({"id": "a", "workers": [worker(timout=5)]}),
    "unknown mode": pipeline({"id": "a", "mode": "parallell", "workers": [worker()]}),
    "no executor": pipeline({"id": "a", "workers": [{"role": "w", "final": True}]}),
    "two executors": pipeline({"id": "a", "workers": [worker(command=["x"])]}),
    "unsafe role": pipeline({"id": "a", "workers": [worker(role="../w")]}),
    "no workers": pipeline({"id": "a", "workers": []}),
    "extract both": pipeline(
        {"id": "a", "workers": [worker(extract={"v": {"json": "a", "regex": "b"}})]}
    ),
    "bad duration": pipeline(cache={"ttl": "7 days"}),
    "bad for_each": pipeline({"id": "a", "for_each": "nodot", "workers": [worker()]}),
    "timeout too long": pipeline({"id": "a", "workers": [worker(timeout=10**9)]}),
    "schema not json": pipeline({"id": "a", "workers": [worker(schema="answer.txt")]}),
    "empty file": {},
    "both spellings": pipeline(
        {"id": "a", "workers": [worker(extract={"v": {"json": "v", "json_path": "v"}})]}
    ),
}


@pytest.mark.parametrize("data", INVALID.values(), ids=list(INVALID))
def test_schema_refuses_what_check_refuses(data: dict[str, Any]) -> None:
    """Mistakes a schema can see are refused by both the schema and the loader."""
    with pytest.raises(WorkflowError):
        build_workflow(json.loads(json.dumps(data)))
    assert schema_errors(data) != []


def test_schema_command_prints_the_committed_schema() -> None:
    """`interlock schema` prints exactly the committed file."""
    result = CliRunner().invoke(cli, ["schema"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == COMMITTED.read_text(encoding="utf-8")


def test_schema_command_names_an_unwritable_file(tmp_path: Path) -> None:
    """`schema -o` into a missing folder is a clear error with an exit code, not a traceback."""
    result = CliRunner().invoke(cli, ["schema", "-o", str(tmp_path / "no" / "s.json")])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "s.json: cannot write it" in result.stderr and "create" in result.stderr


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_init_writes_the_modeline_and_the_schema_beside(tmp_path: Path, template: str) -> None:
    """An initialised file names the schema in its first line and the schema is written next
    to it, so editors validate it offline; `check` still accepts the file."""
    target = tmp_path / "flow.yaml"
    runner = CliRunner()
    result = runner.invoke(cli, ["init", str(target), "-t", template], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    first = target.read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# yaml-language-server: $schema={SCHEMA_FILE}"
    assert (tmp_path / SCHEMA_FILE).read_text(encoding="utf-8") == schema_text()
    load_workflow(target)


def test_init_keeps_an_existing_schema_file(tmp_path: Path) -> None:
    """A second `init` in the folder leaves an older schema copy alone and says how to
    refresh it."""
    (tmp_path / SCHEMA_FILE).write_text("{}\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "flow.yaml")], catch_exceptions=False)
    assert result.exit_code == 0
    assert (tmp_path / SCHEMA_FILE).read_text(encoding="utf-8") == "{}\n"
    assert "interlock schema -o" in result.stdout
