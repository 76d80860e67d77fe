"""Commands of a review: edit an output of a paused run, or reject it back to a phase."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from interlock.cli.base import (
    Ctx,
    drive_in_foreground,
    driven_elsewhere,
    err,
    handle_errors,
    install_terminate_handler,
    out,
    pass_ctx,
)
from interlock.errors import UsageError

if TYPE_CHECKING:
    from interlock.api import Interlock


def _new_text(app: Interlock, run_id: str, output: str, file: str | None, editor: bool) -> str:
    """The replacement text, from `--file` or from the person's editor. Text the same as the
    output's recorded version is refused: recording it would run its readers again (and pay
    for their model calls) for nothing."""
    import hashlib

    from interlock.core.review import find_output

    if (file is None) == (not editor):
        raise UsageError("give the new text with --file FILE or --editor (one of them)")
    task = find_output(app.state(run_id), output)
    if isinstance(task, str):
        raise UsageError(task)
    if file is not None:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{file}: cannot read the new text ({exc})") from None
        if hashlib.sha256(text.encode("utf-8")).hexdigest() == task.sha256:
            raise UsageError(
                f"{file} holds the same text as the recorded {task.artifact}; nothing was "
                "recorded (its readers would run again for nothing)"
            )
        return text
    current = (app.run_dir(run_id) / (task.artifact or "")).read_text(encoding="utf-8")
    suffix = Path(task.artifact or "output.md").suffix or ".txt"
    command, variable = _editor()
    try:
        edited = click.edit(current, editor=command, extension=suffix, require_save=True)
    except click.ClickException as exc:  # it could not start, or it exited with an error
        # click says "EDITOR: Editing failed", then ": OSError" when it could not start.
        reason = exc.message.removeprefix(f"{command}: Editing failed").removeprefix(": ")
        failed = f"could not start ({reason})" if reason else "exited with an error"
        raise UsageError(
            f"the editor {command!r} {failed}; nothing was recorded: set {variable} to an "
            "editor that works, or give the new text with --file FILE"
        ) from None
    if edited is None or edited == current:
        raise UsageError(f"{task.artifact} was not changed in the editor; nothing was recorded")
    return edited


def _editor() -> tuple[str, str]:
    """The editor `--editor` opens, as click picks it ($VISUAL, $EDITOR, else the first of
    the usual ones installed), and the variable that sets it; checked now: an editor that
    does not exist is bad input with its fix, not click's "Editing failed" with exit 1."""
    import os
    import shlex
    import shutil

    variable = next((key for key in ("VISUAL", "EDITOR") if os.environ.get(key)), None)
    if variable is not None:
        editor = os.environ[variable]
    elif sys.platform == "win32":
        editor = "notepad"
    else:
        usual = ("sensible-editor", "vim", "nano")
        editor = next((name for name in usual if shutil.which(name)), "vi")
    # $VISUAL comes first: with it set, setting EDITOR would change nothing.
    fix = variable or "EDITOR"
    try:
        program = shlex.split(editor)[0]  # "code --wait" runs code
    except (ValueError, IndexError):  # unbalanced quotes, or blanks: no program in it
        program = editor
    if shutil.which(program) is not None:
        return editor, fix
    missing = "is not an executable file" if "/" in program else "is not a program on PATH"
    if variable is None:
        where = "$VISUAL and $EDITOR are not set and no editor (vi, vim, nano) is installed"
    elif program != editor:
        where = f"${variable} is {editor!r}, and {program!r} {missing}"
    else:
        where = f"${variable} is {editor!r}, which {missing}"
    raise UsageError(
        f"cannot open an editor: {where}; set {fix} to an editor that exists (export "
        f"{fix}=nano), or give the new text with --file FILE"
    )


