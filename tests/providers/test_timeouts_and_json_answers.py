"""Per-model timeouts, and complete JSON answers (asked for, or given to a streaming request)."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock import RunStatus

from .fake_llm_server import FakeServer, Fault
from .project import app_for, attempt_usage, make_project, one_worker

SLOW = """
[models.quick]
provider = "oa"
model = "gpt-test"
timeout = 0.5

[models.gpt-json]
provider = "oa"
model = "gpt-test"
stream = false

[models.claude-json]
provider = "an"
model = "claude-test"
stream = false
"""


def test_a_model_timeout_fails_its_call_and_the_fallback_gets_the_workers_limit(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary model gives up after its own 0.5 s; the fallback model, without a
    timeout of its own, has the worker's 30 s and answers after 1 s."""
    project = make_project(tmp_path, server, monkeypatch, SLOW)
    flow = one_worker(
        project, "      model: quick\n      fallback_models: [gpt]\n      timeout: 30\n"
    )
    server.fail_next(Fault(delay=1.0), Fault(delay=1.0))
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    failed = [e.data for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert len(failed) == 1 and "no complete answer within 0.5s" in failed[0]["error"]
    assert len(server.requests) == 2


@pytest.mark.parametrize("alias", ["gpt-json", "claude-json"])
def test_stream_false_asks_for_one_json_answer_and_reads_it(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, alias: str
) -> None:
    """With `stream = false` no event stream is asked for; the JSON answer is the output,
    with its usage (an Anthropic thinking block is not part of the text)."""
    project = make_project(tmp_path, server, monkeypatch, SLOW)
    flow = one_worker(project, f"      model: {alias}\n")
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    sent = server.requests[-1]
    assert "stream" not in sent.body and "stream_options" not in sent.body
    assert sent.headers["accept"] == "application/json"
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "Hello, world."
    [usage] = attempt_usage(app, state.run_id)
    assert (usage["input_tokens"], usage["output_tokens"]) == (1000, 500)
    assert usage["settings"] == {"stream": False}


@pytest.mark.parametrize("alias", ["gpt", "claude"])
def test_a_json_answer_to_a_streaming_request_is_accepted(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, alias: str
) -> None:
    """A server that answers JSON although asked to stream has answered: its answer is
    used instead of being discarded as 'not an event stream'."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, f"      model: {alias}\n")
    server.fail_next(Fault(json_answer=True))
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert server.requests[-1].body["stream"] is True
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "Hello, world."
    assert len(server.requests) == 1
