"""What a server states about an answer is checked against what it counted: an answer that
used every output token allowed is truncated whatever reason is stated; counts the server
did not report are called estimates; a stream that broke off records what arrived; an empty
stream and a limit that was never sent are named for what they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interlock import Interlock, RunStatus

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project, one_worker

CAPPED = """
[models.gpt-capped]
provider = "oa"
model = "gpt-test"
max_output_tokens = 400

[models.claude-capped]
provider = "an"
model = "claude-test"
max_output_tokens = 400
"""


def failures(app: Interlock, run_id: str) -> list[dict[str, Any]]:
    """The data of each task_failed event of the run."""
    return [e.data for e in app.events(run_id) if e.kind == "task_failed"]


def run_once(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> tuple[Interlock, str]:
    """One attempt of a one-worker pipeline on `model`; the app and the run id."""
    project = make_project(tmp_path, server, monkeypatch, CAPPED)
    app = app_for(project)
    state = app.run(one_worker(project, f"      model: {model}\n      retries: 0\n"), topic="t")
    assert state.status is RunStatus.FAILED
    return app, state.run_id


@pytest.mark.parametrize(
    ("model", "stated"), [("gpt-capped", "stop"), ("claude-capped", "end_turn")]
)
def test_an_answer_that_used_every_allowed_token_is_truncated_whatever_it_says(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str, stated: str
) -> None:
    """output_tokens equal to the max_tokens sent, with `end_turn` (LiteLLM's Messages route)
    or `stop`, is a truncated answer: a failed attempt naming both, not a complete output."""
    server.fail_next(Fault(at_limit=True, finish_reason=stated))
    app, run_id = run_once(tmp_path, server, monkeypatch, model)
    [failed] = failures(app, run_id)
    assert f"finish_reason {stated!r} but used all 400 output tokens" in failed["error"]
    assert failed["usage"]["output_tokens"] == 400
    assert failed["retryable"] is True


def test_counts_the_server_did_not_report_are_called_estimates_in_the_error(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream without usage (llama-cpp-python) cut at the limit says its output tokens are
    an estimate, and the limit it was given, rather than stating a guess as the count."""
    server.state.reply = ["word " * 100]
    server.fail_next(Fault(no_usage=True, finish_reason="length"))
    app, run_id = run_once(tmp_path, server, monkeypatch, "gpt-capped")
    [failed] = failures(app, run_id)
    assert "output limit of 400 tokens (about 125 output tokens, estimated" in failed["error"]
    assert failed["usage"]["estimated"] is True


def test_a_messages_stream_without_usage_is_estimated_not_counted_as_one_token(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Messages stream whose message_delta has no usage (llama-server) counts the text it
    received, marked as an estimate, instead of message_start's placeholder of 1 token."""
    server.state.reply = ["word " * 100]
    server.fail_next(Fault(no_usage=True, finish_reason="max_tokens"))
    app, run_id = run_once(tmp_path, server, monkeypatch, "claude-capped")
    [failed] = failures(app, run_id)
    assert failed["usage"]["output_tokens"] == 125
    assert failed["usage"]["estimated"] is True
    assert "about 125 output tokens, estimated" in failed["error"]


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_a_stream_that_broke_off_records_what_arrived(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """The text streamed before the connection closed was generated and is paid for: the
    failed attempt records its tokens (estimated) and cost."""
    server.state.reply = ["word " * 40] * 4
    server.fail_next(Fault(truncate=True, no_usage=True))
    app, run_id = run_once(tmp_path, server, monkeypatch, model)
    [failed] = failures(app, run_id)
    assert "truncated" in failed["error"]
    assert failed["usage"]["estimated"] is True
    assert failed["usage"]["output_tokens"] == 100  # the two fragments that arrived
    assert failed["usage"]["cost_usd"] > 0


def test_a_stream_that_timed_out_records_what_arrived(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream that stalls past the worker's timeout after its first fragment records that
    fragment's tokens as an estimate."""
    server.state.reply = ["word " * 40, "more"]
    server.fail_next(Fault(stall=5.0))
    project = make_project(tmp_path, server, monkeypatch, CAPPED)
    app = app_for(project)
    flow = one_worker(project, "      model: gpt\n      retries: 0\n      timeout: 0.5\n")
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.FAILED
    [failed] = failures(app, state.run_id)
    assert failed["usage"]["estimated"] is True
    assert failed["usage"]["output_tokens"] == 50


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_an_empty_200_stream_is_not_called_truncated(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """A server that answers 200 and closes the stream before any event generated nothing:
    the error says so, instead of speaking of a partial output."""
    server.fail_next(Fault(empty_stream=True))
    app, run_id = run_once(tmp_path, server, monkeypatch, model)
    [failed] = failures(app, run_id)
    assert "empty event stream" in failed["error"]
    assert "truncated" not in failed["error"] and "partial" not in failed["error"]


def test_a_limit_hit_with_no_max_output_tokens_sent_names_the_servers_own_limit(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`length` when no max_output_tokens was sent is the server's own limit (a context
    window, llama.cpp's --n-predict): raising a setting that was never set is no advice."""
    server.fail_next(Fault(finish_reason="length"))
    app, run_id = run_once(tmp_path, server, monkeypatch, "gpt")
    [failed] = failures(app, run_id)
    assert "No max_output_tokens was sent" in failed["error"]
    assert "Raise max_output_tokens" not in failed["error"]


def test_a_full_context_window_advises_a_shorter_prompt(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anthropic's model_context_window_exceeded speaks of the context window."""
    server.fail_next(Fault(finish_reason="model_context_window_exceeded"))
    app, run_id = run_once(tmp_path, server, monkeypatch, "claude")
    [failed] = failures(app, run_id)
    assert "filled the model's context window" in failed["error"]
    assert "Raise max_output_tokens" not in failed["error"]
