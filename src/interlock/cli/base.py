"""What every command shares: the consoles, the context object and error handling.

Errors print one line (or one block for an invalid workflow) and exit with the code of
`interlock.errors.ExitCode`; a traceback appears only with `--debug`. A reader that closes
the pipe (`interlock events RUN | head`) ends a reading command quietly with 141, as git
does; a command that drives runs (`run`, `batch`, `resume`) goes on to its end with its
stdout discarded instead (`outlive_closed_output`): closing the output stops the output,
not the work.

This module is imported by every command, so it imports little: `rich` and the runtime are
loaded when a command first prints or opens the state directory, which keeps `--help` fast.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import click

from interlock.errors import ExitCode, InterlockError, RunNotFound, StorageError

if TYPE_CHECKING:
    from rich.console import Console

    from interlock.api import Interlock
    from interlock.storage import Store
    from interlock.storage.base import RunRecord

F = TypeVar("F", bound=Callable[..., Any])

STARTER = Path(__file__).with_name("starter.yaml")

# The largest integer a ledger stores (SQLite INTEGER, PostgreSQL bigint): a larger number on
# the command line is bad input (exit 2 naming the option), not an overflow in the driver.
LARGEST = 2**63 - 1
COUNT = click.IntRange(1, LARGEST)  # how many to show, or to run at once
SEQUENCE = click.IntRange(0, LARGEST)  # an event's number in its run (0: from the start)
PORT = click.IntRange(0, 65535)


class _ClosedOutput:
    """Whether this command outlives a closed stdout, and whether it said so yet."""

    outlived = False  # set by a command that drives runs: the work goes on without stdout
    said = False  # the one line on stderr that says the output is discarded


def outlive_closed_output() -> None:
    """For a command that drives runs: from now on, a reader closing stdout (`| head -1`)
    stops the output, not the work. The runs go on to their end, what they would print is
    discarded (stderr is still used) and the command exits with its usual code; stopping
    them would leave rows and tasks in flight that nothing drives."""
    _ClosedOutput.outlived = True


def pipe_closed() -> None:
    """The reader of stdout went away: end quietly with the conventional status (141), or,
    in a command that outlives it, go on with stdout discarded.

    stdout is pointed at /dev/null first, so that flushing it at exit cannot fail again.
    """
    discard_stdout()
    if not _ClosedOutput.outlived:
        sys.exit(int(ExitCode.PIPE_CLOSED))
    if not _ClosedOutput.said:
        _ClosedOutput.said = True
        err.print("output closed: the work goes on to its end; its output is discarded")


def end_on_closed_pipe() -> None:
    """A write to the closed stdout escaped to the command itself: it cannot go on, so it
    ends with 141 whatever the command (stdout discarded first)."""
    discard_stdout()
    sys.exit(int(ExitCode.PIPE_CLOSED))


def discard_stdout() -> None:
    """Point stdout at /dev/null: what is written to it from now on, and what its buffer
    still holds, goes nowhere instead of failing again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# What rich would change in a line of plain text: a control character but the newline (it
# expands tabs and drops some controls) or two colons with no space between (`:smile:`, an
# emoji code).
_UNPLAIN = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]|:\S*:")


class _LazyConsole:
    """A rich Console made on first use (importing rich costs a tenth of a second).

    Off a terminal (pipes, CI logs) lines are never wrapped and tables get room instead of
    being cut at 80 columns. Markup is off by default: topics, messages and outputs are data
    and may contain brackets; the few coloured lines opt in with markup=True and escape()
    what they interpolate.
    """

    def __init__(self, *, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def _make(self) -> Console:
        from rich.console import Console

        class PipeAwareConsole(Console):
            def on_broken_pipe(self) -> None:
                self.quiet = True
                pipe_closed()

        stream = sys.stderr if self._stderr else sys.stdout
        terminal = stream.isatty()
        return PipeAwareConsole(
            stderr=self._stderr,
            highlight=False,
            markup=False,
            soft_wrap=not terminal,
            width=None if terminal else 200,
        )

    def real(self) -> Console:
        """The Console itself, for what needs one by type or by protocol (rich's `Live`
        enters it as a context manager, which `__getattr__` cannot stand in for: Python
        looks `__enter__` up on the class)."""
        if self._console is None:
            self._console = self._make()
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        """Console.print; a line of plain text is written as rich would write it, without
        loading rich (most of a tenth of a second of `check`)."""
        if self._console is None and len(objects) == 1 and self._plain(objects[0], options):
            stream = sys.stderr if self._stderr else sys.stdout
            try:
                stream.write(f"{objects[0]}\n")
                stream.flush()
            except BrokenPipeError:
                pipe_closed()
            except UnicodeEncodeError:  # rich's message says what to set
                self.real().print(*objects, **options)
            return
        self.real().print(*objects, **options)

    def _plain(self, text: object, options: dict[str, Any]) -> bool:
        """Whether rich would print `text` unchanged: a str with no markup asked for and no
        wrapping (soft wrap, asked for or off a terminal), nothing `_UNPLAIN` finds."""
        if type(text) is not str or not options.keys() <= {"soft_wrap", "markup"}:
            return False
        if options.get("markup") or _UNPLAIN.search(text):
            return False
        soft_wrap = options.get("soft_wrap")
        if soft_wrap is None:  # the console's own default, as `_make` sets it
            soft_wrap = not (sys.stderr if self._stderr else sys.stdout).isatty()
        return bool(soft_wrap)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)

    def __enter__(self) -> Console:
        return self.real().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.real().__exit__(*exc)


