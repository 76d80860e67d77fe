"""Batches and experiments driven on a PostgreSQL store share their providers' rate limits
with every process on that database, as `interlock run` does."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

KEY = "test-key-0123456789"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server on 127.0.0.1."""
    state = FakeState(api_key=KEY, models={"gpt-test"}, reply=["Hello", "."])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()
    thread.join()


def _folder(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "interlock.toml").write_text(
        f"""
[providers.fake]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_KEY"
requests_per_minute = 600

[models.m]
provider = "fake"
model = "gpt-test"
"""
    )
    (tmp_path / "wf.yaml").write_text(
        "ask:\n  phases:\n    - id: answer\n      workers:\n"
        '        - {role: answerer, final: true, model: m, task: "Answer about {{ topic }}"}\n'
    )
    (tmp_path / "rows.csv").write_text("topic\nfirst\nsecond\n")
    (tmp_path / "other.yaml").write_text((tmp_path / "wf.yaml").read_text())


def _interlock(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env.update(INTERLOCK_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    env["FAKE_KEY"] = KEY
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _buckets(pg_database: str) -> list[str]:
    with psycopg.connect(pg_database) as db:
        exists = db.execute("SELECT to_regclass('rate_buckets')").fetchone()
        if exists is None or exists[0] is None:
            return []
        return [str(row[0]) for row in db.execute("SELECT name FROM rate_buckets")]


def test_a_batch_on_postgresql_keeps_its_rate_buckets_in_the_database(
    pg_database: str, server: FakeServer, tmp_path: Path
) -> None:
    """`interlock --store postgresql://... batch` counts its calls in `rate_buckets`, where
    another process on the database sees them."""
    _folder(tmp_path, server)
    _interlock(tmp_path, "--store", pg_database, "batch", "wf.yaml", "--inputs", "rows.csv")
    assert _buckets(pg_database)


def test_an_experiment_on_postgresql_keeps_its_rate_buckets_in_the_database(
    pg_database: str, server: FakeServer, tmp_path: Path
) -> None:
    """`interlock --store postgresql://... experiment` shares its limits the same way."""
    _folder(tmp_path, server)
    _interlock(
        tmp_path, "--store", pg_database, "experiment", "wf.yaml", "ask",
        "--inputs", "rows.csv", "--variant", "other=other.yaml",
    )  # fmt: skip
    assert _buckets(pg_database)
