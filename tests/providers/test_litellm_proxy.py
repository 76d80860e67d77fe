"""Pipelines run through LiteLLM's proxy, on its OpenAI chat-completions route and on its
Anthropic Messages route: answers from `mock_response` models, and faults of the fake server
(a 429 with Retry-After, a 500, a stream cut mid-answer) passed through the proxy.

The proxy runs from its own virtualenv, made by ``tests/providers/litellm/setup.sh`` (CI runs
it before the tests); without it these tests fail, saying how to make it. One proxy serves the
whole module.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Interlock, RunStatus

from .conftest import API_KEY
from .fake_llm_server import FakeServer, FakeState, Fault
from .project import app_for, attempt_usage, one_worker
from .test_tools import MCP

SETUP = Path(__file__).parent / "litellm" / "setup.sh"
# Where litellm/setup.sh builds the proxy's virtualenv (shared by every clone on the machine).
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
ENV = Path(os.environ.get("INTERLOCK_LITELLM_ENV") or CACHE / "interlock" / "litellm-1.106.0")
MASTER_KEY = "sk-proxy-test-0123456789"
MOCK_ANSWER = "The proxy's canned answer."
STARTUP_S = 90.0

PROXY_CONFIG = """
model_list:
  - model_name: mock-model
    litellm_params:
      model: openai/mock-model
      api_key: unused
      mock_response: {mock}
  - model_name: fake-gpt
    litellm_params:
      model: openai/gpt-test
      api_base: {url}/v1
      api_key: {key}
  - model_name: fake-claude
    litellm_params:
      model: anthropic/claude-test
      api_base: {url}
      api_key: {key}
litellm_settings:
  num_retries: 0
  request_timeout: 30
  drop_params: true
router_settings:
  num_retries: 0
  allowed_fails: 1000
general_settings:
  master_key: {master}
"""

INTERLOCK_CONFIG = """
[providers.proxy_openai]
kind = "openai"
base_url = "{proxy}/v1"
api_key_env = "PROXY_KEY"
backoff_base_s = 0.05
max_attempts = 3

[providers.proxy_anthropic]
kind = "anthropic"
base_url = "{proxy}"
api_key_env = "PROXY_KEY"
backoff_base_s = 0.05
max_attempts = 3

[models.mock_oa]
provider = "proxy_openai"
model = "mock-model"

[models.mock_an]
provider = "proxy_anthropic"
model = "mock-model"

[models.fake_oa]
provider = "proxy_openai"
model = "fake-gpt"
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0

[models.fake_an]
provider = "proxy_anthropic"
model = "fake-claude"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeServer]:
    """The fake model server the proxy forwards `fake-gpt` and `fake-claude` to."""
    state = FakeState(api_key=API_KEY, models={"gpt-test", "claude-test"}, reply=[])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        state.stopping.set()
        srv.shutdown()
        srv.server_close()
        thread.join()


