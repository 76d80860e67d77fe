"""Commands about workflow files: a starter file, validation and exploration."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from interlock.cli.base import STARTER, Ctx, err, handle_errors, out, pass_ctx
from interlock.core.explore import explore
from interlock.core.loader import Definition, load_workflow
from interlock.errors import ExitCode, UsageError


@click.command()
@click.argument("file", type=click.Path(dir_okay=False), default="workflow.yaml")
@handle_errors
def init(file: str) -> None:
    """Write a starter workflow file."""
    target = Path(file)
    if target.exists():
        err.print(f"error: {target} already exists; choose another name")
        sys.exit(int(ExitCode.BAD_INPUT))
    target.write_text(STARTER.read_text())
    out.print(
        f"wrote {target}: try 'interlock check {target}' then "
        f"'interlock run {target} research --topic \"...\"'"
    )


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@pass_ctx
@handle_errors
def check(ctx: Ctx, file: str) -> None:
    """Validate FILE, explore every path its pipelines can take, and resolve its models."""
    from interlock.providers import ModelConfig
    from interlock.runtime.home import Home
    from interlock.runtime.orchestrator import model_aliases

    workflow = load_workflow(file)
    problems: list[str] = []
    try:
        config = ModelConfig.load([Path(file).parent.absolute(), Home.at(ctx.home).root])
    except Exception as exc:  # an invalid interlock.toml: its message names the file
        raise UsageError(str(exc)) from None
    for name, definition in workflow.definitions.items():
        problems += call_problems(name, definition)
        problems += explore(definition).problems
        for alias in config.missing_models(sorted(model_aliases(definition))):
            searched = ", ".join(str(p) for p in config.searched) or "no file"
            problems.append(
                f"pipeline {name!r}: model {alias!r} is not configured (looked in {searched}); "
                f"add [models.{alias}] to interlock.toml"
            )
    if problems:
        err.print(f"{file}: {len(problems)} problem(s)")
        for problem in problems:
            err.print(f"  - {problem}")
        sys.exit(int(ExitCode.BAD_INPUT))
    names = ", ".join(workflow.definitions)
    out.print(f"{file}: ok ({names})")


def call_problems(name: str, definition: Definition) -> list[str]:
    """`call:` targets that would not resolve when the pipeline runs from the command line."""
    from interlock.runtime.executors import resolve_call

    problems = []
    for phase in definition.pipeline.phases:
        for worker in phase.workers:
            if worker.call is None:
                continue
            place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}: call"
            module, _, attribute = worker.call.partition(":")
            try:
                target = resolve_call(worker.call)
            except LookupError:
                problems.append(
                    f"{place} {worker.call!r} is not a registered name; names registered with "
                    "interlock.register() exist only in the Python program that registers "
                    "them: use 'package.module:function' to run it from the command line"
                )
                continue
            except AttributeError:
                problems.append(f"{place} {worker.call!r}: module {module!r} has no {attribute!r}")
                continue
            except Exception as exc:  # the module's own import failed: say how
                problems.append(
                    f"{place} {worker.call!r}: module {module!r} does not import "
                    f"({type(exc).__name__}: {exc}); check PYTHONPATH and the module"
                )
                continue
            if not callable(target):
                problems.append(f"{place} {worker.call!r} is not a function")
    return problems


COMMANDS = [init, check]
