"""Spend caps across runs: the pure rules, the `[limits]` table, and a call held to them
against the fake OpenAI-wire server."""

from __future__ import annotations

import asyncio
import datetime
import os
from pathlib import Path

import pytest

from interlock.providers import ModelConfig, ProviderError
from interlock.providers.config_files import ConfigError
from interlock.providers.factory import ProviderRegistry
from interlock.providers.spend import (
    CallScope,
    Cap,
    Window,
    parse_limits,
    waiting_text,
    window_bounds,
    worst_case_usd,
)
from interlock.providers.spend_guard import CappedProvider, LiveLimits, MemorySpend

from .conftest import API_KEY
from .fake_llm_server import FakeServer, Fault
from .helpers import request

NOON = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC).timestamp()


def test_windows_are_utc_days_and_calendar_months() -> None:
    """A day runs from 00:00 UTC to the next; a month from its first day to the next's."""
    day = window_bounds(Window.DAY, NOON)
    assert day == (
        datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC).timestamp(),
        datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC).timestamp(),
    )
    month = window_bounds(Window.MONTH, NOON)
    assert month == (
        datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC).timestamp(),
        datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC).timestamp(),
    )


def test_waiting_text_names_the_cap_its_amount_and_the_reset() -> None:
    """What a waiting call says, as `status` and the API show it."""
    cap = Cap(name="daily", window=Window.DAY, amount_usd=50)
    assert waiting_text(cap, NOON) == "waiting: spend cap 'daily' (USD 50.00) until 00:00 UTC"
    monthly = Cap(name="monthly", window=Window.MONTH, amount_usd=500)
    assert waiting_text(monthly, NOON).endswith("until 2027-01-01 00:00 UTC")


