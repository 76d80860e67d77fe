"""The `interlock` command: a thin layer over the Python API.

Errors print one line (or one block for an invalid workflow) and exit with the code of
`interlock.errors.ExitCode`; a traceback appears only with `--debug`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from interlock.api import Interlock
from interlock.cli.display import LiveProgress, describe, styled
from interlock.core.explore import explore
from interlock.core.loader import load_workflow
from interlock.core.state import RunStatus
from interlock.errors import ExitCode, InterlockError, LeaseHeld, UsageError
from interlock.runtime.orchestrator import holder_is_dead
from interlock.storage.base import NewEvent

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


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("pipeline", required=False)
@click.option("--topic", "-t", required=True, help="What the run is about.")
@click.option("--input", "-i", "inputs", multiple=True, help="A pipeline input, KEY=VALUE.")
@click.option("--run-id", help="Choose the run id (default: generated).")
@pass_ctx
@handle_errors
def run(
    ctx: Ctx,
    file: str,
    pipeline: str | None,
    topic: str,
    inputs: tuple[str, ...],
    run_id: str | None,
) -> None:
    """Start a run of PIPELINE from FILE and drive it in the foreground."""
    app = ctx.app
    run_id = app.start(file, pipeline, topic=topic, inputs=parse_inputs(inputs), run_id=run_id)
    err.print(f"run {run_id}")
    sys.exit(drive_in_foreground(app, run_id))


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("pipeline", required=False)
@click.option("--topic", "-t", required=True, help="What the run is about.")
@click.option("--input", "-i", "inputs", multiple=True, help="A pipeline input, KEY=VALUE.")
@pass_ctx
@handle_errors
def submit(ctx: Ctx, file: str, pipeline: str | None, topic: str, inputs: tuple[str, ...]) -> None:
    """Record a run and leave it to whoever drives runs (a server or `interlock orchestrate`)."""
    app = ctx.app
    run_id = app.start(file, pipeline, topic=topic, inputs=parse_inputs(inputs))
    app.orchestrator.release(app.orchestrator.drivers[run_id])
    out.print(run_id)


@cli.command()
@click.argument("run_id")
@click.option("--wait", is_flag=True, help="Wait for another orchestrator's lease to end.")
@pass_ctx
@handle_errors
def resume(ctx: Ctx, run_id: str, wait: bool) -> None:
    """Drive an existing run again (after a crash, Ctrl-C or an approval)."""
    app = ctx.app
    run_id = app.resolve(run_id)
    while True:
        try:
            app.orchestrator.take(run_id)
            break
        except LeaseHeld:
            if not wait:
                raise
            time.sleep(1)
    sys.exit(drive_in_foreground(app, run_id))


def driven_elsewhere(app: Interlock, run_id: str) -> bool:
    """True when a live orchestrator holds the run's lease."""
    record = app.store.get_run(run_id)
    alive = record.lease_owner and (record.lease_expires or 0) > time.time()
    return bool(alive) and not holder_is_dead(record.lease_owner or "")


@cli.command()
@click.argument("run_id")
@click.option("--message", "-m", default="", help="A note kept with the approval.")
@click.option("--no-drive", is_flag=True, help="Only record the approval; don't continue here.")
@pass_ctx
@handle_errors
def approve(ctx: Ctx, run_id: str, message: str, no_drive: bool) -> None:
    """Approve a paused run, then continue it here unless another process drives it."""
    app = ctx.app
    run_id = app.approve(run_id, message)
    if no_drive or driven_elsewhere(app, run_id):
        out.print(f"approval recorded for {run_id}")
        return
    sys.exit(drive_in_foreground(app, run_id))


@cli.command()
@click.argument("run_id")
@click.option("--reason", default="", help="Why (kept in the history).")
@pass_ctx
@handle_errors
def cancel(ctx: Ctx, run_id: str, reason: str) -> None:
    """Cancel a run; its in-flight tasks are stopped."""
    app = ctx.app
    run_id = app.cancel(run_id, reason)
    if driven_elsewhere(app, run_id):
        out.print(f"cancellation sent to the orchestrator driving {run_id}")
        return
    asyncio.run(app.drive_async(run_id))
    out.print(f"{run_id}: {app.state(run_id).status.value}")


@cli.command()
@click.argument("run_id")
@click.argument("text")
@pass_ctx
@handle_errors
def message(ctx: Ctx, run_id: str, text: str) -> None:
    """Add a note to a run's history."""
    out.print(f"message queued for {ctx.app.message(run_id, text)}")


def when(timestamp: float) -> str:
    """Local time, to the second."""
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


