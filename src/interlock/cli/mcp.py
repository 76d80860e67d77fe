"""`interlock mcp`: serve the MCP tools over stdio, for coding agents and editors."""

from __future__ import annotations

from pathlib import Path

import click

from interlock.cli.base import Ctx, handle_errors, pass_ctx
from interlock.errors import MissingExtra, UsageError

MISSING = (
    "interlock mcp needs the MCP SDK, which is an optional extra: pip install 'interlock[mcp]'"
)


@click.command()
@click.option(
    "--workflows",
    "-w",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Workflow file whose pipelines may be started (default: those of this directory).",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(["read", "operate"]),
    help="Only these scopes (default: all); '--scope read' serves a read-only server.",
)
@pass_ctx
@handle_errors
def mcp(ctx: Ctx, workflows: tuple[str, ...], scopes: tuple[str, ...]) -> None:
    """Serve MCP over stdin/stdout: tools to list pipelines, start, rerun, follow, approve,
    reject, edit and cancel runs, start and follow batches, and run outputs as resources.

    Runs started here are driven while the client stays connected. Add it to a client with
    the command 'interlock mcp' (see docs/mcp.md).
    """
    if scopes and "read" not in scopes:
        raise UsageError("--scope: an MCP client needs 'read' to list tools; add --scope read")
    try:
        import mcp.server.mcpserver  # noqa: F401  (only to know it is there)
    except ImportError:
        raise MissingExtra(MISSING) from None
    import asyncio

    from interlock.mcpserver.pipelines import Pipelines
    from interlock.mcpserver.stdio import serve_stdio

    pipelines = Pipelines.of_files([Path(w) for w in workflows])
    app = ctx.app
    try:
        asyncio.run(serve_stdio(app, pipelines, list(scopes) or None))
    finally:
        app.close()


COMMANDS = [mcp]
