"""Model workers end to end: the research example against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState, Fault

from interlock import Interlock, RunStatus
from interlock.runtime.orchestrator import Settings

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-e2e-0123456789"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server with two models."""
    state = FakeState(api_key=KEY, models={"model-s", "model-o"}, reply=["Find", "ings", "."])
    srv = FakeServer(state)
    import threading

    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def project(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The research example beside an interlock.toml that points at the fake server."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_API_KEY", KEY)
    shutil.copy(ROOT / "examples" / "research.json", tmp_path / "research.json")
    (tmp_path / "interlock.toml").write_text(f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_API_KEY"
backoff_base_s = 0.01

[models.sonnet]
provider = "local"
model = "model-s"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0

[models.opus]
provider = "local"
model = "model-o"
input_price_per_mtok = 15.0
output_price_per_mtok = 75.0
""")
    return tmp_path


def test_research_runs_against_an_openai_compatible_server(
    project: Path, server: FakeServer
) -> None:
    """The seed pipeline calls the configured models, streams progress and records cost."""
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    tokens: list[tuple[str, str]] = []
    app.orchestrator.progress_listeners.append(lambda run, task, text: tokens.append((task, text)))
    state = app.run(project / "research.json", "research", topic="FSA architecture")
    assert state.status is RunStatus.DELIVERED
    assert not state.warnings  # configured: the offline stand-in was not used
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "Findings."
    assert {task for task, _ in tokens} == {"researcher-a@1", "researcher-b@1", "synthesizer@1"}
    requests = server.requests
    assert [r.body["model"] for r in requests].count("model-s") == 2
    assert requests[-1].headers["authorization"] == f"Bearer {KEY}"
    synthesis = requests[-1].body["messages"][-1]["content"]
    assert "researcher-a.md" in synthesis and "FSA architecture" in synthesis
    # 1000 input and 500 output tokens per call at the aliases' prices
    expected = 2 * (1000 * 3.0 + 500 * 15.0) / 1e6 + (1000 * 15.0 + 500 * 75.0) / 1e6
    assert state.cost_usd == pytest.approx(expected)
    assert state.tokens == 3 * 1500
    usage = [e.data["usage"] for e in app.events(state.run_id) if e.kind == "task_completed"]
    assert {u["provider"] for u in usage} == {"openai"} or all(u["model"] for u in usage)
    listed = app.store.list_runs()[0].summary
    assert listed.cost_usd == pytest.approx(expected)
    prompt = (app.run_dir(state.run_id) / "prompts" / "synthesizer@1.1.md").read_text()
    assert "researcher-b.md" in prompt
    assert KEY not in json.dumps([e.data for e in app.events(state.run_id)])
    assert state.unpriced == () and not any("unpriced" in u for u in usage)


def test_calls_to_a_model_with_no_known_price_are_marked_not_counted_as_free(
    project: Path, server: FakeServer
) -> None:
    """A model with no price (a proxy's or a fine-tune's name) counts $0, and every place
    that shows the cost says which calls it leaves out; a cost budget is warned at once."""
    config = project / "interlock.toml"
    text = config.read_text().replace(
        "input_price_per_mtok = 15.0\noutput_price_per_mtok = 75.0\n", ""
    )
    config.write_text(text)
    workflow = json.loads((project / "research.json").read_text())
    workflow["research"]["budget"] = {"max_cost_usd": 1.0}
    (project / "research.json").write_text(json.dumps(workflow))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = app.run(project / "research.json", "research", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert state.unpriced == ("opus",)
    assert state.cost_usd == pytest.approx(2 * (1000 * 3.0 + 500 * 15.0) / 1e6)  # sonnet's
    assert [w for w in state.warnings if "budget" in w] == [
        "the budget's max_cost_usd cannot see the calls to model 'opus': no price is known "
        "for it, so they count $0; set input_price_per_mtok and output_price_per_mtok in "
        "[models.opus] of interlock.toml"
    ]
    usage = {
        e.data["task_id"]: e.data["usage"]
        for e in app.events(state.run_id)
        if e.kind == "task_completed"
    }
    assert usage["synthesizer@1"]["unpriced"] is True
    assert "unpriced" not in usage["researcher-a@1"]
    status = json.loads((app.run_dir(state.run_id) / "status.json").read_text())
    assert status["unpriced_models"] == ["opus"]
    synthesis = status["phases"][-1]["workers"]["synthesizer"]
    assert synthesis["unpriced"] is True
    assert "unpriced" not in status["phases"][0]["workers"]["researcher-a"]

    from interlock.cli.foreground import spent_line

    line = spent_line(state)
    assert "note: the cost leaves out the calls to model 'opus'" in line
    assert "set input_price_per_mtok and output_price_per_mtok in [models.opus]" in line


def test_server_errors_are_retried_then_succeed(project: Path, server: FakeServer) -> None:
    """A 429 with Retry-After and a 500 are retried inside the call; the run still delivers."""
    server.fail_next(Fault(status=429, retry_after="0"), Fault(status=500))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = app.run(project / "research.json", "research", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert len(server.requests) == 5


def test_invalid_key_fails_the_task_at_once(
    project: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 is not retried: the task fails with the provider's message, never the key."""
    monkeypatch.setenv("FAKE_API_KEY", "sk-wrong-key-000000")
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = app.run(project / "research.json", "research", topic="t")
    assert state.status is RunStatus.FAILED
    assert "sk-wrong-key" not in (state.failure or "")
    assert len(server.requests) == 1 or len(server.requests) == 2  # both researchers start


def test_fallback_model_is_tried_after_the_models_own_retries(
    project: Path, server: FakeServer
) -> None:
    """An unknown model fails for good, and the next fallback model is called and recorded."""
    flow = project / "fallback.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        "      model: ghost\n      fallback_models: [sonnet]\n      retries: 1\n"
    )
    with (project / "interlock.toml").open("a") as config:
        config.write('\n[models.ghost]\nprovider = "local"\nmodel = "no-such-model"\n')
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED
    rules = [e.rule for e in app.events(state.run_id) if e.kind == "retry_scheduled"]
    assert rules == ["fallback"]
    assert [r.body["model"] for r in server.requests] == ["no-such-model", "model-s"]