@cli.command()
@click.option("--status", help="Only runs with this status.")
@click.option("--pipeline", help="Only runs of this pipeline.")
@click.option("--limit", default=30, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@handle_errors
def runs(ctx: Ctx, status: str | None, pipeline: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    records = ctx.app.store.list_runs(status=status, pipeline=pipeline, limit=limit)
    if as_json:
        rows = [
            {
                "run_id": r.run_id,
                "pipeline": r.pipeline,
                "topic": r.topic,
                "status": r.summary.status,
                "phase": r.summary.phase,
                "cost_usd": r.summary.cost_usd,
                "tokens": r.summary.tokens,
                "created_at": r.created_at,
                "updated_at": r.summary.updated_at,
            }
            for r in records
        ]
        out.print_json(data=rows)
        return
    table = Table(box=None, padding=(0, 2))
    for column in ("run", "pipeline", "status", "phase", "cost", "started", "topic"):
        table.add_column(column)
    for r in records:
        table.add_row(
            r.run_id,
            r.pipeline,
            styled(r.summary.status),
            r.summary.phase or "",
            f"${r.summary.cost_usd:.4f}",
            when(r.created_at),
            r.topic[:40],
        )
    out.print(table if records else "no runs yet: try 'interlock run FILE PIPELINE --topic ...'")


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@handle_errors
def status(ctx: Ctx, run_id: str, as_json: bool) -> None:
    """Show a run: phases, workers, retries, cost, warnings."""
    view = ctx.app.status(run_id)
    if as_json:
        out.print_json(data=view)
        return
    out.print(
        Text(f"{view['pipeline']} ", style="bold"),
        f"{view['run_id']}  ",
        styled(view["status"]),
        f"  topic: {view['topic']}",
    )
    table = Table(box=None, padding=(0, 2))
    for column in ("phase", "worker", "status", "attempt", "visit", "cost", "output"):
        table.add_column(column)
    for phase in view["phases"]:
        for index, (role, w) in enumerate(phase["workers"].items()):
            table.add_row(
                phase["id"] if index == 0 else "",
                role,
                styled(w["status"]),
                str(w.get("attempt", "")),
                str(w.get("visit", "")),
                f"${w.get('cost_usd', 0):.4f}",
                w.get("output") or "",
            )
    out.print(table)
    out.print(
        f"cost ${view['cost_usd']:.4f}  tokens {view['tokens']}  retries {view['retry_count']}"
    )
    for warning in view["warnings"]:
        out.print(f"[yellow]warning:[/] {escape(warning)}", markup=True)
    if view["failure"]:
        out.print(f"[red]{view['status']}:[/] {escape(view['failure'])}", markup=True)
    if view["final"]:
        out.print(f"final: {ctx.app.run_dir(view['run_id']) / 'final.md'}")


@cli.command()
@click.argument("run_id")
@click.option("--since", default=0, help="Only events after this sequence number.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
@handle_errors
def events(ctx: Ctx, run_id: str, since: int, as_json: bool) -> None:
    """Print a run's history."""
    for stored in ctx.app.events(run_id, since):
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "seq": stored.seq,
                        "at": stored.at,
                        "kind": stored.kind,
                        "data": stored.data,
                        "rule": stored.rule,
                        "why": stored.why,
                    }
                )
            )
        else:
            line = describe(NewEvent(event=stored.event, rule=stored.rule, why=stored.why))
            out.print(f"{stored.seq:>4} {when(stored.at)} {stored.kind:<16} {line}")


