"""`interlock limits`: the spend caps of `interlock.toml`, and what they count now."""

from __future__ import annotations

import json
import time

import click

from interlock.cli.base import Ctx, handle_errors, out, pass_ctx
from interlock.errors import UsageError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per cap.")
@pass_ctx
@handle_errors
def limits(ctx: Ctx, as_json: bool) -> None:
    """Show the spend caps ([limits] in interlock.toml, here or in the state directory):
    each cap's amount, what was spent in its window so far, what calls under way hold
    (open reservations), what is left, and when the window resets."""
    from interlock.providers.config import ModelConfig
    from interlock.providers.spend import report
    from interlock.runtime.home import Home
    from interlock.runtime.shared_limits import open_spend

    home = Home.at(ctx.home).root
    try:
        config = ModelConfig.for_workflow(None, home)
    except Exception as exc:  # an invalid interlock.toml: its message names the file
        raise UsageError(str(exc)) from None
    spend = config.spend
    if not spend.caps:
        out.print("no spend caps: add [limits] to interlock.toml (max_cost_usd_per_day = 50)")
        return
    now = time.time()
    usage = []
    if ctx.missing_ledger() is None:  # no ledger yet: nothing spent, and none is created
        ledger = ctx.store_url or f"sqlite://{home / 'ledger.db'}"
        store = open_spend(ledger)
        try:
            usage = store.usage(now=now)
        finally:
            store.close()
    reports = report(spend, usage, now)
    if as_json:
        for one in reports:
            out.print(json.dumps(one.to_json()), soft_wrap=True)
        return
    out.print(f"spend caps from {spend.source} (on_cap = {spend.on_cap.value}):", soft_wrap=True)
    for one in reports:
        scope = ", ".join(f"{k} {v}" for k, v in one.cap.scope.items()) or "every call"
        out.print(
            f"  {one.cap.name}: USD {_usd(one.spent_usd)} spent of {_usd(one.cap.amount_usd)} "
            f"per {one.cap.window.value} ({scope}); USD {_usd(one.held_usd)} held by "
            f"{one.holds} open reservation(s); USD {_usd(one.left_usd)} left; resets "
            f"{one.resets}",
            soft_wrap=True,
            highlight=False,
        )


def _usd(amount: float) -> str:
    """`amount` in cents, or to the millionth of a dollar when it has less than a cent's
    worth (a call costs fractions of a cent: 0.0015 spent must not show as 0.00)."""
    shown = f"{amount:.6f}".rstrip("0")
    whole, _, fraction = shown.partition(".")
    return f"{whole}.{fraction:0<2}"


COMMANDS = [limits]