def test_interrupted_stream_is_a_retryable_failure(project: Path, server: FakeServer) -> None:
    """A stream cut off half-way never becomes output; the worker's retry delivers."""
    flow = project / "one.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        "      model: sonnet\n      retries: 1\n      backoff: {initial: 0.01}\n"
    )
    server.fail_next(Fault(truncate=True))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = asyncio.run(_run(app, flow))
    assert state.status is RunStatus.DELIVERED
    failed = [e for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert len(failed) == 1
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "Findings."


async def _run(app: Interlock, flow: Path):
    run_id = app.start(flow, topic="t")
    await app.drive_async(run_id)
    return app.state(run_id)


def _one_worker(project: Path, extra: str = "", fallback: bool = False) -> Path:
    """A one-worker pipeline on `sonnet` with one retry (and `opus` as fallback if asked)."""
    flow = project / "single.yaml"
    more = "      fallback_models: [opus]\n" if fallback else ""
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        "      model: sonnet\n      retries: 1\n      backoff: {initial: 0.01}\n" + more + extra
    )
    return flow


def _failures(app: Interlock, run_id: str) -> list[dict[str, object]]:
    return [e.data for e in app.events(run_id) if e.kind == "task_failed"]


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_an_empty_completion_is_a_failed_attempt_that_is_retried(
    project: Path, server: FakeServer, wire: str
) -> None:
    """An empty answer (on either wire format) fails the attempt, costs what the server
    billed, and the worker's retry delivers a real answer."""
    if wire == "anthropic":
        _use_anthropic(project, server)
    server.fail_next(Fault(empty=True))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = asyncio.run(_run(app, _one_worker(project)))
    assert state.status is RunStatus.DELIVERED
    (failed,) = _failures(app, state.run_id)
    assert "empty completion" in str(failed["error"]) and failed["retryable"] is True
    assert (app.run_dir(state.run_id) / "final.md").read_text() == "Findings."
    one_call = (1000 * 3.0 + 500 * 15.0) / 1e6
    assert failed["usage"]["cost_usd"] == pytest.approx(one_call)  # type: ignore[index]
    assert state.cost_usd == pytest.approx(2 * one_call)  # recorded spend == real spend


