"""A command group that imports a command's module only when the command is used.

Every `interlock` invocation used to import every command module, and with them the engine,
the ledger and rich, before doing anything. Here each command is named in a table with the
module that defines it: `interlock runs` imports only that module, and `interlock --help`
imports the command modules, which import nothing heavy until a command runs.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import click


class LazyGroup(click.Group):
    """A click group whose commands are found through `lazy`: command name -> the module of
    `interlock.cli` whose COMMANDS list holds it."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=2, cutoff=0.6)
            if close:  # `interlock rn`: a typo of a command, said with the nearest ones
                said = " or ".join(f"'{ctx.command_path} {c}'" for c in close)
                ctx.fail(f"no command {name!r}: did you mean {said}? ('--help' lists them)")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            raise self._placed_after(exc) from None

    def _placed_after(self, exc: click.NoSuchOption) -> click.NoSuchOption:
        """A group's own option (`--home`) given after a command is not the command's: the
        error says where it goes instead of suggesting `--help`."""
        ours = {
            name: param
            for param in self.params
            if isinstance(param, click.Option)
            for name in param.opts
        }
        name = exc.option_name.partition("=")[0]
        if name not in ours:
            return exc
        value = "" if ours[name].is_flag else " VALUE"
        commands: list[str] = []  # the commands after the program's name, outermost first
        context = exc.ctx
        while context is not None and context.parent is not None:
            commands.insert(0, context.info_name or "COMMAND")
            context = context.parent
        root = context.info_name if context is not None else "interlock"
        rest = " ".join(commands) or "COMMAND"
        return click.NoSuchOption(
            exc.option_name,
            message=f"{name} is an option of '{root}' itself and goes before the command: "
            f"'{root} {name}{value} {rest} ...'",
            ctx=exc.ctx,
        )

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
