"""`interlock schema`: the JSON Schema of workflow files, for editors and CI."""

from __future__ import annotations

from pathlib import Path

import click

from interlock.cli.base import handle_errors, out
from interlock.errors import UsageError


def write_schema(target: Path) -> None:
    """Write the schema to `target` (a UsageError naming the file if it cannot be written)."""
    from interlock.core.workflow_schema import schema_text

    try:
        target.write_text(schema_text(), encoding="utf-8")
    except OSError as exc:
        folder = target.parent
        hint = f"; create {folder} first" if not folder.exists() else ""
        raise UsageError(f"{target}: cannot write it: {exc.strerror or exc}{hint}") from None


@click.command()
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Write it to this file, not stdout."
)
@handle_errors
def schema(output: str | None) -> None:
    """Print the JSON Schema of workflow files (editors validate and complete with it).

    A YAML file whose first line is '# yaml-language-server: $schema=workflow.schema.json'
    is checked against it by VS Code (YAML extension) and other editors as you type.
    """
    from interlock.core.workflow_schema import schema_text

    if output is None:
        click.echo(schema_text(), nl=False)
        return
    write_schema(Path(output))
    out.print(f"wrote {output}")


COMMANDS = [schema]
