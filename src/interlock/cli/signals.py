"""`interlock signal`: send a signal to a run that waits (or will wait) for it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from interlock.cli.base import (
    Ctx,
    drive_in_foreground,
    driven_elsewhere,
    handle_errors,
    install_terminate_handler,
    out,
    pass_ctx,
)
from interlock.errors import UsageError


def signal_data(data: str | None, data_file: str | None) -> Any:
    """The signal's JSON data from `--data` or `--data-file` (None: neither)."""
    if data is not None and data_file is not None:
        raise UsageError("give the signal's data with --data JSON or --data-file FILE, not both")
    where, text = "--data", data
    if data_file is not None:
        where = data_file
        try:
            text = Path(data_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{data_file}: cannot read the signal's data ({exc})") from None
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"{where}: the signal's data is not JSON ({exc}); quote text as JSON, e.g. '\"yes\"'"
        ) from None


@click.command("signal")
@click.argument("run_id")
@click.argument("name")
@click.option("--data", help="The signal's data, as JSON.")
@click.option("--data-file", type=click.Path(dir_okay=False), help="A file holding the JSON data.")
@click.option("--key", help="An idempotency key: a second signal with it is ignored.")
@click.option("--no-drive", is_flag=True, help="Only send the signal; don't continue the run here.")
@pass_ctx
@handle_errors
def signal_command(
    ctx: Ctx,
    run_id: str,
    name: str,
    data: str | None,
    data_file: str | None,
    key: str | None,
    no_drive: bool,
) -> None:
    """Send signal NAME to a run; the phase that waits for it goes on with its data.

    A signal sent before the run waits for it is kept until it does. Unless another process
    drives the run (or --no-drive), the run is continued here.
    """
    install_terminate_handler()
    app = ctx.reader(run_id)
    receipt = app.signal(run_id, name, signal_data(data, data_file), key=key)
    if receipt.duplicate:
        out.print(receipt.note)
        return
    if no_drive or driven_elsewhere(app, receipt.run_id):
        out.print(f"{receipt.note}; the orchestrator driving it records it")
        return
    out.print(receipt.note)
    sys.exit(drive_in_foreground(app, receipt.run_id))


COMMANDS = [signal_command]
