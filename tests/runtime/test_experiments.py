"""Experiments against a local OpenAI-wire server that counts calls: a variant's row reuses
every task of its base row whose fingerprint is the same, and pays only for what differs."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

from interlock import Interlock
from interlock.core.batches import RowInputs, RowStatus
from interlock.core.loader import load_workflow
from interlock.runtime.orchestrator import Settings
from interlock.storage.batches import batch_ledger
from interlock.workloads.batches import record_batch
from interlock.workloads.experiments import ExperimentRunner, experiment_of, plans

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-experiment-0123456789"
ROWS = 10


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
    """research.json (two researchers, then a synthesis) and a copy whose synthesis prompt
    differs, beside an interlock.toml that points at the fake server."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_API_KEY", KEY)
    shutil.copy(ROOT / "examples" / "research.json", tmp_path / "research.json")
    edited = json.loads((tmp_path / "research.json").read_text())
    edited["research"]["phases"][1]["workers"][0]["task"] = "Synthesize both, in three bullets"
    (tmp_path / "edited.json").write_text(json.dumps(edited))
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


def test_a_variant_differing_in_its_last_prompt_pays_for_its_synthesis_alone(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """Over N rows of research-3, base and a variant with another synthesis prompt make
    3N + N model calls, not 6N; each variant row reuses both researchers of its base row."""
    base = load_workflow(project / "research.json").get("research")
    edited = load_workflow(project / "edited.json").get("research")
    rows = [RowInputs(number=n, topic=f"topic {n}", inputs={}) for n in range(1, ROWS + 1)]
    record_batch(
        app,
        base,
        rows,
        batch_id="e",
        inputs_file="rows.csv",
        concurrency=4,
        max_cost_usd=None,
        now=time.time(),
        variants=[("edited", edited)],
    )
    group = [b.batch_id for b in experiment_of(app, "e-edited")]
    assert group == ["e", "e-edited"]
    snapshots = asyncio.run(ExperimentRunner(app, group).run())
    assert [s.progress.counts for s in snapshots] == [{RowStatus.DELIVERED: ROWS}] * 2
    assert len(server.requests) == 3 * ROWS + ROWS
    ledger = batch_ledger(app.store)
    for row in ledger.rows("e-edited"):
        result = row.result or {}
        assert result["reused"] == 2  # researcher-a and researcher-b
        assert app.state(row.view.run_id or "").rerun_of == f"e-r{row.view.number}"


def test_the_plan_names_what_a_variant_reuses(app: Interlock, project: Path) -> None:
    """The dry-run plan: the base runs its three tasks, the variant one, reusing two."""
    base = load_workflow(project / "research.json").get("research")
    edited = load_workflow(project / "edited.json").get("research")
    found = plans(app.orchestrator.models, base, [("edited", edited)])
    assert [(p.variant, p.runs, p.reused) for p in found] == [
        ("base", 3, ()),
        ("edited", 1, ("researcher-a", "researcher-b")),
    ]


def test_variant_rows_wait_for_base_rows_cancelled_before_they_started(
    app: Interlock, project: Path, server: FakeServer
) -> None:
    """A base row cancelled before its run started has nothing to reuse: its variant row
    does not run afresh; the drive ends with it waiting, and nothing is called."""
    base = load_workflow(project / "research.json").get("research")
    edited = load_workflow(project / "edited.json").get("research")
    rows = [RowInputs(number=n, topic=f"topic {n}", inputs={}) for n in (1, 2)]
    record_batch(
        app,
        base,
        rows,
        batch_id="c",
        inputs_file="rows.csv",
        concurrency=4,
        max_cost_usd=None,
        now=time.time(),
        variants=[("edited", edited)],
    )
    batch_ledger(app.store).cancel_batch("c", time.time())
    snapshots = asyncio.run(ExperimentRunner(app, ["c", "c-edited"]).run())
    assert [s.progress.counts for s in snapshots] == [
        {RowStatus.CANCELLED: 2},
        {RowStatus.WAITING: 2},
    ]
    assert server.requests == []


def test_fifty_rows_of_an_experiment_make_150_plus_50_calls_not_300(
    project: Path, server: FakeServer
) -> None:
    """The real `interlock experiment` over 50 rows of the research pipeline (two researchers,
    then a synthesis), the variant differing only in the synthesis prompt: the base makes
    150 calls (3 a row), the variant 50 (its synthesis alone), 200 in all, not 300."""
    import os
    import subprocess
    import sys

    rows = 50
    topics = "\n".join(f"topic {n}" for n in range(1, rows + 1))
    (project / "rows.csv").write_text(f"topic\n{topics}\n")
    command = [
        sys.executable, "-m", "interlock", "--home", str(project / "home"), "experiment",
        "research.json", "research", "--inputs", "rows.csv", "--variant", "edited=edited.json",
        "--concurrency", "8", "--batch-id", "x",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=project, env=dict(os.environ), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    prompts = [json.dumps(r.body) for r in server.requests]
    variant = [p for p in prompts if "three bullets" in p]
    assert (len(prompts) - len(variant), len(variant)) == (3 * rows, rows)
    models = [r.body.get("model") for r in server.requests]
    assert (models.count("model-s"), models.count("model-o")) == (2 * rows, 2 * rows)
