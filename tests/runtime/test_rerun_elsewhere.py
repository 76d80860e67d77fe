"""Reruns with a workflow file from elsewhere, against a local model server that counts calls:
the wrong file is refused before anything is paid, the source run's interlock.toml is read,
and the plan names the code file that is missing, as the rerun's refusal does."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

from interlock import Interlock, RunStatus
from interlock.errors import UsageError
from interlock.runtime.orchestrator import Settings

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-elsewhere-0123456789"
TRANSLATE = {
    "translate": {
        "inputs": {"language": "French"},
        "phases": [
            {
                "id": "translate",
                "workers": [
                    {
                        "role": "translator",
                        "model": "sonnet",
                        "final": True,
                        "task": "Translate the topic into {{ language }}.",
                    }
                ],
            }
        ],
    }
}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server that keeps every request it answers."""
    state = FakeState(api_key=KEY, models={"model-s", "model-o"}, reply=["Bon", "jour."])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def project(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """examples/ holding two workflows beside the interlock.toml that points at the server;
    the current directory is another folder, which finds no interlock.toml."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_API_KEY", KEY)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    examples = tmp_path / "examples"
    examples.mkdir()
    shutil.copy(ROOT / "examples" / "research.json", examples / "research.json")
    (examples / "translate.json").write_text(json.dumps(TRANSLATE))
    (examples / "interlock.toml").write_text(f"""
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
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return examples


@pytest.fixture
def app(project: Path) -> Iterator[Interlock]:
    """An API object on a fresh state directory beside the project."""
    instance = Interlock(project.parent / "home", settings=Settings(heartbeat=0.05))
    yield instance
    instance.close()


def test_a_file_without_the_source_runs_pipeline_is_refused_before_any_call(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """Rerunning a `translate` run with research.json (one pipeline, `research`) is refused,
    naming the file's pipelines and --pipeline; nothing is recorded or called."""
    first = app.run(project / "translate.json", "translate", topic="bees")
    assert first.status is RunStatus.DELIVERED and len(server.requests) == 1
    runs = len(app.store.list_runs())
    with pytest.raises(UsageError) as refused:
        app.rerun(first.run_id, workflow=project / "research.json")
    message = refused.value.message
    assert "has no pipeline 'translate'" in message and "its pipelines: research" in message
    assert "--pipeline NAME" in message
    with pytest.raises(UsageError):
        app.plan_rerun(first.run_id, workflow=project / "research.json")
    assert len(server.requests) == 1 and len(app.store.list_runs()) == runs


def test_another_pipeline_on_purpose_names_the_inputs_it_drops(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """With --pipeline research the rerun runs, and says that `language` is left out."""
    first = app.run(project / "translate.json", "translate", topic="bees")
    prepared = app._prepare_rerun(
        first.run_id, workflow=project / "research.json", pipeline="research"
    )
    assert any("does not declare input language" in note for note in prepared.notes)
    plan = app.plan_rerun(first.run_id, workflow=project / "research.json", pipeline="research")
    assert any("language" in note for note in plan.notes)


def test_a_rerun_from_another_folder_reads_the_source_runs_config(
    app: Interlock, project: Path, server: FakeServer, tmp_path: Path
) -> None:
    """An edited copy of the workflow one folder up, beside no interlock.toml: the rerun
    still calls the configured server (not the offline stand-in), says which file it read,
    and its plan says the file differs from what the copy's folder finds."""
    first = app.run(project / "translate.json", "translate", topic="bees")
    assert len(server.requests) == 1
    edited = json.loads(json.dumps(TRANSLATE))
    edited["translate"]["phases"][0]["workers"][0]["task"] += " Be brief."
    copy = tmp_path / "edited.json"
    copy.write_text(json.dumps(edited))
    toml = str(project / "interlock.toml")
    plan = app.plan_rerun(first.run_id, workflow=copy)
    assert plan.config_line == f"config: {toml}"
    assert any(f"as run {first.run_id} did" in note for note in plan.notes), plan.notes
    assert [t.reuse for t in plan.tasks] == [False] and len(server.requests) == 1
    prepared = app._prepare_rerun(first.run_id, workflow=copy)
    assert prepared.config_line == f"config: {toml}"
    state = app.drive(app._start_rerun(prepared))
    assert state.status is RunStatus.DELIVERED
    assert len(server.requests) == 2 and "Be brief." in json.dumps(server.requests[-1].body)
    from interlock.runtime.run_config import recorded_config

    recorded = recorded_config(app.store, state.run_id)
    assert recorded is not None and recorded["files"][0]["path"] == toml


def test_a_config_gone_since_the_source_run_is_said_in_the_plan(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """With the source run's interlock.toml deleted, the plan says it is gone."""
    first = app.run(project / "translate.json", "translate", topic="bees")
    (project / "interlock.toml").unlink()
    later = Interlock(project.parent / "home")  # a later process: nothing read yet
    try:
        plan = later.plan_rerun(first.run_id, from_phase="translate")
    finally:
        later.close()
    assert any("which is gone" in note for note in plan.notes), plan.notes
    assert plan.config_line is not None and "none found" in plan.config_line


REVIEW = """
review:
  phases:
    - id: review
      workers:
        - role: reviewer
          final: true
          command: ["{python}", "{workflow_dir}/scripts/review.py", "{output}"]
"""


def test_the_plan_names_the_script_that_is_missing_not_the_one_the_source_ran(
    app: Interlock, project: Path, tmp_path: Path
) -> None:
    """A copy of the workflow one folder above its scripts: the plan says the script the
    copy would run is not there, as the rerun's own notes do, and not the source's script."""
    (project / "scripts").mkdir()
    script = project / "scripts" / "review.py"
    script.write_text("import sys\nopen(sys.argv[1], 'w').write('ok')\n")
    (project / "review.yaml").write_text(REVIEW)
    first = app.run(project / "review.yaml", "review", topic="t")
    assert first.status is RunStatus.DELIVERED
    copy = tmp_path / "review.yaml"
    copy.write_text(REVIEW)
    missing = tmp_path / "scripts" / "review.py"
    [task] = app.plan_rerun(first.run_id, workflow=copy).tasks
    assert not task.reuse
    assert f"{missing}, which is not there now" in task.why, task.why
    assert f"it ran {script} before" in task.why
    plan = app.plan_rerun(first.run_id, workflow=copy)
    prepared = app._prepare_rerun(first.run_id, workflow=copy)
    expected = [n for n in prepared.notes if str(missing) in n]
    assert expected and expected[0].startswith("worker 'reviewer' runs ")
    assert expected[0] in plan.notes
    runs = len(app.store.list_runs())
    with pytest.raises(UsageError) as refused:  # it would fail there: nothing is recorded
        app.rerun(first.run_id, workflow=copy)
    assert expected[0] in refused.value.message and "nothing was recorded" in refused.value.message
    assert len(app.store.list_runs()) == runs
