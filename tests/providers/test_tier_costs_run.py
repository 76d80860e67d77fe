"""Runs against the fake server whose workers send an alias at another service tier with
`params`: each call is recorded at the price of the tier it was sent at, the one
`check --cost` quotes, not at the alias's standard price."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.runtime.executors import TaskContext, register

from .fake_llm_server import FakeServer
from .project import app_for, attempt_usage, make_project, one_worker

PRICES = """
[models.tiered]
provider = "oa"
model = "gpt-test"

[models.claude-tiered]
provider = "an"
model = "claude-test"

[prices."claude-test"]
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
[prices."claude-test".priority]
input_price_per_mtok = 6.0
output_price_per_mtok = 30.0

[prices."gpt-test"]
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0
[prices."gpt-test".flex]
input_price_per_mtok = 1.0
output_price_per_mtok = 4.0
[prices."gpt-test".priority]
input_price_per_mtok = 4.0
output_price_per_mtok = 16.0
"""


@pytest.mark.parametrize(
    ("alias", "tier", "rates"),
    [
        ("tiered", "priority", (4.0, 16.0)),
        ("tiered", "flex", (1.0, 4.0)),
        ("tiered", "default", (2.0, 8.0)),
        ("claude-tiered", "priority", (6.0, 30.0)),
    ],
)
def test_a_workers_params_tier_is_the_price_recorded(
    tmp_path: Path,
    server: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    alias: str,
    tier: str,
    rates: tuple[float, float],
) -> None:
    """A worker sending the alias at `tier` with params pays that tier's price in the
    ledger and the run's cost (the fake server reports 1,000 input and 500 output tokens)."""
    project = make_project(tmp_path, server, monkeypatch, extra=PRICES)
    flow = one_worker(
        project,
        f"      model: {alias}\n      params: {{extra_body: {{service_tier: {tier}}}}}\n"
        "      task: Write about {{ topic }}\n",
    )
    app = app_for(project)
    state = app.run(flow, topic="tiers", inputs={})
    assert state.status is RunStatus.DELIVERED, state.failure
    assert server.requests[-1].body["service_tier"] == tier
    expected = (1000 * rates[0] + 500 * rates[1]) / 1e6
    [usage] = attempt_usage(app, state.run_id)
    assert usage["cost_usd"] == pytest.approx(expected)
    assert state.cost_usd == pytest.approx(expected)


def _batched_alias(ctx: TaskContext) -> str:
    return ctx.model("batched").complete("Say hello.").text


register("tiers.batched", _batched_alias)


def test_a_call_from_code_to_a_batch_alias_pays_the_standard_price(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctx.model` sends a `batch = true` alias's call at once, not through a batch: it is
    recorded at the standard price, not the batch one."""
    extra = PRICES + (
        '[prices."gpt-test".batch]\ninput_price_per_mtok = 1.0\noutput_price_per_mtok = 4.0\n'
        '[models.batched]\nprovider = "oa"\nmodel = "gpt-test"\nbatch = true\n'
    )
    project = make_project(tmp_path, server, monkeypatch, extra=extra)
    app = app_for(project)
    state = app.run(one_worker(project, "      call: tiers.batched\n"), "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    [usage] = attempt_usage(app, state.run_id)
    assert usage["cost_usd"] == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)


def test_a_spend_cap_reserves_a_call_at_the_tier_its_params_send(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's worst case is reserved against a spend cap at the price of the tier it is
    sent at: at priority it is over a cap that its standard price fits, and is never sent."""
    cap = '[limits]\non_cap = "fail"\nmax_cost_usd_per_day = 0.012\n'
    project = make_project(tmp_path, server, monkeypatch, extra=PRICES + cap)
    worker = (
        "      model: tiered\n      params: {{max_output_tokens: 1000{tier}}}\n"
        "      task: Write about {{{{ topic }}}}\n"
    )
    app = app_for(project)
    flow = one_worker(project, worker.format(tier=", extra_body: {service_tier: priority}"))
    state = app.run(flow, topic="tiers", inputs={})
    assert state.status is RunStatus.FAILED
    assert "spend cap 'daily'" in (state.failure or "") and not server.requests
    state = app.run(one_worker(project, worker.format(tier="")), topic="tiers", inputs={})
    assert state.status is RunStatus.DELIVERED, state.failure
