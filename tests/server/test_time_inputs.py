"""A run started through the API with inputs that put a start time past 9999, or an integer
past 64 bits, is refused with the reason, and nothing is recorded."""

from __future__ import annotations

from pathlib import Path

from tests.server.conftest import ServerFactory

FLOW = """\
later:
  inputs:
    when: {type: integer, default: 1800000000}
  phases:
    - id: one
      not_before: inputs.when
      workers:
        - {role: w, model: m, final: true}
"""


def test_inputs_out_of_range_are_refused_by_the_api(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """`when` past 9999 or past 64 bits is a 400-class answer naming it; runs still list."""
    path = tmp_path / "later.yaml"
    path.write_text(FLOW)
    server = make_server(workflows=[path])
    late = server.http.post(
        "/api/runs", json={"pipeline": "later", "topic": "x", "inputs": {"when": 2 * 10**14}}
    )
    assert 400 <= late.status_code < 500, late.text
    assert "outside the times interlock keeps" in late.json()["error"]["message"]
    huge = server.http.post(
        "/api/runs", json={"pipeline": "later", "topic": "x", "inputs": {"when": 10**20}}
    )
    assert 400 <= huge.status_code < 500, huge.text
    assert "input 'when' must fit in 64 bits" in huge.json()["error"]["message"]
    listed = server.http.get("/api/runs")
    assert listed.status_code == 200 and listed.json() == []


def test_a_text_input_that_is_no_time_is_refused_by_the_api(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A start time given as text no date can be is a 400-class answer quoting it; no run."""
    path = tmp_path / "later.yaml"
    flow = FLOW.replace("{type: integer, default: 1800000000}", "{type: string, required: true}")
    path.write_text(flow)
    server = make_server(workflows=[path])
    given = {"pipeline": "later", "topic": "x", "inputs": {"when": "99999-01-01T00:00:00Z"}}
    refused = server.http.post("/api/runs", json=given)
    assert 400 <= refused.status_code < 500, refused.text
    said = refused.json()["error"]["message"]
    assert "expression 'inputs.when' gave \"99999-01-01T00:00:00Z\": give a timestamp" in said
    assert server.http.get("/api/runs").json() == []
