"""`interlock prune`: remove old ended runs, their files, queue and outbox rows."""

from __future__ import annotations

import time
from pathlib import Path

import click

from interlock.cli.base import Ctx, handle_errors, out, pass_ctx, when
from interlock.errors import UsageError

# The ledger's ENDED_STATUSES (a test keeps them equal), spelled out so that `interlock --help`
# does not import the ledger to build this option.
ENDED_STATUSES = ("delivered", "failed", "cancelled")


@click.command()
@click.option("--older-than", help="Runs that ended longer ago than this: 90d, 12h, 2w...")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(ENDED_STATUSES),
    help="Only runs that ended so (repeatable; default: every ended run).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@pass_ctx
@handle_errors
def prune(ctx: Ctx, older_than: str | None, statuses: tuple[str, ...], dry_run: bool) -> None:
    """Remove ended runs whole (history, files, commands, notifications, queued tasks),
    keeping a receipt of each; running, paused and waiting runs are never touched.

    Without --older-than, the [retention] table of interlock.toml (here, or in the state
    directory) says how long runs are kept.
    """
    from interlock.runtime.home import Home
    from interlock.runtime.prune import (
        Retention,
        check_statuses,
        load_retention,
        parse_duration,
        prune,
    )

    if older_than is not None:
        retention = Retention(older_than=parse_duration(older_than, "--older-than"))
    else:
        home = Home.at(ctx.home).root
        found = load_retention([Path("interlock.toml"), home / "interlock.toml"])
        if found is None:
            raise UsageError(
                'say how old: --older-than 90d, or older_than = "90d" in the [retention] '
                "table of interlock.toml"
            )
        retention = found
    if statuses:
        retention = Retention(
            older_than=retention.older_than, statuses=check_statuses(statuses, "--status")
        )
    missing = ctx.missing_ledger()
    if missing is not None:  # nothing was ever recorded here: do not make a ledger to say so
        out.print(f"nothing to prune: there is no ledger at {missing}")
        return
    app = ctx.app
    now = time.time()
    report = prune(app.store, app.home, retention, now, dry_run=dry_run)
    cutoff = when(now - retention.older_than)
    kinds = "/".join(retention.statuses)
    if dry_run:
        shown = ", ".join(report.would[:5]) + (" ..." if len(report.would) > 5 else "")
        out.print(f"would prune {len(report.would)} {kinds} run(s) that ended before {cutoff}")
        if report.would:
            out.print(f"  {shown}")
        return
    out.print(
        f"pruned {len(report.runs)} {kinds} run(s) that ended before {cutoff}: "
        f"{report.directories} director(ies) and {report.artifacts} stored output(s) removed; "
        "a receipt of each (its last event's hash) is kept"
    )


COMMANDS = [prune]
