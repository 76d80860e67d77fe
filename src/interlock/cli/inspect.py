"""Commands that read runs: lists, status, history, decisions, the dispatch ledger."""

from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from interlock.cli.base import Ctx, handle_errors, out, pass_ctx, when
from interlock.cli.display import describe, styled
from interlock.errors import UsageError
from interlock.storage.base import NewEvent


@click.command()
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


@click.command()
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
    if view.get("rerun_of"):
        start = f", everything from phase {view['rerun_from']!r} ran again" * bool(
            view.get("rerun_from")
        )
        out.print(f"rerun of {view['rerun_of']}{start}; reused outputs cost nothing here")
    for warning in view["warnings"]:
        out.print(f"[yellow]warning:[/] {escape(warning)}", markup=True)
    if view["failure"]:
        out.print(f"[red]{view['status']}:[/] {escape(view['failure'])}", markup=True)
    if view["final"]:
        out.print(f"final: {ctx.app.run_dir(view['run_id']) / 'final.md'}")


@click.command()
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


@click.command()
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
            why = f" {escape(stored.why)}" if stored.kind == "task_reused" and stored.why else ""
            out.print(
                f"{stored.seq:>4} {when(stored.at)} [dim]{'observed':<12} {stored.kind:<16}[/]"
                f"{why}",
                markup=True,
            )


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (the default).")
@pass_ctx
@handle_errors
def ledger(ctx: Ctx, run_id: str, as_json: bool) -> None:
    """The dispatch ledger: every task, dispatched before it started."""
    click.echo(json.dumps(ctx.app.ledger(run_id), indent=2))


COMMANDS = [runs, status, events, explain, ledger]
