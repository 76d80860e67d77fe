"""A worker's or a signal's schema is whole: a `$ref` outside it is refused when the workflow is
read, and no validator ever retrieves a URL at run time."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from referencing.exceptions import Unresolvable

from interlock.core.loader import load_workflow, parse_workflow
from interlock.core.schemas import local_validator
from interlock.errors import WorkflowError
from interlock.providers.base import ModelResult, ProviderError
from interlock.providers.schema_output import schema_document


class Counter(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a schema and counts it."""

    hits: list[str] = []

    def do_GET(self) -> None:  # the name http.server calls
        Counter.hits.append(self.path)
        body = json.dumps({"type": "number"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server on a free port that counts the requests it gets; yields its URL."""
    Counter.hits = []
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Counter)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def flow(schema: Mapping[str, object], key: str = "schema") -> str:
    """A one-worker pipeline whose worker (or whose phase's wait_for) has `schema`."""
    if key == "schema":
        worker = {"role": "w", "model": "offline", "final": True, "schema": schema}
        phase: dict[str, object] = {"id": "one", "workers": [worker]}
    else:
        worker = {"role": "w", "model": "offline", "final": True}
        phase = {"id": "one", "wait_for": {"signal": "go", "schema": schema}, "workers": [worker]}
    return json.dumps({"p": {"phases": [phase]}}, indent=2)


@pytest.mark.parametrize("key", ["schema", "wait_for"])
@pytest.mark.parametrize(
    "ref", ["{url}/x", "other.json", "other.json#/$defs/x", "https://json-schema.org/x"]
)
def test_a_reference_outside_the_schema_is_refused(server: str, key: str, ref: str) -> None:
    """A `$ref` to a URL or a file is refused with its place and the fix, nothing fetched."""
    schema = {"type": "object", "properties": {"score": {"$ref": ref.format(url=server)}}}
    with pytest.raises(WorkflowError) as info:
        parse_workflow(flow(schema, key), "flow.json", json_only=True)
    (problem,) = info.value.problems
    assert "'schema' refers outside itself: at $.properties.score: $ref" in problem
    assert "copy the definition under '$defs'" in problem
    assert Counter.hits == []


def test_a_reference_to_a_url_set_by_id_is_refused(server: str) -> None:
    """A relative `$ref` under an `$id` that is a URL would be fetched from there: refused."""
    schema = {"$id": f"{server}/root", "properties": {"x": {"$ref": "x.json"}}}
    with pytest.raises(WorkflowError):
        parse_workflow(flow(schema), "flow.json", json_only=True)
    assert Counter.hits == []


def test_references_inside_the_schema_still_work(server: str) -> None:
    """`#/$defs/...` references load and validate, even under an `$id` that is a URL."""
    schema = {
        "$id": f"{server}/root",
        "$defs": {"score": {"type": "number"}},
        "type": "object",
        "properties": {"score": {"$ref": "#/$defs/score"}},
        "enum": [{"$ref": "http://data.example/not-a-reference"}, {"score": 1}],
    }
    parse_workflow(flow(schema), "flow.json", json_only=True)
    validator = local_validator(schema)
    messages = [error.message for error in validator.iter_errors({"score": "high"})]
    assert "'high' is not of type 'number'" in messages
    assert Counter.hits == []


def test_no_validator_retrieves_a_url(server: str) -> None:
    """A schema that got past the check (an old definition) fails to resolve, unfetched."""
    schema = {"properties": {"score": {"$ref": f"{server}/x"}}}
    with pytest.raises(Unresolvable):
        list(local_validator(schema).iter_errors({"score": 1}))
    result = ModelResult(
        text='{"score": 1}',
        provider="offline",
        model="m",
        input_tokens=1,
        output_tokens=1,
        latency_s=0.0,
        cost_usd=0.0,
        finish_reason="stop",
    )
    with pytest.raises(ProviderError) as info:
        schema_document(result, schema)
    assert not info.value.retryable
    assert f"refers to '{server}/x', which is not inside it" in str(info.value)
    assert Counter.hits == []


def test_a_schema_file_is_read_with_the_workflow_limits(tmp_path: Path) -> None:
    """`schema: file.json` is parsed as strictly as the workflow: nesting is bounded."""
    (tmp_path / "s.json").write_text("[" * 5000 + "]" * 5000)
    path = tmp_path / "flow.yaml"
    path.write_text(
        "p:\n  phases:\n    - id: one\n      workers:\n"
        "        - {role: w, model: offline, final: true, schema: s.json}\n"
    )
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert "s.json is not JSON: nesting deeper than 64 levels" in info.value.problems[0]
