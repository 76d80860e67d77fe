"""The `interlock` command: a thin layer over the Python API.

The group and its global options live here; each command group is a module of its own
(`runs`, `inspect`, `workflows`, `fleet`, `server`, `maintenance`...), registered below.
"""

from __future__ import annotations

import logging

import click

from interlock.cli import (
    archive,
    fleet,
    inspect,
    iterate,
    maintenance,
    mcp,
    prune,
    review,
    runs,
    schema,
    server,
    signals,
    workflows,
)
from interlock.cli.base import Ctx


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar="INTERLOCK_HOME", help="State directory (default ./.interlock).")
@click.option(
    "--store", envvar="INTERLOCK_STORE", help="Ledger URL (sqlite:///..., postgresql://...)."
)
@click.option(
    "--sync",
    type=click.Choice(["full", "normal"]),
    default="full",
    show_default=True,
    help="SQLite durability: 'full' survives power loss; 'normal' only a process crash.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text")
@click.version_option(package_name="interlock")
@click.pass_context
def cli(
    ctx: click.Context, home: str | None, store: str | None, sync: str, debug: bool, log_format: str
) -> None:
    """interlock: deterministic, crash-safe orchestration of multi-agent pipelines."""
    from interlock.cli.logs import configure_logging

    configure_logging(debug=debug, json_format=log_format == "json")
    ctx.obj = Ctx(home, store, sync, debug)


for module in (
    runs,
    review,
    signals,
    inspect,
    iterate,
    archive,
    workflows,
    schema,
    fleet,
    server,
    mcp,
    maintenance,
    prune,
):
    for command in module.COMMANDS:
        cli.add_command(command)


def main() -> None:
    """Console entry point."""
    logging.captureWarnings(True)
    cli(standalone_mode=True)
