"""Commands that start, continue and steer runs."""

from __future__ import annotations

import sys
import time

import click

from interlock.cli.base import (
    Ctx,
    drive_in_foreground,
    driven_elsewhere,
    err,
    handle_errors,
    install_terminate_handler,
    out,
    parse_inputs,
    pass_ctx,
)
from interlock.errors import LeaseHeld


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("pipeline", required=False)
@click.option("--topic", "-t", required=True, help="What the run is about.")
@click.option("--input", "-i", "inputs", multiple=True, help="A pipeline input, KEY=VALUE.")
@click.option("--run-id", help="Choose the run id (default: generated).")
@click.option("--no-cache", is_flag=True, help="Reuse no earlier run's outputs (cache: is off).")
@click.option("--strict", is_flag=True, help="Refuse to start when the worst case is over budget.")
@pass_ctx
@handle_errors
def run(
    ctx: Ctx,
    file: str,
    pipeline: str | None,
    topic: str,
    inputs: tuple[str, ...],
    run_id: str | None,
    no_cache: bool,
    strict: bool,
) -> None:
    """Start a run of PIPELINE from FILE and drive it in the foreground."""
    ctx.check_ahead()
    from interlock.cli.quote import refuse_unrunnable_calls, run_gate
    from interlock.cli.workflows import say_typing_warnings
    from interlock.core.inputs import check_topic, resolve_inputs
    from interlock.core.loader import load_workflow
    from interlock.runtime.home import Home
    from interlock.runtime.models import ModelRunner
    from interlock.runtime.new_runs import refuse_broken_config

    install_terminate_handler()
    given = parse_inputs(inputs)
    workflow = load_workflow(file)
    say_typing_warnings(file)  # `country: NO` is false: said before the run is recorded
    if pipeline is None and len(workflow.definitions) == 1:
        pipeline = next(iter(workflow.definitions))
    if pipeline is not None:
        # Refused inputs are said before the ledger is opened, which would create one.
        definition = workflow.get(pipeline)
        check_topic(definition.name, topic)
        resolve_inputs(definition.name, definition.pipeline.inputs, given)
        refuse_broken_config(ModelRunner(Home.at(ctx.home).root), definition)
    app = ctx.app
    if pipeline is not None:  # without one, `start` says which pipelines there are
        run_gate(file, definition, app.home.root, topic, given, strict)
        refuse_unrunnable_calls(file, pipeline, definition)
    run_id = app.start(
        workflow, pipeline, topic=topic, inputs=given, run_id=run_id, no_cache=no_cache
    )
    err.print(f"run {run_id}")
    sys.exit(drive_in_foreground(app, run_id, since=0))


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("pipeline", required=False)
@click.option("--topic", "-t", required=True, help="What the run is about.")
@click.option("--input", "-i", "inputs", multiple=True, help="A pipeline input, KEY=VALUE.")
@pass_ctx
@handle_errors
def submit(ctx: Ctx, file: str, pipeline: str | None, topic: str, inputs: tuple[str, ...]) -> None:
    """Record a run and leave it to whoever drives runs (a server or `interlock orchestrate`)."""
    from interlock.cli.workflows import say_typing_warnings
    from interlock.core.inputs import check_topic, resolve_inputs
    from interlock.core.loader import load_workflow
    from interlock.runtime.home import Home
    from interlock.runtime.models import ModelRunner
    from interlock.runtime.new_runs import refuse_broken_config

    given = parse_inputs(inputs)
    workflow = load_workflow(file)
    say_typing_warnings(file)  # `country: NO` is false: said before the run is recorded
    if pipeline is None and len(workflow.definitions) == 1:
        pipeline = next(iter(workflow.definitions))
    if pipeline is not None:  # refused before the ledger is opened, which would create one
        definition = workflow.get(pipeline)
        check_topic(definition.name, topic)
        resolve_inputs(definition.name, definition.pipeline.inputs, given)
        refuse_broken_config(ModelRunner(Home.at(ctx.home).root), definition)
    app = ctx.app
    run_id = app.submit(workflow, pipeline, topic=topic, inputs=given)
    out.print(run_id)


@click.command()
@click.argument("run_id")
@click.option("--wait", is_flag=True, help="Wait for another orchestrator's lease to end.")
@pass_ctx
@handle_errors
def resume(ctx: Ctx, run_id: str, wait: bool) -> None:
    """Drive an existing run again (after a crash, Ctrl-C or an approval)."""
    install_terminate_handler()
    ctx.check_ahead()
    app = ctx.reader(run_id)
    run_id = app.resolve(run_id)
    while True:
        try:
            app.orchestrator.take(run_id)
            break
        except LeaseHeld:
            if not wait:
                raise
            time.sleep(1)
    sys.exit(drive_in_foreground(app, run_id, since=app.store.get_run(run_id).last_seq))


@click.command()
@click.argument("run_id")
@click.option("--message", "-m", default="", help="A note kept with the approval.")
@click.option(
    "--call",
    "call",
    default=None,
    metavar="TASK/TURN/CALL",
    help="Let this waiting tool call run (as 'status' lists it), instead of the run's pause.",
)
@click.option("--no-drive", is_flag=True, help="Only record the approval; don't continue here.")
@pass_ctx
@handle_errors
def approve(ctx: Ctx, run_id: str, message: str, call: str | None, no_drive: bool) -> None:
    """Approve a paused run (or, with --call, a tool call that waits), then continue it here
    unless another process drives it."""
    install_terminate_handler()
    ctx.check_ahead()
    app = ctx.reader(run_id)
    if call is not None:
        run_id = app.decide_call(run_id, call, approved=True, note=message)
    else:
        run_id = app.approve(run_id, message)
    if no_drive or driven_elsewhere(app, run_id):
        what = f"tool call {call}" if call is not None else run_id
        out.print(f"approval recorded for {what}")
        return
    sys.exit(drive_in_foreground(app, run_id))


@click.command()
@click.argument("run_id")
@click.option("--reason", default="", help="Why (kept in the history).")
@pass_ctx
@handle_errors
def cancel(ctx: Ctx, run_id: str, reason: str) -> None:
    """Cancel a run; its in-flight tasks are stopped."""
    app = ctx.reader(run_id)
    run_id = app.cancel(run_id, reason)
    if driven_elsewhere(app, run_id):
        out.print(f"cancellation sent to the orchestrator driving {run_id}")
        return
    import asyncio

    asyncio.run(app.drive_async(run_id))
    out.print(f"{run_id}: {app.state(run_id).status.value}")


@click.command()
@click.argument("run_id")
@click.argument("text")
@pass_ctx
@handle_errors
def message(ctx: Ctx, run_id: str, text: str) -> None:
    """Add a note to a run's history."""
    out.print(f"message queued for {ctx.reader(run_id).message(run_id, text)}")


COMMANDS = [run, submit, resume, approve, cancel, message]