@pytest.mark.parametrize(
    ("wire", "reason"),
    [("openai", "length"), ("anthropic", "max_tokens")],
)
def test_a_truncated_answer_fails_unless_the_worker_accepts_it(
    project: Path, server: FakeServer, wire: str, reason: str
) -> None:
    """finish_reason length / stop_reason max_tokens fails the attempt saying it was
    truncated; with accept_truncated the same answer is delivered."""
    if wire == "anthropic":
        _use_anthropic(project, server)
    server.fail_next(Fault(finish_reason=reason), Fault(finish_reason=reason))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = asyncio.run(_run(app, _one_worker(project)))
    assert state.status is RunStatus.FAILED
    errors = [str(f["error"]) for f in _failures(app, state.run_id)]
    assert len(errors) == 2 and all(f"finish_reason {reason!r}" in e for e in errors)
    assert all("truncated" in e and "accept_truncated" in e for e in errors)
    assert state.cost_usd > 0  # both answered calls are paid for
    server.fail_next(Fault(finish_reason=reason))
    accepting = _one_worker(project, "      accept_truncated: true\n")
    state = asyncio.run(_run(app, accepting))
    assert state.status is RunStatus.DELIVERED
    assert not _failures(app, state.run_id)


@pytest.mark.parametrize(
    ("wire", "reason"),
    [("openai", "content_filter"), ("anthropic", "refusal")],
)
def test_a_filtered_answer_goes_to_the_fallback_model(
    project: Path, server: FakeServer, wire: str, reason: str
) -> None:
    """A content-filtered answer fails for that model, saying so, and the fallback answers."""
    if wire == "anthropic":
        _use_anthropic(project, server)
    server.fail_next(Fault(finish_reason=reason))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = asyncio.run(_run(app, _one_worker(project, fallback=True)))
    assert state.status is RunStatus.DELIVERED
    (failed,) = _failures(app, state.run_id)
    assert "content filter" in str(failed["error"]) and failed["retryable"] is False
    rules = [e.rule for e in app.events(state.run_id) if e.kind == "retry_scheduled"]
    assert rules == ["fallback"]


@pytest.mark.parametrize("header", ["Retry-After", "llm_provider-retry-after"])
def test_the_engine_retry_waits_for_a_long_retry_after(
    project: Path, server: FakeServer, header: str
) -> None:
    """A Retry-After longer than the provider sleeps ends the call; the engine's retry is
    scheduled no sooner than the server asked (also when LiteLLM relays the header)."""
    text = (project / "interlock.toml").read_text()
    (project / "interlock.toml").write_text(
        text.replace("backoff_base_s = 0.01", "backoff_base_s = 0.01\nmax_retry_after_s = 0.2")
    )
    server.fail_next(Fault(status=429, retry_after="1.5", retry_after_header=header))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = asyncio.run(_run(app, _one_worker(project)))
    assert state.status is RunStatus.DELIVERED
    events = list(app.events(state.run_id))
    failed = next(e for e in events if e.kind == "task_failed")
    assert failed.data["retry_after"] == pytest.approx(1.5)
    assert "asked to wait 1.5s (until" in failed.data["error"]
    scheduled = next(e for e in events if e.kind == "retry_scheduled")
    assert scheduled.data["not_before"] >= failed.data["at"] + 1.5
    second = [e for e in events if e.kind == "task_dispatched"][1]
    assert second.data["at"] >= failed.data["at"] + 1.5


def _use_anthropic(project: Path, server: FakeServer) -> None:
    """Point `sonnet` and `opus` at the fake server's Messages API instead."""
    text = (project / "interlock.toml").read_text()
    text = text.replace('kind = "openai"', 'kind = "anthropic"')
    text = text.replace(f'base_url = "{server.url}/v1"', f'base_url = "{server.url}"')
    (project / "interlock.toml").write_text(text)
    server.state.models.update({"model-s", "model-o"})
    assert "/v1/messages" not in [r.path for r in server.requests]


