"""Commands of the iteration loop: rerun a run (or plan it), compare two runs."""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import click

from interlock.cli.base import (
    COUNT,
    Ctx,
    drive_in_foreground,
    err,
    handle_errors,
    install_terminate_handler,
    out,
    parse_inputs,
    pass_ctx,
    when,
)
from interlock.errors import UsageError


@click.command()
@click.argument("run_id")
@click.option("--from", "from_phase", metavar="PHASE", help="Run this phase and all after it.")
@click.option("--workflow", "-w", type=click.Path(dir_okay=False), help="An edited workflow file.")
@click.option(
    "--pipeline",
    help="The pipeline of --workflow to run (default: the source run's; a file without it "
    "is refused).",
)
@click.option("--topic", "-t", help="A new topic (default: the source run's).")
@click.option("--input", "-i", "inputs", multiple=True, help="Change an input, KEY=VALUE.")
@click.option("--run-id", "new_run_id", help="Choose the new run's id (default: generated).")
@click.option("--dry-run", is_flag=True, help="Only say what would be reused and what would run.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the plan as JSON.")
@click.option("--no-cache", is_flag=True, help="Reuse only from RUN_ID, never from the cache.")
@click.option(
    "--trust-bundle",
    is_flag=True,
    help="RUN_ID was imported: run the bundle's own definition (its commands and calls).",
)
@pass_ctx
@handle_errors
def rerun(
    ctx: Ctx,
    run_id: str,
    from_phase: str | None,
    workflow: str | None,
    pipeline: str | None,
    topic: str | None,
    inputs: tuple[str, ...],
    new_run_id: str | None,
    dry_run: bool,
    as_json: bool,
    no_cache: bool,
    trust_bundle: bool,
) -> None:
    """Start a new run from RUN_ID, reusing every output that would come out the same.

    A task is reused when its fingerprint (worker, rendered task, the outputs it reads, topic
    and inputs) equals the source run's and it comes before --from; everything else runs.
    The source run is left as it is.
    """
    if not dry_run:
        ctx.check_ahead()
    from rich.markup import escape

    app = ctx.reader(run_id)  # a source that cannot exist is refused creating nothing
    changes = {
        "from_phase": from_phase,
        "workflow": workflow,
        "pipeline": pipeline,
        "topic": topic,
        "inputs": parse_inputs(inputs),
        "no_cache": no_cache,
        "trust_bundle": trust_bundle,
    }
    if dry_run:
        plan = app.plan_rerun(run_id, **changes)  # type: ignore[arg-type]
        if as_json:
            click.echo(json.dumps(plan.as_dict(), indent=2))
            return
        for task in plan.tasks:
            action = "[blue]reuse[/]" if task.reuse else "[yellow]run  [/]"
            out.print(
                f"{action} {escape(task.task_id):<24} {escape(task.phase):<14} {escape(task.why)}",
                markup=True,
            )
        for note in plan.notes:
            out.print(f"[cyan]note:[/] {escape(note)}", markup=True)
        if plan.config_line is not None:
            out.print(plan.config_line, soft_wrap=True, markup=False)
        run_count = len(plan.tasks) - plan.reused
        out.print(f"{plan.reused} task(s) reused, {run_count} to run (nothing was called)")
        return
    # The same checks and notes as the plan's, before anything is recorded or paid for.
    prepared = app._prepare_rerun(run_id, **changes)
    for note in prepared.notes:
        err.print(f"note: {note}", soft_wrap=True, markup=False)
    install_terminate_handler()
    new = app._start_rerun(prepared, new_run_id)
    err.print(f"run {new} (rerun of {app.state(new).rerun_of})")
    if prepared.config_line is not None:
        err.print(prepared.config_line, soft_wrap=True, markup=False)
    sys.exit(drive_in_foreground(app, new, since=0))  # a new run: show it from its first event


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--outputs", is_flag=True, help="Show a unified diff of each changed output.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@pass_ctx
@handle_errors
def diff(ctx: Ctx, run_a: str, run_b: str, outputs: bool, as_json: bool) -> None:
    """Compare two runs: per task reused / ran / only in one, outputs, values, cost, and the
    decisions that went differently."""
    from rich.table import Table

    from interlock.cli.display import plain_value, styled
    from interlock.core.reads import show_value

    # With no ledger at all, refused creating nothing.
    result = ctx.reader(run_a).diff(run_a, run_b, outputs=outputs)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    out.print(f"A {result.a}\nB {result.b}")
    for name, (a, b) in result.header.items():
        out.print(f"  {name}: {plain_value(a)} -> {plain_value(b)}")
    table = Table(box=None, padding=(0, 2))
    for column in ("task", "A", "B", "output", "cost A", "cost B", "values that differ"):
        table.add_column(column)
    for task in result.tasks:
        values = "; ".join(
            f"{k}: {show_value(a)} -> {show_value(b)}" for k, (a, b) in task.values.items()
        )
        table.add_row(
            task.task_id,
            styled(task.a),
            styled(task.b),
            task.output,
            # A run without the task spent nothing on it: "-", as its status says, not $0.
            "-" if task.a == "-" else f"${task.cost[0]:.4f}",
            "-" if task.b == "-" else f"${task.cost[1]:.4f}",
            values,
        )
    out.print(table)
    for line in result.decisions or ["decisions: the same"]:
        out.print(line)
    for task in result.tasks:
        if task.text_diff:
            click.echo(task.text_diff, nl=not task.text_diff.endswith("\n"))


@click.group()
def cache() -> None:
    """The cache index: outputs of workers with `cache:` that later runs may reuse."""


@cache.command("list")
@click.option("--limit", default=50, show_default=True, type=COUNT)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@handle_errors
def cache_list(ctx: Ctx, limit: int, as_json: bool) -> None:
    """The newest cache entries: fingerprint, the task and run that made it, its age."""
    from rich.table import Table

    entries = [] if ctx.missing_ledger() is not None else ctx.store.cache_list(limit)
    if as_json:
        rows = [dataclasses.asdict(e) for e in entries]
        click.echo(json.dumps(rows, indent=2))
        return
    if not entries:
        out.print("the cache is empty: give a worker or pipeline 'cache: true' to fill it")
        return
    table = Table(box=None, padding=(0, 2))
    for column in ("fingerprint", "task", "run", "output", "size", "completed"):
        table.add_column(column)
    for e in entries:
        table.add_row(
            e.fingerprint[:12], e.task_id, e.run_id, e.artifact, str(e.size), when(e.completed_at)
        )
    out.print(table)


@cache.command("clear")
@click.option(
    "--older-than",
    metavar="AGE",
    help="Only entries older than AGE (seconds or 30m, 12h, 7d); default: all.",
)
@pass_ctx
@handle_errors
def cache_clear(ctx: Ctx, older_than: str | None) -> None:
    """Forget cache entries (the runs and their outputs stay as they are)."""
    from pydantic import ValidationError

    from interlock.core.workflow import Cache

    before = None
    if older_than is not None:
        try:
            age = Cache.model_validate({"ttl": older_than}).ttl
        except ValidationError:
            raise UsageError(
                f"--older-than {older_than!r}: give seconds or a duration like 30m, 12h, 7d"
            ) from None
        before = time.time() - (age or 0.0)
    removed = 0 if ctx.missing_ledger() is not None else ctx.store.cache_clear(before)
    out.print(f"{removed} cache entr{'y' if removed == 1 else 'ies'} removed")


COMMANDS = [rerun, diff, cache]
