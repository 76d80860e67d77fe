"""A command group that imports a command's module only when the command is used.

Every `interlock` invocation used to import every command module, and with them the engine,
the ledger and rich, before doing anything. Here each command is named in a table with the
module that defines it: `interlock runs` imports only that module, and `interlock --help`
imports the command modules, which import nothing heavy until a command runs.
"""

from __future__ import annotations

import importlib
from typing import Any

import click


class LazyGroup(click.Group):
    """A click group whose commands are found through `lazy`: command name -> the module of
    `interlock.cli` whose COMMANDS list holds it."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self.lazy:
            return command
        module = importlib.import_module(f"interlock.cli.{self.lazy[cmd_name]}")
        for each in module.COMMANDS:
            if each.name not in self.commands:
                self.add_command(each)
        if cmd_name not in self.commands:
            raise RuntimeError(
                f"interlock.cli.{self.lazy[cmd_name]} has no command {cmd_name!r} in its "
                "COMMANDS: fix its line in interlock.cli.main.COMMAND_MODULES"
            )
        return self.commands[cmd_name]