@cli.command()
@click.argument("run_id")
@click.option("--prompt", "prompt_of", metavar="TASK", help="Show the prompt TASK was sent.")
@pass_ctx
@handle_errors
def explain(ctx: Ctx, run_id: str, prompt_of: str | None) -> None:
    """Each decision with the rule that made it and why (or the exact prompt of a task)."""
    if prompt_of is not None:
        prompts = ctx.app.run_dir(run_id) / "prompts"
        found = sorted(prompts.glob(f"{prompt_of}*.md")) if prompts.is_dir() else []
        if not found:
            raise UsageError(
                f"no prompt was recorded for {prompt_of!r} (only model tasks have one)"
            )
        for path in found:
            out.print(f"== {path.stem} (task.attempt)")
            click.echo(path.read_text())
        return
    for stored in ctx.app.events(run_id):
        if stored.rule:
            out.print(
                f"{stored.seq:>4} {when(stored.at)} [bold]{stored.rule:<12}[/] "
                f"{stored.kind:<16} {escape(stored.why or '')}",
                markup=True,
            )
        else:
            out.print(
                f"{stored.seq:>4} {when(stored.at)} [dim]{'observed':<12} {stored.kind:<16}[/]",
                markup=True,
            )


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (the default).")
@pass_ctx
@handle_errors
def ledger(ctx: Ctx, run_id: str, as_json: bool) -> None:
    """The dispatch ledger: every task, dispatched before it started."""
    click.echo(json.dumps(ctx.app.ledger(run_id), indent=2))


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False), default="workflow.yaml")
@handle_errors
def init(file: str) -> None:
    """Write a starter workflow file."""
    target = Path(file)
    if target.exists():
        err.print(f"error: {target} already exists; choose another name")
        sys.exit(int(ExitCode.BAD_INPUT))
    target.write_text(STARTER.read_text())
    out.print(
        f"wrote {target}: try 'interlock check {target}' then "
        f"'interlock run {target} research --topic \"...\"'"
    )


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@pass_ctx
@handle_errors
def check(ctx: Ctx, file: str) -> None:
    """Validate FILE, explore every path its pipelines can take, and resolve its models."""
    from interlock.providers import ModelConfig
    from interlock.runtime.home import Home
    from interlock.runtime.orchestrator import model_aliases

    workflow = load_workflow(file)
    problems: list[str] = []
    try:
        config = ModelConfig.load([Path(file).parent.absolute(), Home.at(ctx.home).root])
    except Exception as exc:  # an invalid interlock.toml: its message names the file
        raise UsageError(str(exc)) from None
    for name, definition in workflow.definitions.items():
        problems += explore(definition).problems
        for alias in config.missing_models(sorted(model_aliases(definition))):
            searched = ", ".join(str(p) for p in config.searched) or "no file"
            problems.append(
                f"pipeline {name!r}: model {alias!r} is not configured (looked in {searched}); "
                f"add [models.{alias}] to interlock.toml"
            )
    if problems:
        err.print(f"{file}: {len(problems)} problem(s)")
        for problem in problems:
            err.print(f"  - {problem}")
        sys.exit(int(ExitCode.BAD_INPUT))
    names = ", ".join(workflow.definitions)
    out.print(f"{file}: ok ({names})")


@cli.command()
@click.option("--concurrency", "-c", default=4, show_default=True, help="Tasks run at once.")
@click.option("--kinds", default="command,model,call", show_default=True, help="Kinds taken.")
@click.option("--tags", default="", help="Tags this worker offers (comma-separated).")
@click.option(
    "--lease-ttl",
    default=15.0,
    show_default=True,
    help="Seconds before a silent worker's tasks are handed out again.",
)
@click.option("--grace", default=30.0, show_default=True, help="Seconds to finish on SIGTERM.")
@click.option("--redis", "redis_url", envvar="INTERLOCK_REDIS", help="Take tasks from Redis.")
@click.option(
    "--store", "store_here", help="Ledger URL (as the global --store, given after the command)."
)
@pass_ctx
@handle_errors
def worker(
    ctx: Ctx,
    store_here: str | None,
    concurrency: int,
    kinds: str,
    tags: str,
    lease_ttl: float,
    grace: float,
    redis_url: str | None,
) -> None:
    """Run queued tasks of a shared PostgreSQL ledger (--store) until SIGTERM."""
    if store_here:
        ctx.store_url = store_here
    from interlock.distributed.cli import run_worker

    run_worker(
        ctx.store_url,
        ctx.home,
        concurrency=concurrency,
        kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()),
        tags=tuple(t.strip() for t in tags.split(",") if t.strip()),
        lease_ttl=lease_ttl,
        grace=grace,
        redis_url=redis_url,
    )


