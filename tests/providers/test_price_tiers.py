"""Prices of the tier a request is sent at: genai-prices' flex, priority and batch prices
and long-context rates (its real, bundled data), `[prices.<model>]` tables of
interlock.toml for what it does not know, and the request's own `service_tier` priced."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from interlock.core.params import RequestSettings
from interlock.providers import ConfigError, ModelConfig, OpenAIChatProvider, Secret

from .conftest import API_KEY, RecordingSleep
from .fake_llm_server import FakeServer
from .helpers import endpoint, request

OPENAI = """
[models.five]
provider = "openai"
model = "gpt-5"

[models.five-flex]
provider = "openai"
model = "gpt-5"
extra_body = { service_tier = "flex" }

[models.long]
provider = "openai"
model = "gpt-5.4"
"""


def load(tmp_path: Path, text: str) -> ModelConfig:
    """The configuration of one interlock.toml holding `text`."""
    (tmp_path / "interlock.toml").write_text(text)
    return ModelConfig.load([tmp_path], env={})


def test_a_flex_alias_is_priced_at_the_flex_rates(tmp_path: Path) -> None:
    """`service_tier = "flex"` is charged genai-prices' flex price, half the standard one
    for gpt-5, not the standard price."""
    config = load(tmp_path, OPENAI)
    standard, flex = config.resolve("five"), config.resolve("five-flex")
    assert (standard.price_tier, standard.input_price_per_mtok) == ("standard", 1.25)
    assert (flex.price_tier, flex.input_price_per_mtok, flex.output_price_per_mtok) == (
        "flex",
        0.625,
        5.0,
    )
    assert flex.price_source == "genai-prices" and flex.price_sources[0] == "genai-prices flex"
    assert flex.cost_usd(1_000_000, 1_000_000) == pytest.approx(0.625 + 5.0)


def test_a_workers_params_naming_a_tier_are_priced_at_it(tmp_path: Path) -> None:
    """A worker whose params send an alias at priority pays the priority price."""
    config = load(tmp_path, OPENAI)
    params = RequestSettings(extra_body={"service_tier": "priority"})
    priority = config.resolve("five").with_params(params)
    assert (priority.price_tier, priority.input_price_per_mtok) == ("priority", 2.5)
    back = config.resolve("five-flex").with_params(
        RequestSettings(extra_body={"service_tier": "default"})
    )
    assert (back.price_tier, back.input_price_per_mtok) == ("standard", 1.25)


def test_long_prompts_are_priced_at_the_long_context_rates(tmp_path: Path) -> None:
    """Past gpt-5.4's 272,000-token threshold every token of the call costs the higher rate;
    below it, the base rate."""
    long = load(tmp_path, OPENAI).resolve("long")
    assert long.long_context[0].above_input_tokens == 272_000
    assert long.cost_usd(200_000, 0) == pytest.approx(200_000 * 2.5 / 1e6)
    assert long.cost_usd(300_000, 10_000) == pytest.approx((300_000 * 5.0 + 10_000 * 22.5) / 1e6)


def test_batch_and_long_context_of_an_anthropic_model(tmp_path: Path) -> None:
    """Claude Sonnet 4.5's batch tier is half price, with its own long-context rates."""
    config = load(
        tmp_path,
        '[models.s]\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
        'extra_body = { service_tier = "batch" }\n',
    )
    batch = config.resolve("s")
    assert (batch.price_tier, batch.input_price_per_mtok) == ("batch", 1.5)
    assert batch.cost_usd(250_000, 0) == pytest.approx(250_000 * 3.0 / 1e6)


def test_a_tier_nobody_prices_says_so_and_a_price_table_prices_it(tmp_path: Path) -> None:
    """genai-prices has no flex price for gpt-4.1: it is priced at the standard rate and
    says so, until a [prices."gpt-4.1".flex] table gives one."""
    alias = (
        '[models.m]\nprovider = "openai"\nmodel = "gpt-4.1"\n'
        'extra_body = { service_tier = "flex" }\n'
    )
    unknown = load(tmp_path, alias).resolve("m")
    assert (unknown.price_tier, unknown.input_price_per_mtok) == ("standard", 2.0)
    assert unknown.price_note == "no flex price is known: priced at standard rates"
    table = (
        alias + '[prices."gpt-4.1".flex]\ninput_price_per_mtok = 1.0\noutput_price_per_mtok = 4.0\n'
    )
    priced = load(tmp_path, table).resolve("m")
    assert (priced.price_tier, priced.input_price_per_mtok, priced.output_price_per_mtok) == (
        "flex", 1.0, 4.0,
    )  # fmt: skip
    assert priced.cache_read_price_per_mtok == 0.5  # from the standard price, below it
    assert priced.price_sources == ("interlock.toml [prices.gpt-4.1.flex]", "genai-prices")
    assert priced.price_source == "interlock.toml+genai-prices" and not priced.price_note


