"""The `interlock` command: a thin layer over the Python API.

The group and its global options live here; each command group is a module of its own
(`runs`, `inspect`, `workflows`, `fleet`, `server`, `maintenance`...), named in
`COMMAND_MODULES` and imported when one of its commands is used.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from interlock.cli.base import Ctx
from interlock.cli.lazy import LazyGroup

# Every command and the module of `interlock.cli` that defines it (in its COMMANDS list). A
# command's module is imported only when the command is used, so `status` does not pay for
# `serve`; to add a command, add its line. Command modules import nothing heavy at the top
# (tests/cli/test_startup.py): `--help` imports them all.
COMMAND_MODULES: dict[str, str] = {
    "approve": "runs",
    "batch": "batch",
    "batches": "batch",
    "cache": "iterate",
    "cancel": "runs",
    "check": "workflows",
    "compare": "compare",
    "diff": "iterate",
    "doctor": "maintenance",
    "edit": "review",
    "events": "inspect",
    "explain": "inspect",
    "experiment": "batch",
    "export": "archive",
    "import": "archive",
    "init": "workflows",
    "keygen": "archive",
    "ledger": "inspect",
    "limits": "limits",
    "mcp": "mcp",
    "message": "runs",
    "orchestrate": "fleet",
    "pipelines": "workflows",
    "prune": "prune",
    "reject": "review",
    "rerun": "iterate",
    "resume": "runs",
    "run": "runs",
    "runs": "inspect",
    "schema": "schema",
    "serve": "server",
    "signal": "signals",
    "status": "inspect",
    "submit": "runs",
    "trust": "archive",
    "verify": "archive",
    "watch": "server",
    "worker": "fleet",
}


@click.group(
    cls=LazyGroup, lazy=COMMAND_MODULES, context_settings={"help_option_names": ["-h", "--help"]}
)
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
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    help="The interlock.toml to read first, before the workflow's folder (INTERLOCK_CONFIG).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    help="Log lines as text or as one JSON object each.",
)
@click.version_option(package_name="interlock")
@click.pass_context
def cli(
    ctx: click.Context,
    home: str | None,
    store: str | None,
    sync: str,
    config: str | None,
    debug: bool,
    log_format: str,
) -> None:
    """interlock: deterministic, crash-safe orchestration of multi-agent pipelines."""
    import os

    from interlock.cli import logs
    from interlock.cli.logs import configure_logging

    if logs.OWN_PROCESS and ctx.invoked_subcommand in BRIEF_COMMANDS:
        brief_collector()
    if config:
        # Every reader of the configuration (and a server's or a fleet's own processes)
        # takes the explicit file from the environment: one place says it.
        os.environ["INTERLOCK_CONFIG"] = str(Path(config).absolute())

    configure_logging(debug=debug, json_format=log_format == "json")
    protect_own_secrets(store)
    ctx.obj = Ctx(home, store, sync, debug)


# Commands that load their modules, answer and end: `check`, `runs` and `status`. Their
# start-up makes tens of thousands of objects that live until the process ends, and with
# CPython's thresholds (700, 10, 10) full collections walk them all and find nothing, and the
# interpreter walks them once more as it exits: a sixth of `check`'s instructions
# (benchmarks/README.md, "Start-up of `check`, `runs` and `status`").
BRIEF_COMMANDS = frozenset({"check", "runs", "status"})
BRIEF_THRESHOLDS = (100_000, 50, 1000)  # young, middle, old


def brief_collector() -> None:
    """For a brief command run as its own process (not a program calling `cli`): collect
    young cycles every 100,000 allocations (garbage in cycles is still freed as the command
    goes), a full collection practically never, and none as the interpreter exits: `gc.freeze`
    at exit leaves what is alive then to the end of the process. The command's output is
    flushed and closed as before (stdout and stderr are flushed whatever the collector does);
    these commands write nothing else that a collection at exit would finish."""
    import atexit
    import gc

    gc.set_threshold(*BRIEF_THRESHOLDS)
    atexit.register(gc.freeze)


def protect_own_secrets(store: str | None) -> None:
    """Mask this process's own secrets in whatever it records or prints: a server's token
    secret in the environment (a worker or a command started beside a server inherits it)
    and the store's password."""
    import os

    from interlock.providers.redaction import protect, protect_url

    protect(os.environ.get("INTERLOCK_AUTH_SECRET"))
    protect_url(store)


def main() -> None:
    """Console entry point."""
    from interlock.cli import logs

    logs.OWN_PROCESS = True
    logging.captureWarnings(True)
    use_parser_cache()
    cli(standalone_mode=True)


def use_parser_cache() -> None:
    """Keep CEL's parse tables in the user's cache folder (`$XDG_CACHE_HOME/interlock`, else
    `~/.cache/interlock`), so that only the first command of a machine that compiles a
    condition builds them (a sixth of a second); the folder is made by that command, and
    without a writable one each command builds them."""
    from interlock.core import expressions

    expressions.PARSER_CACHE = parser_cache_file


def parser_cache_file() -> str | None:
    """The file CEL's parse tables are kept in, its folder made (None: it cannot be)."""
    import os
    import sys

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "interlock"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: the tables are built in this process
        return None
    return str(folder / f"cel-parser-py{sys.version_info[0]}{sys.version_info[1]}.cache")
