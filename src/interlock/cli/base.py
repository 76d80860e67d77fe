"""What every command shares: the consoles, the context object, error handling, and
driving a run in the foreground.

Errors print one line (or one block for an invalid workflow) and exit with the code of
`interlock.errors.ExitCode`; a traceback appears only with `--debug`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from interlock.api import Interlock
from interlock.cli.display import LiveProgress
from interlock.core.state import RunStatus
from interlock.errors import ExitCode, InterlockError
from interlock.runtime.orchestrator import holder_is_dead

F = TypeVar("F", bound=Callable[..., Any])
# Off a terminal (pipes, CI logs) tables get room instead of being cut at 80 columns.
# Markup is off by default: topics, messages and outputs are data and may contain brackets.
# The few coloured lines opt in with markup=True and escape() what they interpolate.
out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 200)
err = Console(
    stderr=True, highlight=False, markup=False, width=None if sys.stderr.isatty() else 200
)

STARTER = Path(__file__).with_name("starter.yaml")


class Ctx:
    """Options shared by every command."""

    def __init__(self, home: str | None, store: str | None, sync: str, debug: bool) -> None:
        self.home, self.store_url, self.sync, self.debug = home, store, sync, debug
        self._app: Interlock | None = None

    @property
    def app(self) -> Interlock:
        """The API object, opened on first use (so `check` and `init` need no state dir)."""
        if self._app is None:
            sync: Literal["FULL", "NORMAL"] = "NORMAL" if self.sync == "normal" else "FULL"
            self._app = Interlock(self.home, store=self.store_url, synchronous=sync)
        return self._app


def handle_errors(function: F) -> F:
    """Turn errors into a message and an exit code; a traceback only with --debug."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = "--debug" in sys.argv
        try:
            return function(*args, **kwargs)
        except InterlockError as exc:
            if debug:
                raise
            err.print(f"[red]error:[/] {escape(exc.message)}", markup=True)
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            err.print("interrupted: the run is resumable with 'interlock resume RUN'")
            sys.exit(int(ExitCode.INTERRUPTED))
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:
            if debug:
                raise
            err.print(
                f"[red]internal error:[/] {escape(f'{type(exc).__name__}: {exc}')} (rerun with "
                "--debug for details; nothing recorded was lost)",
                markup=True,
            )
            sys.exit(int(ExitCode.INTERNAL))

    return wrapper  # type: ignore[return-value]


pass_ctx = click.make_pass_decorator(Ctx)


def parse_inputs(pairs: tuple[str, ...]) -> dict[str, str]:
    """`k=v` pairs into a dict."""
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--input")
        values[key] = value
    return values


def drive_in_foreground(app: Interlock, run_id: str, *, quiet: bool = False) -> int:
    """Drive a run with a live display; the exit code says how it ended."""
    orchestrator = app.orchestrator
    driver = orchestrator.drivers.get(run_id) or orchestrator.take(run_id)
    with LiveProgress(err if quiet else out, driver.definition) as progress:
        orchestrator.listeners.append(progress.on_event)
        progress.state = driver.state
        try:
            asyncio.run(app.drive_async(run_id))
        finally:
            orchestrator.listeners.remove(progress.on_event)
    return report_end(app, run_id)


def report_end(app: Interlock, run_id: str) -> int:
    """Print how the run stands and return the matching exit code."""
    state = app.state(run_id)
    if state.status is RunStatus.DELIVERED:
        out.print(f"delivered: {app.run_dir(run_id) / 'final.md'}")
        return int(ExitCode.OK)
    if state.status is RunStatus.PAUSED:
        out.print(f"paused for approval: interlock approve {run_id} [--message TEXT]")
        return int(ExitCode.PAUSED)
    if state.status is RunStatus.RUNNING:
        out.print(f"still running: interlock resume {run_id}")
        return int(ExitCode.INTERRUPTED)
    out.print(f"{state.status.value}: {state.failure}")
    return int(ExitCode.RUN_FAILED)


def driven_elsewhere(app: Interlock, run_id: str) -> bool:
    """True when a live orchestrator holds the run's lease."""
    record = app.store.get_run(run_id)
    alive = record.lease_owner and (record.lease_expires or 0) > time.time()
    return bool(alive) and not holder_is_dead(record.lease_owner or "")


def when(timestamp: float) -> str:
    """Local time, to the second."""
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")
