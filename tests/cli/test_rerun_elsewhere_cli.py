"""`interlock rerun --workflow` with a file from elsewhere, against a local model server that
counts calls: the wrong pipeline is refused with exit 2 and nothing paid, and a copy in
another folder reads the source run's interlock.toml and says so."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-rerun-cli-0123456789"
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


def test_rerun_refuses_the_wrong_file_and_reads_the_source_runs_config(
    tmp_path: Path, server: FakeServer, cli_env: dict[str, str]
) -> None:
    """research.json for a `translate` run: exit 2 naming --pipeline, no call. An edited copy
    in the folder above the config: the dry run and the rerun print the source's config
    line, and the rerun calls the server rather than the offline stand-in."""
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "translate.json").write_text(json.dumps(TRANSLATE))
    (examples / "research.json").write_text((ROOT / "examples" / "research.json").read_text())
    toml = examples / "interlock.toml"
    toml.write_text(f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_API_KEY"

[models.sonnet]
provider = "local"
model = "model-s"

[models.opus]
provider = "local"
model = "model-o"
""")
    env = {**cli_env, "FAKE_API_KEY": KEY}

    def interlock(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr, result.stderr
        return result

    first = interlock("run", "examples/translate.json", "translate", "--topic", "bees")
    assert first.returncode == 0, first.stderr
    run_id = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("run "))
    assert len(server.requests) == 1

    wrong = interlock("rerun", run_id, "--workflow", "examples/research.json")
    assert wrong.returncode == 2, wrong.stderr
    assert "has no pipeline 'translate'" in wrong.stderr and "--pipeline NAME" in wrong.stderr
    assert len(server.requests) == 1

    edited = json.loads(json.dumps(TRANSLATE))
    edited["translate"]["phases"][0]["workers"][0]["task"] += " Be brief."
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    plan = interlock("rerun", run_id, "--workflow", "edited.json", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"config: {toml}" in plan.stdout and f"as run {run_id} did" in plan.stdout
    again = interlock("rerun", run_id, "--workflow", "edited.json")
    assert again.returncode == 0, again.stderr
    assert f"config: {toml}" in again.stderr
    assert len(server.requests) == 2
