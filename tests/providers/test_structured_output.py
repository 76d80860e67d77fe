"""A worker's `schema:`: native structured output, validation, values for conditions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.core.loader import load_workflow, parse_workflow
from interlock.errors import WorkflowError

from .fake_llm_server import FakeServer, Fault
from .project import app_for, attempt_usage, make_project

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number"}, "notes": {"type": "string"}},
    "required": ["score", "notes"],
    "additionalProperties": False,
}


def review_flow(project: Path, model: str, schema: str = json.dumps(SCHEMA)) -> Path:
    """A reviewer with a schema, and a branch on its score that no extract block declares."""
    flow = project / "review.yaml"
    flow.write_text(
        f"""
p:
  phases:
  - id: review
    workers:
    - {{role: reviewer, model: {model}, schema: {schema}}}
    next:
    - {{if: "reviewer.score >= 8.0", goto: publish}}
  - id: polish
    workers:
    - {{role: polisher, model: {model}, reads: [reviewer.md]}}
  - id: publish
    workers:
    - {{role: publisher, model: gpt, final: true, reads: [reviewer.md]}}
"""
    )
    return flow


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_the_schema_is_sent_natively_and_its_fields_drive_conditions(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """OpenAI gets response_format json_schema (strict, as the schema allows it), Anthropic
    output_config.format; the output file is the JSON document and `reviewer.score` decides
    the branch without an extract block."""
    server.state.reply = ['{"score": 8', '.5, "notes": "clear"}']
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(review_flow(project, model), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    body = server.requests[0].body
    if model == "gpt":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "reviewer", "schema": SCHEMA, "strict": True},
        }
    else:
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    output = (app.run_dir(state.run_id) / "reviewer.md").read_text()
    assert json.loads(output) == {"score": 8.5, "notes": "clear"}
    completed = [e.data for e in app.events(state.run_id) if e.kind == "task_completed"]
    assert completed[0]["values"] == {"score": 8.5, "notes": "clear"}
    assert "polisher@1" not in state.tasks  # the branch read the score
    assert "response_format" not in server.requests[-1].body  # the publisher has no schema


def test_an_answer_that_does_not_match_is_a_retryable_failure_naming_the_field(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`score` as text fails the attempt (retryable, its cost recorded) saying where and why."""
    server.state.reply = ['{"score": "high", "notes": "x"}']
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(review_flow(project, "gpt"), topic="t")
    assert state.status is RunStatus.FAILED
    failed = [e.data for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert "at $.score: 'high' is not of type 'number'" in failed[0]["error"]
    assert failed[0]["retryable"] is True
    assert failed[0]["usage"]["cost_usd"] > 0


def test_a_provider_that_rejects_response_format_gets_the_schema_in_the_prompt(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 400 about response_format is followed by one call with the schema in the prompt;
    the fenced answer is validated, and the attempt records a warning."""
    server.state.reply = ['```json\n{"score": 9, "notes": "fine"}\n```']
    server.fail_next(Fault(reject_field="response_format"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(review_flow(project, "gpt"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    first, second = server.requests[:2]
    assert "response_format" in first.body and "response_format" not in second.body
    assert '"score"' in second.body["messages"][-1]["content"]  # the schema, in the prompt
    usage = attempt_usage(app, state.run_id)[0]
    assert "refused the native structured output" in usage["warnings"][0]
    assert json.loads((app.run_dir(state.run_id) / "reviewer.md").read_text())["score"] == 9


def test_a_schema_file_is_read_with_the_workflow_and_a_bad_one_is_refused(
    tmp_path: Path,
) -> None:
    """`schema: review.json` is pinned into the definition; an invalid schema, a missing
    file and a schema on a command worker are workflow errors naming the place."""
    (tmp_path / "review.json").write_text(json.dumps(SCHEMA))
    flow = tmp_path / "flow.yaml"
    worker = "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
    flow.write_text(worker + "      model: m\n      schema: review.json\n")
    pipeline = load_workflow(flow).get("p").pipeline
    assert pipeline.worker("w").output_schema == SCHEMA
    assert set(pipeline.worker("w").extract) == {"score", "notes"}
    flow.write_text(worker + "      model: m\n      schema: missing.json\n")
    with pytest.raises(WorkflowError, match=r"worker 'w', key 'schema': cannot read missing\.json"):
        load_workflow(flow)
    with pytest.raises(WorkflowError, match=r"not valid JSON Schema: at \$.type: 'objekt'"):
        parse_workflow(worker + "      model: m\n      schema: {type: objekt}\n")
    with pytest.raises(WorkflowError, match="'schema' only applies to 'model' workers"):
        parse_workflow(worker + "      command: [echo]\n      schema: {type: object}\n")


def test_without_configuration_the_offline_stand_in_answers_in_the_schemas_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pipeline with a schema runs before any model is configured."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    app = app_for(tmp_path)
    state = app.run(review_flow(tmp_path, "m"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    document = json.loads((app.run_dir(state.run_id) / "reviewer.md").read_text())
    assert document["score"] == 0


def test_a_changed_schema_changes_the_workers_fingerprint() -> None:
    """A rerun does not reuse an answer that was asked for another shape."""
    from interlock.core.fingerprint import worker_part

    def part(schema: str) -> str:
        worker = "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        pipeline = parse_workflow(worker + f"      model: m\n      schema: {schema}\n")
        return worker_part(pipeline.get("p").pipeline.worker("w"), None, {})

    closed = "{type: object, properties: {v: {type: string, enum: [a, b]}}}"
    opened = "{type: object, properties: {v: {type: string}}}"
    assert part(closed) != part(opened)


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_a_server_failing_on_the_schema_with_http_500_gets_it_in_the_prompt_at_once(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """An internal error answered to a native schema (llama-cpp-python's answer to a schema
    it cannot compile) is not sent again as it was: the next request carries the schema in
    the prompt only, and the answer is delivered."""
    server.state.reply = ['{"score": 9, "notes": "fine"}']
    server.state.schema_support = "fails"
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(review_flow(project, model), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    field = "response_format" if model == "gpt" else "output_config"
    reviews = [r.body for r in server.requests if "JSON Schema" in json.dumps(r.body)]
    assert [field in body for body in reviews] == [True, False]  # once natively, once not
    usage = attempt_usage(app, state.run_id)[0]
    assert "(HTTP 500)" in usage["warnings"][0]


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_a_server_that_ignores_the_schema_field_is_told_the_schema_in_the_prompt(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """A compatible server or gateway (here on 127.0.0.1) may drop the native field without
    a word: the prompt states the schema as well, so the model answers in its shape."""
    server.state.reply = ['{"score": 9, "notes": "fine"}']
    server.state.schema_support = "ignored"
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(review_flow(project, model), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert len(server.requests) == 2  # the reviewer and the publisher, no retry
    assert json.loads((app.run_dir(state.run_id) / "reviewer.md").read_text())["score"] == 9


def test_only_the_vendors_own_apis_are_trusted_to_enforce_a_native_schema() -> None:
    """api.openai.com and api.anthropic.com enforce it; a local server or a gateway may not."""
    from interlock.providers.schema_output import enforces_schema

    assert enforces_schema("openai", "https://api.openai.com/v1")
    assert enforces_schema("anthropic", "https://API.anthropic.com")
    assert not enforces_schema("openai", "http://localhost:8080/v1")
    assert not enforces_schema("anthropic", "http://127.0.0.1:4000")
