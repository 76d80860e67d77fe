"""Usage as providers report it (cached, cache-write, reasoning tokens) and what it costs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.providers import ModelConfig

from .fake_llm_server import FakeServer
from .project import app_for, attempt_usage, make_project, one_worker

PRICED = """
[models.claude-cached]
provider = "an"
model = "claude-test"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
cache_read_price_per_mtok = 0.3
cache_write_price_per_mtok = 3.75
{stream}

[models.gpt-reasoning]
provider = "oa"
model = "gpt-test"
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0
cache_read_price_per_mtok = 0.5
{stream}
"""


@pytest.mark.parametrize("stream", ["", "stream = false"])
def test_cached_anthropic_tokens_are_recorded_apart_and_priced_at_the_cache_rates(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, stream: str
) -> None:
    """100,000 tokens read from the cache cost 0.3 per million, not the input price, and
    the attempt records them apart from the 1,000 uncached and 2,000 cache-written ones."""
    server.state.usage_extra = {
        "cache_read_input_tokens": 100_000,
        "cache_creation_input_tokens": 2_000,
    }
    project = make_project(tmp_path, server, monkeypatch, PRICED.format(stream=stream))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: claude-cached\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    [usage] = attempt_usage(app, state.run_id)
    assert usage["input_tokens"] == 103_000
    assert (usage["cache_read_tokens"], usage["cache_write_tokens"]) == (100_000, 2_000)
    expected = (1_000 * 3.0 + 100_000 * 0.3 + 2_000 * 3.75 + 500 * 15.0) / 1e6
    assert usage["cost_usd"] == pytest.approx(expected)
    assert state.cost_usd == pytest.approx(expected)


@pytest.mark.parametrize("stream", ["", "stream = false"])
def test_openai_cached_and_reasoning_tokens_are_recorded_and_priced(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, stream: str
) -> None:
    """OpenAI's cached prompt tokens and reasoning tokens are parts of the totals: recorded
    apart, the cached ones at the cache price, reasoning at the output price."""
    server.state.usage_extra = {
        "prompt_tokens_details": {"cached_tokens": 800},
        "completion_tokens_details": {"reasoning_tokens": 200},
    }
    project = make_project(tmp_path, server, monkeypatch, PRICED.format(stream=stream))
    app = app_for(project)
    state = app.run(one_worker(project, "      model: gpt-reasoning\n"), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    [usage] = attempt_usage(app, state.run_id)
    assert (usage["input_tokens"], usage["output_tokens"]) == (1_000, 500)
    assert (usage["cache_read_tokens"], usage["reasoning_tokens"]) == (800, 200)
    assert "cache_write_tokens" not in usage
    expected = (200 * 2.0 + 800 * 0.5 + 300 * 8.0 + 200 * 8.0) / 1e6
    assert usage["cost_usd"] == pytest.approx(expected)
    assert usage["finish_reason"] == "stop"


def test_known_models_get_default_prices_and_interlock_toml_wins_field_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A public Anthropic model is priced from the bundled table (offline); a model on a
    local server is not priced by its name; a price in interlock.toml overrides one field."""
    monkeypatch.delenv("INTERLOCK_CONFIG", raising=False)
    monkeypatch.delenv("INTERLOCK_MODELS", raising=False)
    (tmp_path / "interlock.toml").write_text(
        """
[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5"

[models.cheap-sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5"
input_price_per_mtok = 1.0

[models.local]
provider = "ollama"
model = "gpt-4o"
"""
    )
    config = ModelConfig.load([tmp_path])
    sonnet = config.resolve("sonnet")
    assert (sonnet.input_price_per_mtok, sonnet.output_price_per_mtok) == (3.0, 15.0)
    assert sonnet.cache_read_price_per_mtok == pytest.approx(0.3)
    assert sonnet.price_source == "genai-prices"
    cheap = config.resolve("cheap-sonnet")
    assert (cheap.input_price_per_mtok, cheap.output_price_per_mtok) == (1.0, 15.0)
    assert cheap.price_source == "interlock.toml+genai-prices"
    local = config.resolve("local")
    assert (local.input_price_per_mtok, local.price_source) == (0.0, "")
    # 100,000 cached tokens of 101,000 cost about a tenth of the uncached price
    cached = sonnet.cost_usd(101_000, 0, cache_read_tokens=100_000)
    assert cached == pytest.approx((1_000 * 3.0 + 100_000 * 0.3) / 1e6)


def test_check_warns_when_a_budgeted_pipeline_uses_a_model_without_a_price(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cost budget cannot stop calls that cost $0: check says which model has no price."""
    project = make_project(
        tmp_path, server, monkeypatch, '\n[models.free]\nprovider = "oa"\nmodel = "gpt-test"\n'
    )
    flow = project / "budget.yaml"
    flow.write_text(
        "p:\n  budget: {max_cost_usd: 5}\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, final: true, model: free, fallback_models: [gpt]}\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(project / "home"), "check", str(flow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    warning = " ".join(checked.stderr.split())
    assert "model 'free' has no known price: set input_price_per_mtok" in warning
    assert warning.count("no known price") == 1  # said once, not as a warning and again
    # priced in interlock.toml: never said to have no price
    assert "model 'gpt' (" not in warning and "'gpt' has no known price" not in warning
    assert "partly explored" not in checked.stdout


def test_run_and_status_say_which_calls_the_cost_leaves_out(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model with no known price shows as `+ unpriced` in its worker's cost, and the run's
    cost and the end of `interlock run` name it with the fix; priced workers are unmarked."""
    project = make_project(
        tmp_path, server, monkeypatch, '\n[models.free]\nprovider = "oa"\nmodel = "gpt-test"\n'
    )
    flow = project / "two.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: x, model: free}\n"
        "    - {role: y, model: gpt}\n  - id: b\n    workers:\n"
        "    - {role: z, final: true, model: gpt, reads: [x.md, y.md]}\n"
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        home = ("--home", str(project / "home"))
        done = subprocess.run(
            [sys.executable, "-m", "interlock", *home, *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        return done

    ran = cli("run", str(flow), "p", "--topic", "t")
    assert ran.returncode == 0, ran.stderr
    note = (
        "note: the cost leaves out the calls to model 'free': no price is known for it, so "
        "they count $0 (and budgets do not see them); set input_price_per_mtok and "
        "output_price_per_mtok in [models.free] of interlock.toml (0 for a free model)"
    )
    assert note in ran.stderr
    run_id = next(line.split()[1] for line in ran.stderr.splitlines() if line.startswith("run "))
    status = cli("status", run_id)
    rows = {  # worker -> its row in the table
        line.split()[line.split().index("completed") - 1]: line
        for line in status.stdout.splitlines()
        if "completed" in line.split()
    }
    assert "+ unpriced" in rows["x"]
    assert "+ unpriced" not in rows["y"] and "+ unpriced" not in rows["z"]
    assert note in " ".join(status.stdout.split())