def test_price_tables_price_a_local_model_by_tier_and_length(tmp_path: Path) -> None:
    """A model genai-prices cannot know (on a local server) is priced from its table: the
    standard price, a long-context step, and a batch tier with a long-context step of its
    own."""
    config = load(
        tmp_path,
        """
[models.local]
provider = "ollama"
model = "llama3.2"

[models.local-batch]
provider = "ollama"
model = "llama3.2"
extra_body = { service_tier = "batch" }

[prices."llama3.2"]
input_price_per_mtok = 0.1
output_price_per_mtok = 0.2
long_context = [
  { above_input_tokens = 100000, input_price_per_mtok = 0.3 },
  { above_input_tokens = 50000, input_price_per_mtok = 0.2 },
]

[prices."llama3.2".batch]
input_price_per_mtok = 0.05
long_context = { above_input_tokens = 100000, input_price_per_mtok = 0.07 }
""",
    )
    local, batch = config.resolve("local"), config.resolve("local-batch")
    assert local.price_source == "interlock.toml"
    assert local.cost_usd(10_000, 0) == pytest.approx(10_000 * 0.1 / 1e6)
    assert local.cost_usd(60_000, 0) == pytest.approx(60_000 * 0.2 / 1e6)
    assert local.cost_usd(200_000, 1_000) == pytest.approx((200_000 * 0.3 + 1_000 * 0.2) / 1e6)
    assert batch.price_tier == "batch"
    assert batch.cost_usd(10_000, 1_000) == pytest.approx((10_000 * 0.05 + 1_000 * 0.2) / 1e6)
    assert batch.cost_usd(200_000, 0) == pytest.approx(200_000 * 0.07 / 1e6)


def test_an_alias_price_is_its_own_tier_and_drops_long_context_it_does_not_name(
    tmp_path: Path,
) -> None:
    """An alias's own prices are what calls at its own tier cost, at every prompt length
    (it named no long-context rate); a worker sending it at another tier pays that tier."""
    config = load(
        tmp_path,
        '[models.m]\nprovider = "openai"\nmodel = "gpt-5.4"\ninput_price_per_mtok = 9.0\n',
    )
    own = config.resolve("m")
    assert own.rates(300_000)["input_price_per_mtok"] == 9.0
    assert own.rates(300_000)["output_price_per_mtok"] == 22.5  # not named: genai-prices'
    flex = own.with_params(RequestSettings(extra_body={"service_tier": "flex"}))
    assert (flex.price_tier, flex.input_price_per_mtok) == ("flex", 1.25)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[prices.m]\ninput_price_per_mtk = 1.0\n", "did you mean 'input_price_per_mtok'"),
        ("[prices.m]\ninput_price_per_mtok = -1\n", "must be a number of USD"),
        ("[prices.m]\nlong_context = { input_price_per_mtok = 1.0 }\n", "above_input_tokens"),
        ("[prices.m.default]\ninput_price_per_mtok = 1.0\n", "go in the table itself"),
        ("[prixes.m]\ninput_price_per_mtok = 1.0\n", r"did you mean \[prices\]"),
    ],
)
def test_invalid_price_tables_are_refused_by_name(tmp_path: Path, table: str, message: str) -> None:
    """A mistyped price table is an error naming the file and table, not a silent zero."""
    (tmp_path / "interlock.toml").write_text(table)
    with pytest.raises(ConfigError, match=message) as raised:
        ModelConfig.load([tmp_path], env={})
    assert "interlock.toml" in str(raised.value)