def test_scopes_pick_the_calls_a_cap_counts() -> None:
    """A cap counts the calls its scope names; one of a pipeline counts calls whose
    pipeline is not known too, so nothing unknown spends past it."""
    limits = parse_limits(
        {
            "max_cost_usd_per_day": 50,
            "caps": [
                {"name": "sonnet", "window": "day", "max_cost_usd": 5, "scope": {"alias": "s"}},
                {"name": "night", "window": "month", "max_cost_usd": 9,
                 "scope": {"pipeline": "nightly"}},
            ],
        },
        "interlock.toml",
    )  # fmt: skip
    names = [c.name for c in limits.applying(CallScope(alias="s", pipeline="other"))]
    assert names == ["daily", "sonnet"]
    names = [c.name for c in limits.applying(CallScope(alias="x", pipeline=""))]
    assert names == ["daily", "night"]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ("max_cost_usd_per_day = -1", ["max_cost_usd_per_day", "negative", "0 or more"]),
        ('[[limits.caps]]\nname = "a"\nwindow = "week"\nmax_cost_usd = 1',
         ["'a'", "window = 'week'", '"day" or "month"']),
        ('[[limits.caps]]\nname = "a"\nwindow = "day"\nmax_cost_usd = 1\nscope = { team = "x" }',
         ["scope key 'team'", "pipeline, alias, provider"]),
        ("max_cost_usd_per_dya = 1", ["no key 'max_cost_usd_per_dya'", "max_cost_usd_per_day"]),
        ('on_cap = "explode"', ["on_cap", '"wait" or "fail"']),
    ],
)  # fmt: skip
def test_bad_limits_name_the_file_the_key_and_the_fix(
    tmp_path: Path, table: str, words: list[str]
) -> None:
    """A bad `[limits]` is refused when the configuration is read, naming all three."""
    path = tmp_path / "interlock.toml"
    path.write_text(f"[limits]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        ModelConfig.load([path], env={})
    message = str(caught.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_worst_case_is_the_prompt_and_the_whole_output_at_the_dearest_rates() -> None:
    """The reservation charges input at the dearer of input and cache-write rates and the
    output limit at the dearer of output and reasoning; no output limit: no bound."""
    rates = {"input_price_per_mtok": 2.0, "cache_write_price_per_mtok": 3.0,
             "output_price_per_mtok": 8.0, "reasoning_price_per_mtok": None}  # fmt: skip
    usd = worst_case_usd(input_tokens=1000, output_tokens=500, rates=rates)
    assert usd == pytest.approx((1000 * 3 + 500 * 8) / 1e6)
    assert worst_case_usd(input_tokens=1, output_tokens=None, rates=rates) == float("inf")


def write_config(path: Path, server: FakeServer, limits: str) -> None:
    """An interlock.toml with one alias on the fake server priced in `[prices]`."""
    path.write_text(
        f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_KEY"

[models.main]
provider = "local"
model = "gpt-test"
max_output_tokens = 500

[prices.gpt-test]
input_price_per_mtok = 20.0
output_price_per_mtok = 80.0

[limits]
{limits}
"""
    )


def capped(path: Path, store: MemorySpend, sleep: object = asyncio.sleep) -> CappedProvider:
    """The provider `main` of the configuration at `path`, held to its caps in `store`."""
    config = ModelConfig.load([path], env={"FAKE_KEY": API_KEY})
    built = ProviderRegistry(sleep=sleep).build(config.resolve("main"), config)  # type: ignore[arg-type]
    assert isinstance(built, CappedProvider)
    built._store = store
    return built


# 4000 characters: 1000 prompt tokens by the estimate, as many as the server reports.
PROMPT = "x" * (4000 - len("You are careful."))
WORST = (1000 * 20 + 500 * 80) / 1e6  # USD 0.06


def test_a_call_reserves_its_worst_case_and_settles_to_its_cost(
    tmp_path: Path, server: FakeServer
) -> None:
    """The cap's count holds the worst case while the call runs and its cost after."""
    server.state.output_tokens = 250
    path = tmp_path / "interlock.toml"
    write_config(path, server, "max_cost_usd_per_day = 1.00")
    store = MemorySpend()
    provider = capped(path, store)
    result = asyncio.run(provider.complete(request(prompt=PROMPT)))
    assert result.cost_usd == pytest.approx(0.04)
    [usage] = store.usage(now=9e99)
    assert usage.cap == "daily"
    assert usage.spent_usd == pytest.approx(0.04)
    assert usage.holds == 0


def test_a_call_past_a_cap_waits_and_goes_on_when_the_cap_is_raised(
    tmp_path: Path, server: FakeServer
) -> None:
    """Past the cap the call says it waits, sends nothing, and goes on once the file says
    more (read again by its modification time, no restart)."""
    path = tmp_path / "interlock.toml"
    write_config(path, server, "max_cost_usd_per_day = 0.10")
    store = MemorySpend()
    said: list[str] = []
    polls: list[float] = []

    async def raise_the_cap(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 2:  # while waiting: a person edits the file
            write_config(path, server, "max_cost_usd_per_day = 0.20")
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        await asyncio.sleep(0)

    provider = capped(path, store, raise_the_cap)

    async def two_calls() -> None:
        await provider.complete(request(prompt=PROMPT))
        await provider.complete(request(prompt=PROMPT), said.append)

    asyncio.run(two_calls())
    assert len(server.state.requests) == 2
    assert said[0].rstrip(" ") == "\nwaiting: spend cap 'daily' (USD 0.10) until 00:00 UTC\n"
    assert said.count(said[0]) == 1  # said once, not at every poll
    assert len(polls) == 2
    assert store.usage(now=9e99)[0].spent_usd == pytest.approx(2 * WORST)


def test_a_call_whose_worst_case_is_over_a_cap_is_a_clear_error(
    tmp_path: Path, server: FakeServer
) -> None:
    """It could never start: refused at once, not retried, naming the cap and the fix."""
    path = tmp_path / "interlock.toml"
    write_config(path, server, "max_cost_usd_per_day = 0.05")
    with pytest.raises(ProviderError) as caught:
        asyncio.run(capped(path, MemorySpend()).complete(request(prompt=PROMPT)))
    assert not caught.value.retryable
    assert "over spend cap 'daily' (USD 0.05)" in str(caught.value)
    assert "raise the cap or lower max_output_tokens" in str(caught.value)
    assert server.state.requests == []


def test_on_cap_fail_fails_the_call_instead_of_waiting(tmp_path: Path, server: FakeServer) -> None:
    """With `on_cap = "fail"` the call past the cap fails, not to be retried."""
    path = tmp_path / "interlock.toml"
    write_config(path, server, 'max_cost_usd_per_day = 0.10\non_cap = "fail"')
    provider = capped(path, MemorySpend())

    async def two_calls() -> None:
        await provider.complete(request(prompt=PROMPT))
        await provider.complete(request(prompt=PROMPT))

    with pytest.raises(ProviderError) as caught:
        asyncio.run(two_calls())
    assert "spend cap 'daily' (USD 0.10) is reached" in str(caught.value)
    assert len(server.state.requests) == 1


def test_a_call_that_fails_before_spending_releases_its_hold(
    tmp_path: Path, server: FakeServer
) -> None:
    """A refused request spends nothing: its hold goes, and the count stays at zero."""
    path = tmp_path / "interlock.toml"
    write_config(path, server, "max_cost_usd_per_day = 1.00")
    store = MemorySpend()
    server.state.faults.append(Fault(status=400))
    with pytest.raises(ProviderError):
        asyncio.run(capped(path, store).complete(request(prompt=PROMPT)))
    [usage] = store.usage(now=0)
    assert (usage.spent_usd, usage.held_usd, usage.holds) == (0, 0, 0)


def test_live_limits_keep_the_last_good_caps_when_the_file_breaks(tmp_path: Path) -> None:
    """An edit that does not parse leaves the caps read before in force."""
    path = tmp_path / "interlock.toml"
    path.write_text("[limits]\nmax_cost_usd_per_day = 5\n")
    live = LiveLimits(parse_limits({"max_cost_usd_per_day": 5}, str(path)))
    path.write_text("[limits]\nmax_cost_usd_per_day = -5\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert live.current().caps[0].amount_usd == 5
