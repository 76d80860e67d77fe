"""`interlock batch`: one run per row of a dataset (JSONL or CSV), tracked as one thing.

`interlock batch FILE PIPELINE --inputs data.csv` is `interlock batch start ...`: every row is
checked against the pipeline's inputs, the batch and all its rows are recorded in one
transaction, and the rows' runs are started `--concurrency` at a time. `resume`, `status`,
`retry`, `cancel` and `export` name the batch; `interlock batches` lists them.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from interlock.cli.base import COUNT, Ctx, err, escape, handle_errors, out, pass_ctx
from interlock.core.batches import DEFAULT_BATCH_WAITING, MAX_BATCH_WAITING, MAX_CONCURRENCY
from interlock.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from interlock.api import Interlock
    from interlock.core.batches import RowInputs
    from interlock.core.loader import Definition
    from interlock.storage.batches import BatchRecord, BatchRow
    from interlock.workloads.batch_status import BatchStatus
    from interlock.workloads.batches import Snapshot

BUDGET = click.FloatRange(min=0.0, min_open=True, max=1e12)
CONCURRENCY = click.IntRange(1, MAX_CONCURRENCY)  # runs of the batch at once
WAITING = click.IntRange(0, MAX_BATCH_WAITING)  # rows let wait beside --concurrency (0: none)


class BatchGroup(click.Group):
    """A group whose first argument, when it names no subcommand, starts a batch:
    `interlock batch FILE ...` is `interlock batch start FILE ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            if not Path(args[0]).exists():
                close = difflib.get_close_matches(args[0], list(self.commands), n=1)
                if close:  # `batch stauts B` is a typo, not a workflow file named stauts
                    raise click.UsageError(
                        f"no batch command {args[0]!r} and no file of that name: did you mean "
                        f"'interlock batch {close[0]}'? ('interlock batch --help' lists them)",
                        ctx,
                    )
            args = ["start", *args]
        return super().parse_args(ctx, args)


@click.group(cls=BatchGroup)
def batch() -> None:
    """Run PIPELINE once per row of a JSONL or CSV file, tracked as one batch.

    `interlock batch FILE PIPELINE --inputs data.csv` starts one (see `batch start --help`).
    """


@batch.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("pipeline", required=False)
@click.option("--inputs", "inputs_file", required=True, help="The rows: a .jsonl or .csv file.")
@click.option("--topic-field", help="The column that is each run's topic (default: 'topic').")
@click.option(
    "--ignore-column",
    "ignore_columns",
    multiple=True,
    metavar="NAME",
    help="A column that is no input (an id, notes) to leave out of every row; repeatable.",
)
@click.option(
    "--concurrency",
    type=CONCURRENCY,
    default=4,
    show_default=True,
    help=f"Runs at once (at most {MAX_CONCURRENCY:,}).",
)
@click.option(
    "--batch-waiting",
    type=WAITING,
    default=DEFAULT_BATCH_WAITING,
    show_default=True,
    help="Rows whose run only waits for provider-batch answers that do not count against "
    f"--concurrency (0: every row in flight counts; at most {MAX_BATCH_WAITING:,}).",
)
@click.option("--batch-id", help="Choose the batch id (default: generated).")
@click.option("--max-cost-usd", type=BUDGET, help="The batch's budget: no row starts past it.")
@click.option(
    "--tolerate",
    metavar="N|P%",
    help="Rows that may fail (a count, or a percentage of the rows) before no more start and "
    "the batch fails (default: every row starts, however many fail).",
)
@click.option("--dry-run", is_flag=True, help="Check the rows and print the quote; record nothing.")
@click.option(
    "--variant",
    "variant_specs",
    multiple=True,
    metavar="NAME=FILE",
    help="An experiment: the same rows through FILE's pipeline too, its shared tasks reused.",
)
@pass_ctx
@handle_errors
def start(
    ctx: Ctx,
    file: str,
    pipeline: str | None,
    inputs_file: str,
    topic_field: str | None,
    ignore_columns: tuple[str, ...],
    concurrency: int,
    batch_waiting: int,
    batch_id: str | None,
    max_cost_usd: float | None,
    tolerate: str | None,
    dry_run: bool,
    variant_specs: tuple[str, ...],
) -> None:
    """Check every row of --inputs, record the batch, then run its rows.

    With --variant NAME=FILE (several allowed), an experiment: every row runs through the
    first file's pipeline (the variant `base`) and through each variant's; a variant's task
    whose fingerprint equals the base row's is reused, not paid again.
    """
    import time

    from interlock.cli.base import install_terminate_handler
    from interlock.cli.quote import refuse_unrunnable_calls
    from interlock.core.batches import batch_tolerance
    from interlock.core.loader import load_workflow
    from interlock.runtime.home import Home
    from interlock.runtime.models import ModelRunner
    from interlock.runtime.new_runs import refuse_broken_config
    from interlock.workloads.batches import check_batch_id, new_batch_id, record_batch

    tolerance = batch_tolerance(tolerate, "--tolerate")
    workflow = load_workflow(file)
    if pipeline is None and len(workflow.definitions) == 1:
        pipeline = next(iter(workflow.definitions))
    if pipeline is None:
        names = ", ".join(sorted(workflow.definitions))
        raise click.UsageError(f"{file}: name the pipeline to run ({names})")
    if not variant_specs and click.get_current_context().info_name == "experiment":
        raise click.UsageError(
            "an experiment runs the rows through variants: give --variant NAME=FILE (once or "
            "more); without one, 'interlock batch' runs a plain batch"
        )
    definition = workflow.get(pipeline)
    rows = read_rows(inputs_file, definition, topic_field, ignore_columns)
    from interlock.cli.batch_variants import load_variants, print_plan, variant_ids

    variants = load_variants(
        file, definition, variant_specs, inputs_file, topic_field, ignore_columns
    )
    from interlock.cli.workflows import say_typing_warnings

    # `country: NO` is false: said before anything is recorded, for each file read.
    say_typing_warnings(file, *(d.source for _, d in variants if d.source))
    if batch_id is not None:
        for one in variant_ids(batch_id, variants):
            check_batch_id(one)
            refuse_taken_id(ctx, one)
    models = ModelRunner(Home.at(ctx.home).root)
    for each in (definition, *(d for _, d in variants)):
        refuse_broken_config(models, each)
        refuse_unrunnable_calls(each.source or file, pipeline, each)
    say_config(file, [definition, *(d for _, d in variants)], Home.at(ctx.home).root)
    quote_batch(file, definition, rows, Home.at(ctx.home).root, max_cost_usd, full=dry_run)
    if variants:
        print_plan(models, definition, variants, len(rows), stream=out if dry_run else err)
    if dry_run:
        out.print(f"dry run: {len(rows)} row(s) of {inputs_file} are valid; nothing was recorded")
        return
    install_terminate_handler()  # from here on, SIGTERM stops the batch as Ctrl-C does
    ctx.check_ahead()
    app = ctx.app
    now = time.time()
    # An experiment's generated id leaves room for its variants' names after it.
    named = definition.name[:8] if variants else definition.name
    record = record_batch(
        app,
        definition,
        rows,
        batch_id=batch_id or new_batch_id(named, now),
        inputs_file=str(Path(inputs_file).absolute()),
        concurrency=concurrency,
        max_cost_usd=max_cost_usd,
        now=now,
        variants=variants,
        tolerate=tolerance,
        batch_waiting=batch_waiting,
    )
    err.print(f"batch {record.batch_id}: {record.rows} row(s) of pipeline {pipeline!r} recorded")
    if variants:
        err.print(
            f"experiment {record.batch_id}: variants "
            + ", ".join(variant_ids(record.batch_id, variants))
            + f"; compare them with 'interlock compare {record.batch_id}'"
        )
    sys.exit(drive(app, record.batch_id))


@batch.command()
@click.argument("batch_id")
@click.option(
    "--concurrency",
    type=CONCURRENCY,
    help=f"Change how many runs run at once (at most {MAX_CONCURRENCY:,}).",
)
@click.option("--max-cost-usd", type=BUDGET, help="Change the batch's budget.")
@click.option(
    "--batch-waiting",
    type=WAITING,
    help="Change how many rows waiting only for provider-batch answers do not count against "
    f"--concurrency (at most {MAX_BATCH_WAITING:,}).",
)
@pass_ctx
@handle_errors
def resume(
    ctx: Ctx,
    batch_id: str,
    concurrency: int | None,
    max_cost_usd: float | None,
    batch_waiting: int | None,
) -> None:
    """Go on with a batch: rows not started start, runs in flight are driven on, none twice."""
    from interlock.cli.base import install_terminate_handler
    from interlock.storage.batches import batch_ledger

    install_terminate_handler()
    app = opened(ctx, batch_id)
    ledger = batch_ledger(app.store)
    record = ledger.get_batch(batch_id)
    refuse_cancelled(record, f"interlock batch resume {batch_id}")
    if concurrency is not None or max_cost_usd is not None or batch_waiting is not None:
        ledger.set_limits(
            batch_id,
            concurrency or record.concurrency,
            max_cost_usd if max_cost_usd is not None else record.max_cost_usd,
            record.batch_waiting if batch_waiting is None else batch_waiting,
        )
    sys.exit(drive(app, batch_id))


@batch.command()
@click.argument("batch_id")
@click.option("--failed", is_flag=True, help="Give every failed row a new run.")
@click.option(
    "--cancelled",
    is_flag=True,
    help="Undo a cancel: rows cancelled before they started wait again, rows whose run was "
    "cancelled get a new run.",
)
@pass_ctx
@handle_errors
def retry(ctx: Ctx, batch_id: str, failed: bool, cancelled: bool) -> None:
    """Give failed (--failed) or cancelled (--cancelled) rows their next try, then drive the
    batch."""
    from interlock.cli.base import install_terminate_handler
    from interlock.storage.batches import batch_ledger
    from interlock.workloads.commands import retry_cancelled, retry_failed

    if not failed and not cancelled:
        raise UsageError(
            f"'interlock batch retry {batch_id}' needs --failed (the failed rows) or "
            "--cancelled (the rows of a cancelled batch), or both"
        )
    install_terminate_handler()
    app = opened(ctx, batch_id)
    if cancelled:
        given = retry_cancelled(app.store, batch_id)
        err.print(f"batch {batch_id}: {given} cancelled row(s) given their runs again")
    else:
        refuse_cancelled(
            batch_ledger(app.store).get_batch(batch_id),
            f"interlock batch retry {batch_id} --failed",
        )
    if failed:
        given = retry_failed(app.store, batch_id)
        err.print(f"batch {batch_id}: {given} failed row(s) given a new try")
    sys.exit(drive(app, batch_id))


@batch.command()
@click.argument("batch_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the batch and its rows.")
@click.option("--width", type=COUNT, default=40, show_default=True, help="Inputs shown, in chars.")
@pass_ctx
@handle_errors
def status(ctx: Ctx, batch_id: str, as_json: bool, width: int) -> None:
    """A batch's rows: inputs, run, status, cost and the final worker's values."""
    import time

    from interlock.cli.batch_view import budget_line, progress_line, status_table, terminal_width
    from interlock.cli.printable import printable
    from interlock.runtime.home import Home
    from interlock.workloads.batch_status import batch_status

    record, rows = read_batch(ctx, batch_id)
    shown = batch_status(ctx.store, Home.at(ctx.home).live_dir, record, rows, time.time())
    shown = held_by_budget(ctx, shown)
    if as_json:
        out.print_json(json.dumps(shown.as_json()))
        return
    progress = shown.progress
    # Written as it is: the table is aligned already, rich's pass over 10,000 lines only
    # costs time, and a row's control characters are taken out here.
    table = status_table(shown, width=width, line_width=terminal_width())
    click.echo(table.translate(CONTROL))
    if (undriven := shown.undriven_line()) is not None:
        out.print(undriven, soft_wrap=True, markup=False)
    capped = shown.capped
    said = progress_line(progress, None, capped)
    out.print(f"batch {batch_id} ({record.pipeline}): {printable(said)}", markup=False)
    if progress.estimated:
        out.print("~: estimated, a server reported no token counts (four characters a token)")
    if progress.breach is not None:
        out.print(failure_line(batch_id, progress.breach.reason), soft_wrap=True)
    if (budget := budget_line(batch_id, progress)) is not None:
        out.print(budget, soft_wrap=True, markup=False)
    for warning in shown.warnings:
        err.print(f"[bold red]warning:[/] {escape(warning)}", markup=True, soft_wrap=True)
    if record.experiment is not None:
        out.print(
            f"variant {record.variant} of experiment {record.experiment}: "
            f"'interlock compare {record.experiment}' compares its variants"
        )


@batch.command()
@click.argument("batch_id")
@pass_ctx
@handle_errors
def cancel(ctx: Ctx, batch_id: str) -> None:
    """Cancel a batch: rows not started are marked cancelled, runs in flight are stopped (an
    experiment's id: every variant's)."""
    import asyncio
    import time

    from interlock.workloads.commands import cancel_batch

    app = opened(ctx, batch_id)
    done = cancel_batch(app, batch_id, time.time())
    if done.finished:
        out.print(
            f"batch {batch_id} has finished (every row ended): nothing to cancel, nothing recorded"
        )
        return
    if done.undriven:  # nobody drives them: their cancellation is recorded here
        asyncio.run(app.drive_async(*done.undriven))
    out.print(
        f"batch {batch_id} cancelled: {done.unstarted} row(s) not started, "
        f"{len(done.stopped)} run(s) in flight stopped"
    )


@batch.command(name="export")
@click.argument("batch_id")
@click.option("-o", "--output", required=True, help="results.jsonl or results.csv.")
@pass_ctx
@handle_errors
def export_rows(ctx: Ctx, batch_id: str, output: str) -> None:
    """Write every row: inputs, status, final output, extracted values, metrics, cost,
    tokens, run."""
    from interlock.cli.batch_files import write_results
    from interlock.workloads.commands import export_records

    record, rows = read_batch(ctx, batch_id)
    records = export_records(ctx.app, record, rows)
    write_results(output, records)
    out.print(f"{len(records)} row(s) written to {output}")


@click.command()
@click.option("--limit", type=COUNT, default=50, show_default=True)
@click.option(
    "--provider", "provider", is_flag=True, help="List the batches sent to providers' batch APIs."
)
@pass_ctx
@handle_errors
def batches(ctx: Ctx, limit: int, provider: bool) -> None:
    """List batches, newest first: rows, how many are done, failed or running, the spend."""
    from rich.table import Table

    if provider:
        from interlock.cli.provider_batches_view import show_provider_batches

        show_provider_batches(ctx, limit)
        return

    from interlock.cli.base import when
    from interlock.core.batches import RowStatus, fold
    from interlock.storage.batches import batch_ledger

    if ctx.missing_ledger() is not None:
        out.print("no batches")
        return
    ledger = batch_ledger(ctx.store)
    records = ledger.list_batches(limit)
    if not records:
        out.print("no batches")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("batch", "pipeline", "created", "rows", "delivered", "failed", "running"):
        table.add_column(column)
    table.add_column("cost", justify="right")
    for record in records:
        progress = fold(
            ledger.views(record.batch_id),
            max_cost_usd=record.max_cost_usd,
            tolerate=record.tolerate,
        )
        counts = progress.counts
        variant = f" [{record.variant}]" if record.experiment is not None else ""
        state = " (cancelled)" if record.cancelled_at else ""
        state += " (failed: past tolerance)" if progress.breach is not None else ""
        if progress.overspent:
            state += " (over budget)"
        elif progress.over_budget and progress.waiting and not record.cancelled_at:
            state += " (paused: budget)"
        table.add_row(
            record.batch_id + variant + state,
            record.pipeline,
            when(record.created_at),
            str(record.rows),
            str(counts.get(RowStatus.DELIVERED, 0)),
            str(counts.get(RowStatus.FAILED, 0)),
            str(progress.running),
            f"{'~' if progress.estimated else ''}${progress.cost_usd:.4f}",
        )
    out.print(table)


# -- shared steps ---------------------------------------------------------------------------


# C0 and C1 control characters but the newline, and DEL: a row's inputs are the file's data,
# and an escape sequence among them must not reach the terminal.
CONTROL = dict.fromkeys([*range(0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0)])


def read_rows(
    inputs_file: str,
    definition: Definition,
    topic_field: str | None,
    ignore_columns: Sequence[str] = (),
) -> list[RowInputs]:
    """The rows of `inputs_file`, checked against the pipeline, or an error that names the
    file, the rows and the fix (exit 2) before anything is recorded."""
    from interlock.core.batches import BatchInputError, check_rows, parse_rows

    path = Path(inputs_file)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise BatchInputError(f"{inputs_file}: no such file (--inputs)") from None
    except IsADirectoryError:
        raise BatchInputError(f"{inputs_file}: is a folder; give a .jsonl or .csv file") from None
    except OSError as exc:
        raise BatchInputError(f"{inputs_file}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise BatchInputError(
            f"{inputs_file}: is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
    from interlock.core.waits import start_time_problems

    parsed = parse_rows(inputs_file, text)
    pipeline = definition.pipeline
    return check_rows(
        inputs_file,
        definition.name,
        pipeline.inputs,
        parsed,
        topic_field=topic_field,
        also=lambda topic, inputs: start_time_problems(pipeline, topic, inputs),
        ignored=ignore_columns,
    )


def refuse_taken_id(ctx: Ctx, batch_id: str) -> None:
    """A --batch-id the ledger holds already is refused before anything is recorded."""
    from interlock.storage.batches import BatchExists, BatchNotFound, batch_ledger, exists_message

    if ctx.missing_ledger() is not None:
        return
    try:
        batch_ledger(ctx.store).get_batch(batch_id)
    except BatchNotFound:
        return
    raise BatchExists(exists_message(batch_id))


def read_batch(ctx: Ctx, batch_id: str) -> tuple[BatchRecord, list[BatchRow]]:
    """A batch and its rows, for a command that only reads: the engine is loaded only when
    an ended run's result was not kept yet (it is folded from the run's history)."""
    from interlock.storage.batches import BatchNotFound, not_found_message
    from interlock.workloads import commands

    if ctx.missing_ledger() is not None:
        raise BatchNotFound(not_found_message(batch_id))
    return commands.read_batch(ctx.store, batch_id, lambda: ctx.app)


def refuse_cancelled(record: BatchRecord, command: str) -> None:
    """A command that would go on with a cancelled batch says why it does not, and how to.

    Raises:
        BatchCancelled: the batch was cancelled (exit 2).
    """
    from interlock.workloads.commands import BatchCancelled, cancelled_message

    if record.cancelled_at is not None:
        raise BatchCancelled(cancelled_message(record, command))


def held_by_budget(ctx: Ctx, shown: BatchStatus) -> BatchStatus:
    """The status with its rows not started folded against the batch's budget as its driver
    folds them: held back once the next row's worst case would pass what is left (read
    only when rows wait under a budget that their spend has not reached)."""
    from dataclasses import replace

    from interlock.core.batches import RowStatus, fold
    from interlock.workloads.batches import row_worst_usd

    record, progress = shown.record, shown.progress
    if record.max_cost_usd is None or progress.over_budget or record.cancelled_at is not None:
        return shown
    if not progress.counts.get(RowStatus.WAITING):
        return shown
    worst = row_worst_usd(ctx.app, record, list(shown.rows))
    views = [r.view for r in shown.rows]
    held = fold(views, max_cost_usd=record.max_cost_usd, tolerate=record.tolerate, worst_usd=worst)
    return replace(shown, progress=held, stalled=shown.stalled and not held.over_budget)


def opened(ctx: Ctx, batch_id: str) -> Interlock:
    """The API object for a command about an existing batch (no ledger: not found)."""
    from interlock.storage.batches import BatchNotFound, not_found_message

    if ctx.missing_ledger() is not None:
        raise BatchNotFound(not_found_message(batch_id))
    return ctx.app


def say_config(file: str, definitions: list[Definition], home: Path) -> None:
    """Before the rows start: which configuration their models use (the line `run` prints),
    and, loudly, the aliases that no configuration defines, so that every row would answer
    with the offline stand-in's placeholder text (at $0, delivered, exit 0: nothing else
    would tell)."""
    from interlock.core.loader import calls_models, model_aliases
    from interlock.errors import UsageError
    from interlock.providers import ModelConfig

    said: dict[str, None] = {}  # each line once: variants beside the base share a folder
    offline: dict[str, None] = {}
    for definition in definitions:
        if not calls_models(definition):
            continue
        folder = Path(definition.source or file).parent
        try:
            config = ModelConfig.for_workflow(folder, home)
        except Exception as exc:  # an invalid interlock.toml: its message names the file
            raise UsageError(str(exc)) from None
        said[config.used_line] = None
        for alias in sorted(model_aliases(definition)):
            try:
                resolved = config.resolve(alias)
            except Exception:  # undefined where a configuration exists: refused elsewhere
                continue
            if resolved.offline_fallback:
                offline[alias] = None
    for line in said:
        err.print(line, soft_wrap=True, markup=False)
    if offline:
        aliases = ", ".join(repr(a) for a in offline)
        err.print(
            f"[bold red]warning:[/] no model is configured: {escape(aliases)} will answer every "
            "row with the offline stand-in (placeholder text, $0), and metrics, export and "
            "'interlock compare' would score that. Put interlock.toml beside "
            f"{escape(file)} or in the current folder, or pass --config FILE "
            "('interlock check FILE' says which file it reads)",
            markup=True,
            soft_wrap=True,
        )


def quote_batch(
    file: str,
    definition: Definition,
    rows: list[RowInputs],
    home: Path,
    max_cost_usd: float | None,
    *,
    full: bool,
) -> None:
    """Print the worst case of the whole batch: each row's quote with its own topic and
    inputs (what `check --cost` computes), summed; `full`: the dearest row's quote too."""
    from interlock.cli.batch_quote import batch_quote

    quoted = batch_quote(file, definition, rows, home)
    stream = out if full else err
    stream.print(quoted.summary(len(rows)), soft_wrap=True)
    if full and quoted.dearest is not None:
        from interlock.cli.quote import quote_lines

        for line in quote_lines(quoted.dearest):
            stream.print(line, soft_wrap=True)
    if max_cost_usd is not None and quoted.usd is None:
        err.print(
            f"note: the worst case has no bound (see 'interlock check --cost'), so under "
            f"--max-cost-usd (${max_cost_usd:,.4f}) rows whose worst case is not known start "
            "one at a time while the spend is under it, and the budget can be passed by what "
            "one such row costs; bound it (a price, max_output_tokens, context_tokens) to hold "
            "each row's worst case",
            soft_wrap=True,
        )
    elif max_cost_usd is not None and quoted.usd is not None and quoted.usd > max_cost_usd:
        err.print(
            f"note: the worst case is over --max-cost-usd (${max_cost_usd:,.4f}): a row starts "
            "only while its worst case fits in what is left of it; the others wait ('paused: "
            "batch budget')",
            soft_wrap=True,
        )
        dearest = quoted.dearest.usd if quoted.dearest is not None else None
        if dearest is not None and dearest > max_cost_usd:
            err.print(
                f"note: the dearest row (row {quoted.dearest_row}) may cost up to "
                f"${dearest:,.4f} alone, more than --max-cost-usd: rows like it cannot start "
                "under this budget",
                soft_wrap=True,
            )


def drive(app: Interlock, batch_id: str) -> int:
    """Drive the batch with a live display; the exit code says how it ended: 0 every row
    delivered, 1 a row failed or was cancelled, 3 rows wait (an approval, the budget)."""
    import asyncio

    from interlock.cli.base import outlive_closed_output
    from interlock.cli.batch_view import BatchProgressView, budget_line, progress_line
    from interlock.workloads.batches import BatchRunner
    from interlock.workloads.experiments import experiment_of

    outlive_closed_output()  # `| head -1` stops the output, not the rows
    group = experiment_of(app, batch_id)
    if len(group) > 1:
        return drive_experiment(app, [b.batch_id for b in group])
    runner = BatchRunner(app, batch_id)
    snapshot: Snapshot | None = None
    try:
        with BatchProgressView(batch_id) as view:
            runner.on_progress = view
            snapshot = asyncio.run(_run(runner))
    except KeyboardInterrupt:
        err.print(f"interrupted: 'interlock batch resume {batch_id}' goes on")
        return int(ExitCode.INTERRUPTED)
    progress = snapshot.progress
    out.print(f"batch {batch_id}: {progress_line(progress, None)}", soft_wrap=True)
    if progress.breach is not None:
        err.print(failure_line(batch_id, progress.breach.reason), soft_wrap=True)
        return int(ExitCode.RUN_FAILED)
    return exit_code(
        batch_id,
        progress.counts,
        tolerated=snapshot.batch.tolerate is not None,
        budget=budget_line(batch_id, progress),
    )


def drive_experiment(app: Interlock, batch_ids: list[str]) -> int:
    """Drive an experiment's batches together (plain progress lines, one per ended row,
    whose run ids name the variant); the exit code as for a batch, over all of them."""
    import asyncio

    from interlock.cli.batch_view import BatchProgressView, progress_line
    from interlock.core.batches import RowStatus
    from interlock.workloads.experiments import ExperimentRunner

    views = {b: BatchProgressView(b) for b in batch_ids}
    for view in views.values():
        view.terminal = False  # one live display cannot show several batches
    runner = ExperimentRunner(app, batch_ids, on_progress=lambda s: views[s.batch.batch_id](s))
    try:
        snapshots = asyncio.run(_run(runner))
    except KeyboardInterrupt:
        err.print(f"interrupted: 'interlock batch resume {batch_ids[0]}' goes on")
        return int(ExitCode.INTERRUPTED)
    counts: dict[RowStatus, int] = {}
    for snapshot in snapshots:
        progress = snapshot.progress
        out.print(f"batch {snapshot.batch.batch_id}: {progress_line(progress, None)}")
        for status, count in progress.counts.items():
            counts[status] = counts.get(status, 0) + count
    if counts.get(RowStatus.WAITING):  # a variant's rows wait for base rows that wait
        err.print(
            f"rows wait for their base rows: 'interlock batch status {batch_ids[0]}' shows "
            f"why; 'interlock batch resume {batch_ids[0]}' goes on",
            soft_wrap=True,
        )
        return int(ExitCode.PAUSED)
    return exit_code(batch_ids[0], counts)


def failure_line(batch_id: str, reason: str) -> str:
    """What is said of a batch failed past its tolerance, and the way on."""
    return (
        f"batch {batch_id} failed: {reason}; no more rows start. 'interlock batch retry "
        f"{batch_id} --failed' runs the failed rows again and goes on"
    )


def exit_code(
    batch_id: str, counts: Any, *, tolerated: bool = False, budget: str | None = None
) -> int:
    """How a driven batch ended: 0 every row delivered (or, `tolerated`, the failed rows
    within the batch's tolerance), 1 a row failed or was cancelled, 3 rows wait (an
    approval, the budget). `budget`: what the batch's budget did (`budget_line`), said
    whatever the code."""
    from interlock.core.batches import RowStatus

    if tolerated and counts.get(RowStatus.FAILED):
        err.print(
            f"{counts[RowStatus.FAILED]} row(s) failed, within the batch's --tolerate: "
            f"'interlock batch retry {batch_id} --failed' runs them again",
            soft_wrap=True,
        )
        counts = {k: v for k, v in counts.items() if k is not RowStatus.FAILED}
    if budget is not None:
        err.print(budget, soft_wrap=True)
    if counts.get(RowStatus.FAILED) or counts.get(RowStatus.CANCELLED):
        if counts.get(RowStatus.CANCELLED) and not counts.get(RowStatus.FAILED):
            err.print(
                f"{counts[RowStatus.CANCELLED]} row(s) cancelled: 'interlock batch retry "
                f"{batch_id} --cancelled' gives them their runs again",
                soft_wrap=True,
            )
        if counts.get(RowStatus.FAILED):
            err.print(
                f"'interlock batch status {batch_id}' shows why; "
                f"'interlock batch retry {batch_id} --failed' runs them again",
                soft_wrap=True,
            )
        return int(ExitCode.RUN_FAILED)
    if counts.get(RowStatus.BUDGET):
        if budget is None:
            err.print(
                f"rows not started wait for the batch's budget: 'interlock batch resume "
                f"{batch_id} --max-cost-usd X' raises it",
                soft_wrap=True,
            )
        return int(ExitCode.PAUSED)
    if counts.get(RowStatus.PAUSED):
        err.print(
            f"rows wait for approval ('interlock batch status {batch_id}' names their runs): "
            f"'interlock approve RUN', then 'interlock batch resume {batch_id}'",
            soft_wrap=True,
        )
        return int(ExitCode.PAUSED)
    return int(ExitCode.OK)


async def _run(runner: Any) -> Any:
    """The runner, with SIGTERM turned into an interrupt that stops the runs' tasks first."""
    import asyncio
    import signal

    from interlock.cli.base import terminate_as_interrupt

    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    terminated: list[bool] = []

    def on_terminate() -> None:
        terminated.append(True)
        main.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_terminate)
    try:
        return await runner.run()
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, terminate_as_interrupt)


experiment = click.Command(
    "experiment",
    callback=start.callback,
    params=start.params,
    help="Run the same rows through several variants of a pipeline (--variant NAME=FILE), "
    "reusing what they share; short for 'interlock batch FILE ... --variant ...'.",
)

COMMANDS = [batch, batches, experiment]
