"""Spend caps in runs: the research example on a SQLite ledger, against the fake server,
counts its calls in the ledger and waits past a cap, saying so through the task's
progress, until the cap is raised in interlock.toml."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Interlock, RunStatus
from interlock.providers import spend_guard
from interlock.runtime.orchestrator import Settings
from interlock.storage.spend_sqlite import SQLiteSpend

from .conftest import API_KEY
from .fake_llm_server import FakeServer

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, server: FakeServer, cap: float) -> None:
    """Two priced aliases with output limits on the fake server, under a daily cap."""
    path.write_text(f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_API_KEY"

[models.sonnet]
provider = "local"
model = "gpt-test"
max_output_tokens = 500
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0

[models.opus]
provider = "local"
model = "claude-test"
max_output_tokens = 500
input_price_per_mtok = 15.0
output_price_per_mtok = 75.0

[limits]
max_cost_usd_per_day = {cap}
""")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


@pytest.fixture
def project(tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The research example beside an interlock.toml with a cap."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_API_KEY", API_KEY)
    monkeypatch.setattr(spend_guard, "POLL_S", 0.05)  # a raise is noticed within the test
    # Under the aliases' 500-token limit: a count that reaches it is a truncated answer.
    server.state.output_tokens = 499
    shutil.copy(ROOT / "examples" / "research.json", tmp_path / "research.json")
    yield tmp_path


def daily_spent(ledger: Path) -> float:
    """What the ledger counts against the daily cap today."""
    store = SQLiteSpend(ledger)
    try:
        [usage] = [u for u in store.usage(now=time.time()) if u.cap == "daily"]
        assert usage.holds == 0
        return usage.spent_usd
    finally:
        store.close()


def test_a_run_counts_its_calls_in_the_ledger(project: Path, server: FakeServer) -> None:
    """Under a cap it does not reach, the run delivers and the ledger counts its cost."""
    write_config(project / "interlock.toml", server, 5.0)
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = app.run(project / "research.json", "research", topic="caps")
    assert state.status is RunStatus.DELIVERED
    assert daily_spent(project / "home" / "ledger.db") == pytest.approx(state.cost_usd)


def test_a_call_past_the_cap_waits_and_says_so_until_the_cap_is_raised(
    project: Path, server: FakeServer
) -> None:
    """The synthesizer's call would pass USD 0.06 after the researchers': it waits, its
    progress says which cap and until when, and a raised cap lets the run deliver."""
    config = project / "interlock.toml"
    write_config(config, server, 0.06)
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    said: list[tuple[str, str]] = []
    raised = threading.Event()
    sent: list[int] = []

    def listen(run: str, task: str, text: str) -> None:
        said.append((task, text))
        if "waiting: spend cap" in text and not raised.is_set():
            raised.set()
            sent.append(len(server.state.requests))  # nothing sent while it waits
            write_config(config, server, 1.0)

    app.orchestrator.progress_listeners.append(listen)
    state = app.run(project / "research.json", "research", topic="caps")
    assert state.status is RunStatus.DELIVERED
    waited = "".join(text for task, text in said if task == "synthesizer@1")
    assert "\nwaiting: spend cap 'daily' (USD 0.06) until 00:00 UTC\n" in waited
    assert sent == [2]
    assert len(server.state.requests) == 3
    assert daily_spent(project / "home" / "ledger.db") == pytest.approx(state.cost_usd)


@pytest.mark.parametrize(("pipeline", "held"), [("nightly", False), ("research", True)])
def test_a_cap_scoped_to_a_pipeline_counts_only_that_pipelines_calls(
    project: Path, server: FakeServer, pipeline: str, held: bool
) -> None:
    """A tiny cap scoped to another pipeline lets the research run deliver all three calls;
    scoped to 'research' (with `on_cap = "fail"`), it stops the run's first call."""
    config = project / "interlock.toml"
    write_config(config, server, 5.0)
    text = config.read_text().replace("[limits]\n", '[limits]\non_cap = "fail"\n')
    text += f"""
[[limits.caps]]
name = "scoped"
window = "day"
max_cost_usd = 0.001
scope = {{ pipeline = "{pipeline}" }}
"""
    config.write_text(text)
    app = Interlock(project / "home", settings=Settings(heartbeat=0.05))
    state = app.run(project / "research.json", "research", topic="caps")
    if held:
        assert state.status is RunStatus.FAILED
        assert len(server.state.requests) == 0
    else:
        assert state.status is RunStatus.DELIVERED
        assert len(server.state.requests) == 3