@pytest.fixture(scope="module")
def proxy(upstream: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A LiteLLM proxy on 127.0.0.1 (its URL), stopped after the module's tests."""
    litellm = ENV / "bin" / "litellm"
    assert litellm.exists(), (
        f"the LiteLLM proxy is not installed at {ENV}: run {SETUP} (CI does) to create its "
        "virtualenv"
    )
    folder = tmp_path_factory.mktemp("litellm")
    config = folder / "config.yaml"
    config.write_text(
        PROXY_CONFIG.format(
            mock=json.dumps(MOCK_ANSWER), url=upstream.url, key=API_KEY, master=MASTER_KEY
        )
    )
    port = _free_port()
    log = (folder / "proxy.log").open("w")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))},
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
    }
    process = subprocess.Popen(
        [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=folder,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, (
                f"the LiteLLM proxy exited: {(folder / 'proxy.log').read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"the LiteLLM proxy did not listen in {STARTUP_S}s"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
def project(
    tmp_path: Path, proxy: str, upstream: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A folder whose interlock.toml reaches the proxy on both routes; the upstream server
    answers plainly unless a test queues faults."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROXY_KEY", MASTER_KEY)
    (tmp_path / "interlock.toml").write_text(INTERLOCK_CONFIG.format(proxy=proxy))
    with upstream.state.lock:
        upstream.state.faults.clear()
        upstream.state.requests.clear()
    upstream.state.reply = ["Hello", " through", " the", " proxy", "."]
    return tmp_path


def _output(app: Interlock, run_id: str) -> str:
    return (app.run_dir(run_id) / "w.md").read_text()


@pytest.mark.parametrize("model", ["mock_oa", "mock_an"])
def test_a_mock_response_model_answers_a_pipeline_on_both_routes(project: Path, model: str) -> None:
    """The proxy's canned answer becomes the worker's output, with the usage it reports."""
    app = app_for(project)
    state = app.run(one_worker(project, f"      model: {model}\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert _output(app, state.run_id) == MOCK_ANSWER
    usage = attempt_usage(app, state.run_id)[0]
    assert usage["output_tokens"] > 0 and usage["input_tokens"] > 0


@pytest.mark.parametrize("model", ["fake_oa", "fake_an"])
def test_a_forwarded_model_streams_the_upstream_answer_and_its_usage(
    project: Path, upstream: FakeServer, model: str
) -> None:
    """A model the proxy forwards to the fake server delivers its whole answer, with the
    upstream's token counts priced as configured."""
    app = app_for(project)
    state = app.run(one_worker(project, f"      model: {model}\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert _output(app, state.run_id) == "Hello through the proxy."
    usage = attempt_usage(app, state.run_id)[0]
    assert (usage["input_tokens"], usage["output_tokens"]) == (1000, 500)
    assert len(upstream.requests) == 1


def test_a_429_with_retry_after_through_the_openai_route_is_waited_for(
    project: Path, upstream: FakeServer
) -> None:
    """The upstream's 429 and its Retry-After reach interlock through the proxy (as
    ``llm_provider-retry-after``), which waits that long before calling again."""
    upstream.fail_next(Fault(status=429, retry_after="2"))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: fake_oa\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    first, second = upstream.requests
    assert second.at - first.at >= 1.9


def test_a_429_through_the_messages_route_is_retried_with_interlocks_own_backoff(
    project: Path, upstream: FakeServer
) -> None:
    """On its Messages route LiteLLM 1.106 passes the 429 on as a rate_limit_error but
    leaves the upstream's Retry-After out, so the retry waits interlock's own backoff."""
    upstream.fail_next(Fault(status=429, retry_after="2"))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: fake_an\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    first, second = upstream.requests
    assert second.at - first.at < 1.9


@pytest.mark.parametrize("model", ["fake_oa", "fake_an"])
def test_a_500_through_the_proxy_is_retried(
    project: Path, upstream: FakeServer, model: str
) -> None:
    """An upstream 500 comes back through the proxy as a server error that is retried."""
    upstream.fail_next(Fault(status=500))
    app = app_for(project)
    state = app.run(one_worker(project, f"      model: {model}\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert _output(app, state.run_id) == "Hello through the proxy."
    assert len(upstream.requests) == 2


def test_a_stream_cut_mid_answer_through_the_messages_route_is_never_delivered(
    project: Path, upstream: FakeServer
) -> None:
    """An upstream stream cut part-way reaches interlock without its message_stop: the
    attempt fails as truncated and the retry's complete answer is the output."""
    upstream.fail_next(Fault(truncate=True, reset=True))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: fake_an\n      retries: 1\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert _output(app, state.run_id) == "Hello through the proxy."
    failed = [e.data for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert len(failed) == 1 and "truncated" in failed[0]["error"], failed


def test_a_stream_cut_mid_answer_through_the_openai_route_is_hidden_by_the_proxy(
    project: Path, upstream: FakeServer
) -> None:
    """LiteLLM 1.106 ends an upstream chat stream cut part-way as if it had finished
    (finish_reason "stop", a token count of its own), so nothing on the wire tells the cut
    from an answer: the text that arrived is delivered. Pinned so that a proxy release that
    passes the cut on is noticed."""
    upstream.fail_next(Fault(truncate=True, reset=True))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: fake_oa\n      retries: 1\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert _output(app, state.run_id) == "Hello through"
    usage = attempt_usage(app, state.run_id)[0]
    assert (usage["finish_reason"], usage["output_tokens"]) == ("stop", 2)


def test_a_tool_loop_runs_through_the_proxy(project: Path, upstream: FakeServer) -> None:
    """The tools, the model's streamed tool call and the tool's result pass through the
    proxy's chat-completions route both ways, and the loop ends with the upstream's answer.
    (The Messages route's tool shapes are checked against the fake server and the SDK.)"""
    upstream.fail_next(Fault(tool_calls=[("add", {"a": 20, "b": 22})]))
    app = app_for(project)
    tools = f"      tools: [{{mcp: {MCP}}}]\n"
    state = app.run(one_worker(project, f"      model: fake_oa\n{tools}"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert _output(app, state.run_id) == "Hello through the proxy."
    first, second = (r.body for r in upstream.requests)
    assert "add" in [t["function"]["name"] for t in first["tools"]]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "add"
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": second["messages"][-2]["tool_calls"][0]["id"],
        "content": "42",
    }
    assert attempt_usage(app, state.run_id)[0]["turns"] == 2