@cli.command()
@click.option("--capacity", default=200, show_default=True, help="Runs driven at most.")
@click.option("--lease-ttl", default=15.0, show_default=True, help="Run lease (seconds).")
@click.option("--priority", multiple=True, help="PIPELINE=N: higher goes first.")
@click.option(
    "--limit",
    multiple=True,
    help="SCOPE=N: at most N tasks at once across all "
    "workers; SCOPE is pipeline:NAME, kind:KIND or model:ALIAS (-1 removes).",
)
@click.option("--redis", "redis_url", envvar="INTERLOCK_REDIS", help="Announce tasks on Redis.")
@click.option(
    "--queue-retention",
    default=3600.0,
    show_default=True,
    help="Seconds a finished queue entry of an ended run is kept (-1: for ever).",
)
@click.option(
    "--store", "store_here", help="Ledger URL (as the global --store, given after the command)."
)
@pass_ctx
@handle_errors
def orchestrate(
    ctx: Ctx,
    store_here: str | None,
    capacity: int,
    lease_ttl: float,
    priority: tuple[str, ...],
    limit: tuple[str, ...],
    redis_url: str | None,
    queue_retention: float,
) -> None:
    """Drive runs of a shared PostgreSQL ledger that no live orchestrator holds."""
    if store_here:
        ctx.store_url = store_here
    from interlock.distributed.cli import run_orchestrate

    run_orchestrate(
        ctx.store_url,
        ctx.home,
        capacity=capacity,
        lease_ttl=lease_ttl,
        priorities=priority,
        limits=limit,
        redis_url=redis_url,
        queue_retention=queue_retention,
    )


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, help="Port (0: any free port).")
@click.option(
    "--workflows", "-w", multiple=True, type=click.Path(dir_okay=False), help="Workflow file."
)
@click.option("--auth-secret", envvar="INTERLOCK_AUTH_SECRET", help="HS256 secret for tokens.")
@click.option("--insecure", is_flag=True, help="Allow serving off loopback without auth.")
@click.option("--allow-origin", multiple=True, help="Another web origin allowed to connect.")
@click.option("--webhook", multiple=True, help="URL to POST notifications to.")
@click.option("--rate-limit", default=30.0, show_default=True, help="Actions/minute per token.")
@click.option("--no-schedules", is_flag=True, help="Don't start scheduled runs here.")
@click.option("--otel", is_flag=True, help="Emit OpenTelemetry spans (needs the otel extra).")
@click.option("--issue-token", metavar="SCOPES", help="Print a token (e.g. read,operate), exit.")
@click.option("--token-ttl", default=86400.0, show_default=True, help="Token lifetime (s).")
@click.option(
    "--dispatch",
    type=click.Choice(["local", "queue"]),
    default="local",
    show_default=True,
    help="Run tasks here, or queue them for `interlock worker` processes (PostgreSQL store).",
)
@click.option(
    "--store", "store_here", help="Ledger URL (as the global --store, given after the command)."
)
@pass_ctx
@handle_errors
def serve(
    ctx: Ctx,
    store_here: str | None,
    host: str,
    port: int,
    workflows: tuple[str, ...],
    auth_secret: str | None,
    insecure: bool,
    allow_origin: tuple[str, ...],
    webhook: tuple[str, ...],
    rate_limit: float,
    no_schedules: bool,
    otel: bool,
    issue_token: str | None,
    token_ttl: float,
    dispatch: str,
) -> None:
    """Serve the HTTP API, live streams and dashboard, and drive runs (Ctrl-C stops)."""
    if store_here:
        ctx.store_url = store_here
    from interlock.runtime.home import Home
    from interlock.server.config import ServerConfig

    if issue_token is not None:
        from interlock.server.auth import issue_token as make_token

        if not auth_secret:
            raise click.UsageError("--issue-token needs --auth-secret (or INTERLOCK_AUTH_SECRET)")
        scopes = [s.strip() for s in issue_token.split(",") if s.strip()]
        try:
            out.print(make_token(auth_secret, scopes, ttl=token_ttl), soft_wrap=True)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return
    from interlock.server.run import serve as run_server

    config = ServerConfig(
        home=Home.at(ctx.home).root,
        store_url=ctx.store_url,
        dispatch=dispatch,
        host=host,
        port=port,
        workflows=[Path(w) for w in workflows],
        auth_secret=auth_secret or None,
        insecure=insecure,
        allowed_origins=list(allow_origin),
        webhooks=list(webhook),
        rate_limit=rate_limit,
        schedules=not no_schedules,
        otel=otel,
    )
    run_server(config, log_level="debug" if ctx.debug else "warning")


@cli.command()
@click.argument("run_id")
@click.option("--server", "server_url", help="Follow through a server (http://host:port).")
@click.option("--token", envvar="INTERLOCK_TOKEN", help="Bearer token for --server.")
@click.option("--since", default=0, help="Only events after this sequence number.")
@pass_ctx
@handle_errors
def watch(ctx: Ctx, run_id: str, server_url: str | None, token: str | None, since: int) -> None:
    """Follow a run's events live until it ends (Ctrl-C stops watching, not the run)."""
    from interlock.server import watch as watching

    if server_url:
        messages = watching.from_server(server_url, run_id, since, token)
    else:
        messages = watching.from_store(ctx.app, run_id, since)
    last = watching.watch(out, run_id, messages)
    state = last.get("state")
    codes = {"delivered": ExitCode.OK, "paused": ExitCode.PAUSED}
    sys.exit(int(codes.get(state or "", ExitCode.RUN_FAILED if state else ExitCode.OK)))


def main() -> None:
    """Console entry point."""
    logging.captureWarnings(True)
    cli(standalone_mode=True)
