"""A pipeline project against the fake server: an interlock.toml for both wire formats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interlock import Interlock
from interlock.runtime.orchestrator import Settings

from .conftest import API_KEY
from .fake_llm_server import FakeServer

CONFIG = """
[providers.oa]
kind = "openai"
base_url = "{url}/v1"
api_key_env = "FAKE_KEY"
backoff_base_s = 0.01

[providers.an]
kind = "anthropic"
base_url = "{url}"
api_key_env = "FAKE_KEY"
backoff_base_s = 0.01

[models.gpt]
provider = "oa"
model = "gpt-test"
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0

[models.claude]
provider = "an"
model = "claude-test"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
"""


def make_project(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, extra: str = ""
) -> Path:
    """A folder with an interlock.toml naming the aliases `gpt` and `claude` (+ `extra`)."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_KEY", API_KEY)
    (tmp_path / "interlock.toml").write_text(CONFIG.format(url=server.url) + extra)
    return tmp_path


def one_worker(project: Path, worker: str, name: str = "flow.yaml") -> Path:
    """A one-phase pipeline `p` whose only worker is `worker` (YAML lines, indented 6)."""
    flow = project / name
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n" + worker
    )
    return flow


def app_for(project: Path) -> Interlock:
    """An interlock whose state lives in the project."""
    return Interlock(project / "home", settings=Settings(heartbeat=0.05))


def attempt_usage(app: Interlock, run_id: str) -> list[dict[str, Any]]:
    """The usage recorded with each finished attempt, in order."""
    kinds = ("task_completed", "task_failed")
    return [e.data["usage"] for e in app.events(run_id) if e.kind in kinds and e.data.get("usage")]
