"""Commands of the HTTP server and of following a run live."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from interlock.cli.base import PORT, SEQUENCE, Ctx, handle_errors, out, pass_ctx, real_console
from interlock.errors import ExitCode


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=PORT, help="Port (0: any free port).")
@click.option(
    "--workflows", "-w", multiple=True, type=click.Path(dir_okay=False), help="Workflow file."
)
@click.option(
    "--auth-secret",
    envvar="INTERLOCK_AUTH_SECRET",
    help="HS256 secret for tokens. On the command line it is visible to other users of the "
    "machine (ps): prefer --auth-secret-file or the environment variable.",
)
@click.option(
    "--auth-secret-file",
    envvar="INTERLOCK_AUTH_SECRET_FILE",
    type=click.Path(dir_okay=False),
    help="A file holding the HS256 secret for tokens (its first line).",
)
@click.option("--insecure", is_flag=True, help="Allow serving off loopback without auth.")
@click.option("--allow-origin", multiple=True, help="Another web origin allowed to connect.")
@click.option(
    "--webhook",
    multiple=True,
    envvar="INTERLOCK_WEBHOOKS",
    help="URL to POST notifications to (INTERLOCK_WEBHOOKS: several, space-separated, kept "
    "out of the command line other users can read).",
)
@click.option("--rate-limit", default=30.0, show_default=True, help="Actions/minute per token.")
@click.option(
    "--read-rate-limit", default=1200.0, show_default=True, help="Reads/minute per token."
)
@click.option(
    "--header-timeout", default=10.0, show_default=True, help="Seconds for a request's headers."
)
@click.option(
    "--body-timeout", default=30.0, show_default=True, help="Seconds for a request's body."
)
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
@click.option(
    "--hooks",
    "hooks_file",
    type=click.Path(dir_okay=False),
    help="An interlock.toml whose [hooks.*] send signals (default: ./interlock.toml, if any).",
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
    auth_secret_file: str | None,
    insecure: bool,
    allow_origin: tuple[str, ...],
    webhook: tuple[str, ...],
    rate_limit: float,
    read_rate_limit: float,
    header_timeout: float,
    body_timeout: float,
    no_schedules: bool,
    otel: bool,
    issue_token: str | None,
    token_ttl: float,
    dispatch: str,
    hooks_file: str | None,
) -> None:
    """Serve the HTTP API, live streams and dashboard, and drive runs (Ctrl-C stops)."""
    if store_here:
        ctx.store_url = store_here
    from interlock.runtime.home import Home
    from interlock.server.config import ServerConfig, check_secret_length, read_secret_file

    if auth_secret_file:
        if auth_secret:
            raise click.UsageError(
                "give the token secret once: --auth-secret-file, or --auth-secret (or "
                "INTERLOCK_AUTH_SECRET), not both"
            )
        auth_secret = read_secret_file(Path(auth_secret_file))
    if issue_token is not None:
        from interlock.server.auth import issue_token as make_token

        if not auth_secret:
            raise click.UsageError(
                "--issue-token needs the token secret: --auth-secret-file (or "
                "INTERLOCK_AUTH_SECRET_FILE), or INTERLOCK_AUTH_SECRET"
            )
        check_secret_length(auth_secret)
        scopes = [s.strip() for s in issue_token.split(",") if s.strip()]
        try:
            out.print(make_token(auth_secret, scopes, ttl=token_ttl), soft_wrap=True)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return
    from interlock.server.hooks import load_hooks
    from interlock.server.run import serve as run_server

    hooks = {}
    if hooks_file is not None or Path("interlock.toml").is_file():
        hooks = load_hooks(Path(hooks_file or "interlock.toml"))

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
        read_rate_limit=read_rate_limit,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        schedules=not no_schedules,
        otel=otel,
        hooks=hooks,
    )
    run_server(config, log_level="debug" if ctx.debug else "warning")


@click.command()
@click.argument("run_id")
@click.option("--server", "server_url", help="Follow through a server (http://host:port).")
@click.option("--token", envvar="INTERLOCK_TOKEN", help="Bearer token for --server.")
@click.option("--since", default=0, type=SEQUENCE, help="Only events after this sequence number.")
@pass_ctx
@handle_errors
def watch(ctx: Ctx, run_id: str, server_url: str | None, token: str | None, since: int) -> None:
    """Follow a run's events live until it ends (Ctrl-C stops watching, not the run)."""
    from interlock.server import watch as watching

    if server_url:
        messages = watching.from_server(server_url, run_id, since, token)
    else:
        messages = watching.from_store(ctx.reader(run_id), run_id, since)
    last = watching.watch(real_console(out), run_id, _printable(messages))
    state = last.get("state")
    codes = {"delivered": ExitCode.OK, "paused": ExitCode.PAUSED}
    sys.exit(int(codes.get(state or "", ExitCode.RUN_FAILED if state else ExitCode.OK)))


def _printable(messages: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """`messages` with the text they show (an event's line, a streamed fragment) made safe
    for a terminal: a topic or a model's answer may hold escape sequences."""
    from interlock.cli.printable import printable

    for message in messages:
        shown = dict(message)
        for key in ("message", "text"):
            if isinstance(shown.get(key), str):
                shown[key] = printable(shown[key])
        yield shown


COMMANDS = [serve, watch]