def real_console(console: Console) -> Console:
    """`console` itself, or the Console a lazy one stands for."""
    return console.real() if isinstance(console, _LazyConsole) else console


out = cast("Console", _LazyConsole(stderr=False))
err = cast("Console", _LazyConsole(stderr=True))


class Ctx:
    """Options shared by every command."""

    def __init__(self, home: str | None, store: str | None, sync: str, debug: bool) -> None:
        self.home, self.store_url, self.sync, self.debug = home, store, sync, debug
        self._app: Interlock | None = None
        self._store: Store | None = None

    @property
    def app(self) -> Interlock:
        """The API object, opened on first use (so `check` and `init` need no state dir)."""
        if self._app is None:
            from interlock.api import Interlock

            store = self._store if self._store is not None else self.store_url
            self._app = Interlock(self.home, store=store, synchronous=self._synchronous)
        return self._app

    @property
    def _synchronous(self) -> Literal["FULL", "NORMAL"]:
        return "NORMAL" if self.sync == "normal" else "FULL"

    @property
    def store(self) -> Store:
        """The ledger alone, for a command that only lists: the engine and the runtime are
        not loaded for it."""
        if self._app is not None:
            return self._app.store
        if self._store is None:
            from interlock.runtime.home import Home
            from interlock.storage import open_store

            url = self.store_url
            options: dict[str, Any] = {}
            if not url or url.startswith("sqlite:"):
                options["synchronous"] = self._synchronous
            self._store = open_store(url, Home.at(self.home).root, **options)
        return self._store

    def check_ahead(self) -> None:
        """For a command that writes: start the ledger's check before its first write now,
        beside the engine's imports (SQLite's check reads the whole file: 0.7 s for
        64 MB), instead of after them. Only for a SQLite ledger that exists: a
        new one has nothing to check, and a command refused before writing creates
        nothing."""
        url = self.store_url
        if (url and not url.startswith("sqlite:")) or self.missing_ledger() is not None:
            return
        from interlock.storage.sqlite import SQLiteStore

        store = self.store
        if isinstance(store, SQLiteStore):
            store.verify_ahead()

    def missing_ledger(self) -> Path | None:
        """The SQLite ledger file this context names when it does not exist (else None).

        Commands that only read use it to answer without creating a state directory.

        Raises:
            StorageError: the file is gone from beside the runs it held (moved or deleted):
                every command says so the same way, with exit 5.
        """
        url = self.store_url
        if url and not url.startswith("sqlite:"):
            return None
        from interlock.runtime.home import Home

        state_dir = Home.at(self.home).root
        path = Path(url.removeprefix("sqlite://")) if url else state_dir / "ledger.db"
        if path.exists():
            return None
        from interlock.storage.sqlite import ledger_lost, lost_ledger

        if ledger_lost(path, state_dir):
            raise StorageError(lost_ledger(path, state_dir))
        if path.exists():  # made by a process starting the first run, since the look above
            return None
        return path

    def reader(self, run_id: str) -> Interlock:
        """The API object for a command that only reads `run_id`: an unknown run (and no
        ledger at all) is an error that creates nothing."""
        self._refuse_missing(run_id)
        return self.app

    def ledger_reader(self, run_id: str) -> Store:
        """The ledger alone for a command that only reads `run_id`, as `reader` checks it,
        without loading the engine."""
        self._refuse_missing(run_id)
        return self.store

    def _refuse_missing(self, run_id: str) -> None:
        missing = self.missing_ledger()
        if missing is not None:
            raise RunNotFound(
                f"no run matches {run_id!r}: there is no ledger at {missing} (runs started "
                "elsewhere need --home or --store; see 'interlock runs')"
            )


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
            err.print(f"[red]error:[/] {escape(_where(exc))}", markup=True)
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(int(ExitCode.INTERRUPTED))
        except BrokenPipeError:
            end_on_closed_pipe()
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except ModuleNotFoundError as exc:
            extra = EXTRAS.get((exc.name or "").partition(".")[0])
            if debug or extra is None:
                raise
            err.print(
                f"error: {exc.name} is not installed: this needs interlock's optional "
                f"{extra!r} extra: pip install 'interlock[{extra}]' (in a clone of the "
                f"repository: pip install -e '.[{extra}]')",
                soft_wrap=True,
            )
            sys.exit(int(ExitCode.MISSING_EXTRA))
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


