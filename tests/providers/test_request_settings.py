"""Request settings from interlock.toml and a worker's `params:`, on both wire formats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.core.loader import parse_workflow
from interlock.errors import WorkflowError
from interlock.providers import ConfigError, ModelConfig

from .fake_llm_server import FakeServer
from .project import app_for, attempt_usage, make_project, one_worker

TUNED = """
[models.gpt-tuned]
provider = "oa"
model = "gpt-test"
temperature = 0.2
top_p = 0.9
seed = 7
stop = "END"
max_output_tokens = 300
reasoning_effort = "high"
extra_body = { metadata = { team = "docs" }, service_tier = "flex" }
headers = { "X-Gateway-Key" = "gw-secret-value-123", "HTTP-Referer" = "https://example.org" }

[models.claude-thinking]
provider = "an"
model = "claude-test"
max_output_tokens = 16000
thinking_budget = 4000
stop = ["###"]
cache_prompt = true
extra_body = { metadata = { user_id = "u-1" } }
"""


def test_alias_settings_and_worker_params_reach_the_openai_wire(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every OpenAI setting is sent as the API names it; params override the alias; the
    attempt records the settings with header names, never their values."""
    server.state.output_tokens = 200  # under the alias's limit of 300
    project = make_project(tmp_path, server, monkeypatch, TUNED)
    flow = one_worker(
        project,
        "      model: gpt-tuned\n      params:\n        temperature: 0.7\n"
        "        headers: {X-Team: writers}\n",
    )
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    sent = server.requests[-1]
    body = sent.body
    assert body["temperature"] == 0.7  # the worker's params win
    assert (body["top_p"], body["seed"], body["stop"]) == (0.9, 7, ["END"])
    assert body["reasoning_effort"] == "high"
    assert body["max_tokens"] == 300
    assert body["metadata"] == {"team": "docs"} and body["service_tier"] == "flex"
    assert sent.headers["x-gateway-key"] == "gw-secret-value-123"
    assert sent.headers["x-team"] == "writers"
    assert sent.headers["authorization"].startswith("Bearer ")
    [usage] = attempt_usage(app, state.run_id)
    assert usage["settings"]["temperature"] == 0.7
    assert usage["settings"]["headers"] == ["HTTP-Referer", "X-Gateway-Key", "X-Team"]
    events = json.dumps([e.data for e in app.events(state.run_id)])
    assert "gw-secret-value-123" not in events


def test_thinking_stop_and_prompt_caching_reach_the_anthropic_wire(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extended thinking with its budget, stop sequences, cache_control on the system prompt
    and the input, and extra_body are sent in the Messages API's own shape."""
    project = make_project(tmp_path, server, monkeypatch, TUNED)
    flow = one_worker(project, "      model: claude-thinking\n      system: Be brief.\n")
    state = app_for(project).run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    body = server.requests[-1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert body["max_tokens"] == 16000
    assert body["stop_sequences"] == ["###"]
    assert body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    [block] = body["messages"][0]["content"]
    assert block["cache_control"] == {"type": "ephemeral"} and "# Task" in block["text"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert "temperature" not in body and "seed" not in body  # unset settings are not sent


def test_a_thinking_budget_above_the_output_limit_fails_without_a_call(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thinking counts as output: a budget at or above max_tokens is refused with the fix."""
    project = make_project(tmp_path, server, monkeypatch, TUNED)
    flow = one_worker(
        project, "      model: claude-thinking\n      params: {thinking_budget: 20000}\n"
    )
    state = app_for(project).run(flow, topic="t")
    assert state.status is RunStatus.FAILED
    assert "thinking_budget (20000) must be below max_output_tokens (16000)" in (
        state.failure or ""
    )
    assert server.requests == []


def test_a_setting_the_provider_cannot_send_is_named_by_check_and_at_run_time(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`seed` and `temperature` on an Anthropic model: check names the worker, model and
    settings (exit 2), and a run fails the attempt without calling the server."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      model: claude\n      params: {seed: 3, temperature: 0}\n")
    checked = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(project / "home"), "check", str(flow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert (
        "worker 'w': model 'claude' (provider 'an'): "
        "the anthropic wire format does not support 'temperature', 'seed'" in checked.stderr
    )
    state = app_for(project).run(flow, topic="t")
    assert state.status is RunStatus.FAILED
    assert "does not support 'temperature', 'seed'" in (state.failure or "")
    assert server.requests == []


def test_unknown_settings_are_errors_with_a_suggestion(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in interlock.toml or in params is refused, naming the closest setting."""
    project = make_project(
        tmp_path, server, monkeypatch, '\n[models.x]\nprovider = "oa"\ntemprature = 0.1\n'
    )
    with pytest.raises(
        ConfigError, match=r"\[models.x\].*'temprature' \(did you mean 'temperature'\?\)"
    ):
        ModelConfig.load([project])
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(
            "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
            "      model: m\n      params: {reasoning_efort: high}\n"
        )
    assert (
        "worker 'w', key 'params': unknown setting 'reasoning_efort' "
        "(did you mean 'reasoning_effort'?)" in str(caught.value)
    )


def test_params_on_a_command_worker_are_refused() -> None:
    """`params` shape model calls only: a command worker with them is a workflow error."""
    with pytest.raises(WorkflowError, match="'params' only applies to 'model' workers"):
        parse_workflow(
            "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
            "      command: [echo]\n      params: {temperature: 1}\n"
        )


def test_the_resolved_identity_changes_with_settings_but_never_shows_header_values(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The identity a fingerprint hashes is JSON, moves with each setting, and holds a
    header's hash instead of its value."""
    project = make_project(tmp_path, server, monkeypatch, TUNED)
    config = ModelConfig.load([project])
    plain = config.resolve("gpt").identity()
    assert "settings" not in plain  # unchanged for an alias without settings
    tuned = config.resolve("gpt-tuned")
    identity = tuned.identity()
    text = json.dumps(identity, sort_keys=True)
    assert "gw-secret-value-123" not in text and "X-Gateway-Key" in text
    assert identity["settings"]["temperature"] == 0.2
    workflow = parse_workflow(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        "      model: gpt-tuned\n      params: {temperature: 0.3}\n"
    )
    params = workflow.get("p").pipeline.worker("w").params
    assert tuned.with_params(params).identity()["settings"]["temperature"] == 0.3
    assert tuned.with_params(params).identity() != identity


def test_a_key_sent_in_a_configured_header_is_masked_in_failures(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway key given as a header, echoed back by the server in an error, never
    reaches the ledger: configured header values are masked like API keys."""
    from .fake_llm_server import Fault

    phrase = "correct-horse-battery-staple"  # nothing about it looks like a key
    gateway = f"""
[providers.gw]
kind = "anthropic"
base_url = "{server.url}"
max_attempts = 1

[models.via-gateway]
provider = "gw"
model = "claude-test"
headers = {{ x-api-key = "{phrase}" }}
"""
    project = make_project(tmp_path, server, monkeypatch, gateway)
    server.fail_next(Fault(echo="text"))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: via-gateway\n"), topic="t")
    assert state.status is RunStatus.FAILED
    assert server.requests[0].headers["x-api-key"] == phrase
    recorded = json.dumps([e.data for e in app.events(state.run_id)]) + (state.failure or "")
    assert "upstream refused" in recorded
    assert phrase not in recorded