def test_the_request_carries_the_tier_that_is_priced(
    server: FakeServer, sleep: RecordingSleep, tmp_path: Path
) -> None:
    """The call goes out with the alias's service_tier in its body, and its cost is that
    tier's price."""
    config = load(
        tmp_path,
        f"""
[providers.fake]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_KEY"

[models.m]
provider = "fake"
model = "gpt-test"
extra_body = {{ service_tier = "flex" }}

[prices.gpt-test]
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0
[prices.gpt-test.flex]
input_price_per_mtok = 1.0
output_price_per_mtok = 4.0
""",
    )
    resolved = config.resolve("m")
    provider = OpenAIChatProvider(
        endpoint=endpoint(server, sleep), resolved=resolved, api_key=Secret(API_KEY)
    )
    result = asyncio.run(provider.complete(request(settings=resolved.settings)))
    assert server.requests[-1].body["service_tier"] == "flex"
    # The fake server reports 1,000 input and 500 output tokens.
    assert result.cost_usd == pytest.approx((1000 * 1.0 + 500 * 4.0) / 1e6)


def test_check_cost_names_each_models_price_tier_and_source(tmp_path: Path) -> None:
    """`check --cost` says, per model, the tier priced and the tables the price came from,
    and warns about a tier no table prices; `--json` gives the same as data."""
    (tmp_path / "interlock.toml").write_text(
        OPENAI + '\n[models.old]\nprovider = "openai"\nmodel = "gpt-4.1"\nmax_output_tokens = 10\n'
        'extra_body = { service_tier = "flex" }\n'
    )
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, model: five-flex, params: {max_output_tokens: 10}}\n"
        "    - {role: v, model: old, final: true}\n"
    )

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "check",
             str(flow), "--cost", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = check()
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "price: five-flex (gpt-5): tier flex, USD per million tokens in 0.625, out 5" in text
    assert "from genai-prices flex, genai-prices" in text
    assert "price: old (gpt-4.1): tier standard (no flex price is known" in text
    assert 'Add [prices."gpt-4.1".flex]' in " ".join(done.stderr.split())
    shown = json.loads(check("--json").stdout)
    prices = {entry["alias"]: entry for entry in shown["prices"]}
    assert prices["five-flex"]["tier"] == "flex" and prices["five-flex"]["source"] == "genai-prices"
    assert prices["old"]["note"] and prices["old"]["asked_tier"] == "flex"


def test_the_worst_case_quote_prices_long_prompts_at_the_long_context_rates(
    tmp_path: Path,
) -> None:
    """The quote's terms carry the long-context rates: a prompt bound past gpt-5.4's
    threshold is quoted at them, a short one at the base rates."""
    from interlock.core.loader import load_workflow
    from interlock.providers.terms import model_terms

    config = load(tmp_path, OPENAI)
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: w, model: long, final: true}\n"
    )
    pipeline = load_workflow(str(flow)).definitions["p"].pipeline
    terms = model_terms(pipeline, config)[("w", "long")]
    assert terms.long_context == ((272_000, 5.0, 22.5),)
    assert terms.rates_for(1_000) == (2.5, 15.0)
    assert terms.rates_for(300_000) == (5.0, 22.5)
    assert terms.rates_for(None) == (5.0, 22.5)  # a prompt of any length


def test_the_advice_for_a_batch_alias_without_a_batch_price_works(tmp_path: Path) -> None:
    """A batch alias whose model has only standard prices is warned about with the
    `.batch` table to add; adding that table prices it at the batch tier, warning gone."""
    (tmp_path / "interlock.toml").write_text(
        '[models.cheap]\nprovider = "anthropic"\nmodel = "claude-test"\nbatch = true\n'
        '[prices."claude-test"]\ninput_price_per_mtok = 3.0\noutput_price_per_mtok = 15.0\n'
    )
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: w, model: cheap, final: true}\n"
    )

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "check",
             str(flow), "--cost"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = check()
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "no batch price is known" in said and 'Add [prices."claude-test".batch]' in said
    with (tmp_path / "interlock.toml").open("a") as toml:
        toml.write('[prices."claude-test".batch]\ninput_price_per_mtok = 1.5\n'
                   "output_price_per_mtok = 7.5\n")  # fmt: skip
    done = check()
    assert done.returncode == 0, done.stderr
    assert "no batch price is known" not in done.stderr
    assert "tier batch, USD per million tokens in 1.5, out 7.5" in " ".join(done.stdout.split())