@click.command()
@click.argument("run_id")
@click.argument("output")
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False), help="The new text.")
@click.option("--editor", is_flag=True, help="Edit the current text in $EDITOR.")
@click.option("--message", "-m", "note", default="", help="A note kept with the edit.")
@pass_ctx
@handle_errors
def edit(ctx: Ctx, run_id: str, output: str, file: str | None, editor: bool, note: str) -> None:
    """Replace OUTPUT (a file such as synthesis.md, or a role) of a paused run.

    Tasks that read the old version run again when the run goes on; the rest do not.
    """
    import asyncio

    from interlock.core.review import find_output, revisions
    from interlock.core.state import RunStatus

    app = ctx.reader(run_id)
    run_id = app.resolve(run_id)
    text = _new_text(app, run_id, output, file, editor)
    app.edit(run_id, output, text, note=note)
    if driven_elsewhere(app, run_id):
        out.print(f"edit of {output} sent to the orchestrator driving {run_id}")
        return
    asyncio.run(app.drive_async(run_id))  # records it; the run stays paused
    state = app.state(run_id)
    task = find_output(state, output)
    recorded = not isinstance(task, str) and task.revised_mark > 0
    if isinstance(task, str) or not recorded:
        raise UsageError(f"run {run_id}: the edit of {output} was not recorded (see the log)")
    out.print(f"recorded the edit of {task.artifact} ({(task.sha256 or '')[:12]})")
    record = app.store.get_run(run_id)
    pipeline = app.orchestrator.definition(record.pipeline, record.definition_hash).pipeline
    preview = state.copy()
    preview.status = RunStatus.RUNNING  # as it will be once approved
    ready, _ = revisions(pipeline, preview)
    if ready:
        names = ", ".join(t.task_id for t, _ in ready)
        out.print(f"runs again when the run goes on: {names} (and what reads them)")
        paused = state.current.phase if state.current is not None else None
        if paused is not None and pipeline.phase(paused).pause_after:
            out.print(f"then it pauses again after {paused!r}, to show what changed")
    out.print(f"continue with: interlock approve {run_id}")


@click.command()
@click.argument("run_id")
@click.option("--to", "to", default=None, help="The phase to go back to (a new visit).")
@click.option(
    "--message",
    "-m",
    "feedback",
    default=None,
    help="What to change: the models of phase TO are told it; templates read {{ feedback }}.",
)
@click.option(
    "--call",
    "call",
    default=None,
    metavar="TASK/TURN/CALL",
    help="Refuse this waiting tool call instead (as 'status' lists it): the model is told so.",
)
@click.option("--reason", default="", help="With --call: why, told to the model.")
@click.option("--no-drive", is_flag=True, help="Only record the rejection; don't continue here.")
@pass_ctx
@handle_errors
def reject(
    ctx: Ctx,
    run_id: str,
    to: str | None,
    feedback: str | None,
    call: str | None,
    reason: str,
    no_drive: bool,
) -> None:
    """Send a paused run back to phase TO with feedback (or, with --call, refuse a tool call
    that waits), then continue it here."""
    from interlock.core.review import deaf_to_feedback

    install_terminate_handler()
    app = ctx.reader(run_id)
    if call is not None:
        if to is not None:
            raise UsageError("give either --call (refuse a tool call) or --to (a phase), not both")
        run_id = app.decide_call(run_id, call, approved=False, note=reason or feedback or "")
        if no_drive or driven_elsewhere(app, run_id):
            out.print(f"refusal of tool call {call} recorded")
            return
        sys.exit(drive_in_foreground(app, run_id))
    if to is None or feedback is None:
        raise UsageError(
            "reject needs --to PHASE and --message TEXT (send the run back), or --call "
            "TASK/TURN/CALL (refuse a tool call that waits)"
        )
    run_id = app.reject(run_id, to, feedback)
    record = app.store.get_run(run_id)
    pipeline = app.orchestrator.definition(record.pipeline, record.definition_hash).pipeline
    deaf = deaf_to_feedback(pipeline, to)
    if deaf:
        err.print(
            f"note: {', '.join(deaf)} in {to!r} run again without the feedback: a command or "
            "call sees it only where its arguments or task place {{ feedback }}",
            soft_wrap=True,
            markup=False,
        )
    if no_drive or driven_elsewhere(app, run_id):
        out.print(f"rejection of {run_id} sent: back to {to}")
        return
    sys.exit(drive_in_foreground(app, run_id))


COMMANDS = [edit, reject]