SIBLINGS = (
    "p:\n  phases:\n  - id: a\n    workers:\n"
    "    - {{role: doomed, command: {doomed}, retries: 0}}\n"
    "    - {{role: sibling, model: sonnet}}\n"
    "  - id: b\n    workers:\n    - {{role: last, model: sonnet, final: true}}\n"
)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_sibling_answered_when_another_fails_for_good_is_finished_and_kept(
    project: Path, server: FakeServer, wire: str
) -> None:
    """When one worker fails for good while its parallel sibling is being answered, the
    run waits for the answer before it fails: the sibling's output and spend are recorded,
    nothing else starts, and a rerun with the failing worker fixed reuses the answer
    instead of paying for it again."""
    if wire == "anthropic":
        _use_anthropic(project, server)
    # The doomed worker fails for good a second in, while the sibling's answer streams and
    # stalls for three seconds.
    doomed = f"[{sys.executable!r}, '-c', 'import time; time.sleep(1); raise SystemExit(1)']"
    flow = project / "siblings.yaml"
    flow.write_text(SIBLINGS.format(doomed=doomed))
    server.fail_next(Fault(stall=3.0))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = asyncio.run(_run(app, flow))
    assert state.status is RunStatus.FAILED and "doomed" in (state.failure or "")
    events = list(app.events(state.run_id))
    kinds = [e.kind for e in events]
    assert kinds.index("task_failed") < kinds.index("task_completed") < kinds.index("run_failed")
    sibling = state.tasks["sibling@1"]
    assert sibling.status.value == "completed" and sibling.cost_usd > 0
    assert "last@1" not in state.tasks  # nothing after the failure started
    assert state.cost_usd == pytest.approx(sibling.cost_usd)
    calls = len(server.requests)
    fixed = project / "fixed.yaml"
    fixed.write_text(SIBLINGS.format(doomed='["sh", "-c", "echo ok > {output}"]'))
    rerun = app.rerun(state.run_id, workflow=fixed)
    asyncio.run(app.drive_async(rerun))
    again = app.state(rerun)
    assert again.status is RunStatus.DELIVERED
    assert again.tasks["sibling@1"].reused_from == f"{state.run_id}/sibling@1"
    assert len(server.requests) == calls + 1  # only `last` was called


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_sibling_stopped_mid_answer_is_paid_for(
    project: Path, server: FakeServer, wire: str
) -> None:
    """A run cancelled while a worker is being answered stops the call, and its spend (the
    input the server reported or the prompt, and the text received) is recorded, in the
    ledger, the run's cost and its listing."""
    if wire == "anthropic":
        _use_anthropic(project, server)
    slow = f"[{sys.executable!r}, '-c', 'import time; time.sleep(30)']"
    flow = project / "siblings.yaml"
    flow.write_text(SIBLINGS.format(doomed=slow))
    server.fail_next(Fault(stall=30.0))
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))

    async def cancel_mid_answer() -> None:
        run_id = app.start(flow, topic="t")
        driving = asyncio.ensure_future(app.drive_async(run_id))
        for _ in range(400):  # the answer's first bytes, then the stall
            await asyncio.sleep(0.05)
            if server.requests and server.state.in_flight:
                break
        await asyncio.sleep(1.0)
        app.cancel(run_id, "enough")
        await driving

    asyncio.run(cancel_mid_answer())
    [record] = app.store.list_runs()
    state = app.state(record.run_id)
    assert state.status is RunStatus.CANCELLED
    events = list(app.events(state.run_id))
    (late,) = [e for e in events if e.kind == "usage_recorded"]
    assert late.data["task_id"] == "sibling@1"
    usage = late.data["usage"]
    assert usage["output_tokens"] > 0 and usage["cost_usd"] > 0
    if wire == "anthropic":
        assert usage["input_tokens"] == 1000  # as the server reported at message_start
    assert state.cost_usd == pytest.approx(usage["cost_usd"])
    assert state.tasks["sibling@1"].cost_usd == pytest.approx(usage["cost_usd"])
    assert app.store.list_runs()[0].summary.cost_usd == pytest.approx(usage["cost_usd"])
