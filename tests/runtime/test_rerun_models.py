"""Reruns of model pipelines against a local OpenAI-compatible server that counts calls."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

from interlock import Interlock, RunStatus
from interlock.runtime.orchestrator import Settings

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-rerun-0123456789"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server with the two models of the research example."""
    state = FakeState(api_key=KEY, models={"model-s", "model-o"}, reply=["Find", "ings", "."])
    srv = FakeServer(state)
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


@pytest.fixture
def app(project: Path) -> Iterator[Interlock]:
    """An API object on a fresh state directory beside the project."""
    instance = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    yield instance
    instance.close()


def calls(server: FakeServer, since: int) -> list[str]:
    """The models called since request number `since`."""
    return [r.body["model"] for r in server.requests[since:]]


def test_rerun_from_synthesis_makes_one_model_call_not_three(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """The researchers are reused; only the synthesizer calls its model, and pays."""
    first = app.run(project / "research.json", "research", topic="FSA architecture")
    assert first.status is RunStatus.DELIVERED and len(server.requests) == 3
    new = app.rerun(first.run_id, from_phase="synthesis")
    state = app.drive(new)
    assert state.status is RunStatus.DELIVERED
    assert calls(server, 3) == ["model-o"]
    synthesizer = first.tasks["synthesizer@1"]
    assert state.cost_usd == pytest.approx(synthesizer.cost_usd)
    assert state.cost_usd < first.cost_usd
    status = app.status(new)
    assert status["cost_usd"] == pytest.approx(synthesizer.cost_usd, abs=1e-6)
    workers = status["phases"][0]["workers"]
    assert {w["status"] for w in workers.values()} == {"reused"}
    assert status["rerun_of"] == first.run_id


def test_editing_only_the_synthesis_task_makes_one_call(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """`rerun --workflow` with a new synthesis task reruns exactly that worker."""
    first = app.run(project / "research.json", "research", topic="FSA architecture")
    spec = json.loads((project / "research.json").read_text())
    spec["research"]["phases"][1]["workers"][0]["task"] = "Synthesize, in three bullet points"
    edited = project / "edited.json"
    edited.write_text(json.dumps(spec))
    plan = app.plan_rerun(first.run_id, workflow=edited)
    assert [(t.task_id, t.reuse, t.changed) for t in plan.tasks] == [
        ("researcher-a@1", True, []),
        ("researcher-b@1", True, []),
        ("synthesizer@1", False, ["task"]),
    ]
    assert len(server.requests) == 3  # planning called nothing
    state = app.drive(app.rerun(first.run_id, workflow=edited))
    assert state.status is RunStatus.DELIVERED and calls(server, 3) == ["model-o"]
    assert "three bullet points" in server.requests[-1].body["messages"][-1]["content"]


def test_a_changed_model_setting_reruns_the_workers_that_use_it(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """Pointing the alias `sonnet` at another model id reruns both researchers and what reads
    them; the fingerprint follows the resolved model, not the alias."""
    first = app.run(project / "research.json", "research", topic="FSA architecture")
    server.state.models.add("model-s2")
    config = project / "interlock.toml"
    config.write_text(config.read_text().replace('model = "model-s"', 'model = "model-s2"'))
    fresh = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    try:
        plan = fresh.plan_rerun(first.run_id)
        assert [t.reuse for t in plan.tasks] == [False, False, False]
        assert plan.tasks[0].changed == ["worker"] and plan.tasks[2].changed == ["reads"]
    finally:
        fresh.close()


def test_a_second_run_of_a_cached_pipeline_makes_no_model_call(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """With `cache: true` on the pipeline, the same topic again costs nothing and calls
    nothing; its status shows its own cost (zero), not the first run's."""
    spec = json.loads((project / "research.json").read_text())
    spec["research"]["cache"] = {"ttl": "7d"}
    cached = project / "cached.json"
    cached.write_text(json.dumps(spec))
    first = app.run(cached, "research", topic="FSA architecture")
    assert first.status is RunStatus.DELIVERED and len(server.requests) == 3
    second = app.run(cached, "research", topic="FSA architecture")
    assert second.status is RunStatus.DELIVERED and calls(server, 3) == []
    assert first.cost_usd > 0 and second.cost_usd == 0
    assert app.status(second.run_id)["cost_usd"] == 0
    final = app.final_path(second.run_id)
    assert final is not None and final.read_text() == "Findings."


def test_the_plan_needs_no_api_key(
    app: Interlock, project: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys are not part of what a worker is: a shell without the key plans every task as
    reused, and a rerun with nothing to run needs no key at all."""
    first = app.run(project / "research.json", "research", topic="FSA architecture")
    monkeypatch.delenv("FAKE_API_KEY")
    fresh = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    try:
        assert [t.reuse for t in fresh.plan_rerun(first.run_id).tasks] == [True, True, True]
        state = fresh.drive(fresh.rerun(first.run_id))
        assert state.status is RunStatus.DELIVERED and len(server.requests) == 3
    finally:
        fresh.close()