# The top-level modules of the optional extras (pyproject's optional-dependencies): a
# command that imports one that is missing says which extra to install, not an internal error.
EXTRAS = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "redis": "redis",
    "cryptography": "sign",
    "fastapi": "server",
    "fastapi_offline": "server",
    "uvicorn": "server",
    "jwt": "server",
    "prometheus_client": "server",
    "croniter": "server",
    "websockets": "server",
    "httpx": "server",
    "mcp": "mcp",
    "opentelemetry": "otel",
}


def _where(exc: InterlockError) -> str:
    """The message, with the ledger searched named when a run or a batch was not found in
    it: a person in the wrong directory sees why (the API's own message names no path)."""
    from interlock.storage.batches import BatchNotFound

    batch = isinstance(exc, BatchNotFound)
    if not (batch or isinstance(exc, RunNotFound)) or "no ledger at" in exc.message:
        return exc.message
    current = click.get_current_context(silent=True)
    ctx = current.find_object(Ctx) if current is not None else None
    if ctx is None:
        return exc.message
    from interlock.runtime.home import Home

    place = ctx.store_url or str(Home.at(ctx.home).root / "ledger.db")
    if not batch:
        message = exc.message.removesuffix(" (see 'interlock runs')")
        return (
            f"{message} in {place} (runs started elsewhere need --home or --store; "
            "see 'interlock runs')"
        )
    message = exc.message.removesuffix(" (see 'interlock batches')")
    where = f"in {place}" if ctx.store_url or Path(place).exists() else f"(no ledger at {place})"
    return (
        f"{message} {where}; a batch started elsewhere needs --home DIR or --store URL, given "
        "before the command ('interlock --home DIR batch status ID'); 'interlock batches' "
        "lists this ledger's"
    )


def escape(text: str) -> str:
    """Text made safe to interpolate into rich markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


pass_ctx = click.make_pass_decorator(Ctx)


def parse_inputs(pairs: tuple[str, ...]) -> dict[str, str]:
    """`k=v` pairs into a dict."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--input")
        if key in values:  # the last one would win unseen
            raise click.BadParameter(
                f"{key!r} is given twice ({key}={values[key]} and {pair}); give it once",
                param_hint="--input",
            )
        values[key] = value
    return values


def when(timestamp: float) -> str:
    """Local time, to the second."""
    return _second(int(timestamp))


@functools.lru_cache(maxsize=4096)
def _second(second: int) -> str:
    # A long history has many events in each second: each second is formatted once.
    try:
        return dt.datetime.fromtimestamp(second).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):  # a recorded time no date can show
        return "after 9999-12-31" if second > 0 else "before 0001-01-01"


def drive_in_foreground(app: Interlock, run_id: str, *, since: int | None = None) -> int:
    """Drive a run with a live display; see `interlock.cli.foreground.drive_in_foreground`."""
    from interlock.cli.foreground import drive_in_foreground as drive

    return drive(app, run_id, since=since)


def driven_elsewhere(app: Interlock, run_id: str) -> bool:
    """True when a live orchestrator holds the run's lease."""
    from interlock.cli.foreground import driven_elsewhere as elsewhere

    return elsewhere(app, run_id)


def terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM outside the event loop (while a run is being set up): like Ctrl-C."""
    raise KeyboardInterrupt


def install_terminate_handler() -> None:
    """Handle SIGTERM like Ctrl-C in a command that drives runs (systemd, Docker and
    Kubernetes stop a process with SIGTERM)."""
    if sys.platform != "win32":
        signal.signal(signal.SIGTERM, terminate_as_interrupt)


def driver_of(record: RunRecord) -> str | None:
    """The live orchestrator holding the run's lease (host:pid:nonce), or None: the lease
    was handed back, ran out, or its holder's process on this host is gone."""
    from interlock.runtime.leases import driver_of as live_driver

    return live_driver(record, time.time())
