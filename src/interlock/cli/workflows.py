"""Commands about workflow files: starter files, validation, exploration and listing."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from interlock.cli.base import Ctx, err, handle_errors, out, pass_ctx
from interlock.cli.printable import printable, shell_word
from interlock.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from interlock.core.loader import Definition
    from interlock.core.workflow import Pipeline


HERE = Path(__file__).parent
# template name -> file beside this module (one pipeline each, with a description)
TEMPLATES = {
    "research": "starter.yaml",
    "review-loop": "review-loop.yaml",
    "fan-out": "fan-out.yaml",
    "approval": "approval.yaml",
    "signal": "signal.yaml",
    "subpipeline": "subpipeline.yaml",
}
DEFAULT_MAX_STATES = 100_000
PROGRESS_AFTER_S = 3.0  # off a terminal, progress shows only on explorations this long


def _template_summary(name: str) -> str:
    """The template's pipeline and its description."""
    from interlock.core.loader import load_workflow

    pipeline, definition = next(iter(load_workflow(HERE / TEMPLATES[name]).definitions.items()))
    return f"pipeline {pipeline!r}: {definition.pipeline.description}"


@click.command()
@click.argument("file", type=click.Path(dir_okay=False), default="workflow.yaml")
@click.option(
    "--template",
    "-t",
    "template",
    default="research",
    show_default=True,
    help="Which starter to write (see --list).",
)
@click.option("--list", "list_", is_flag=True, help="List the templates and exit.")
@handle_errors
def init(file: str, template: str, list_: bool) -> None:
    """Write a starter workflow file from a template."""
    from interlock.core.loader import load_workflow

    if list_:
        width = max(len(n) for n in TEMPLATES)
        for name in TEMPLATES:
            out.print(f"{name:<{width}}  {_template_summary(name)}")
        return
    if template not in TEMPLATES:
        raise UsageError(
            f"no template {template!r}; templates are {', '.join(TEMPLATES)} "
            "('interlock init --list' describes them)"
        )
    target = Path(file)
    text = _named(target, (HERE / TEMPLATES[template]).read_text())
    as_json = target.suffix.lower() == ".json"
    if as_json:  # a .json workflow is read strictly as JSON: write the template as JSON
        import json

        import yaml

        text = json.dumps(yaml.safe_load(text), indent=2) + "\n"
    try:
        with target.open("x") as stream:  # never overwrite, even a file made a moment ago
            stream.write(text)
    except FileExistsError:
        err.print(f"error: {target} already exists; choose another name")
        sys.exit(int(ExitCode.BAD_INPUT))
    except OSError as exc:
        folder = target.parent
        hint = f"; create {folder} first" if not folder.exists() else ""
        raise UsageError(f"{target}: cannot write it: {exc.strerror or exc}{hint}") from None
    pipeline = next(iter(load_workflow(target).definitions))
    out.print(
        f"wrote {target} ({template}): try 'interlock check {target}' then "
        f"'interlock run {target} {pipeline} --topic \"...\"'"
    )
    if not as_json:  # the modeline that names the schema is a YAML comment
        _write_schema_beside(target)


def _named(target: Path, text: str) -> str:
    """The template with its comments' commands naming the file it is written to: they say
    `workflow.yaml` (the default name), which would not run for a file named otherwise."""
    import shlex

    name = shlex.quote(str(target))
    return "".join(
        line.replace(" workflow.yaml ", f" {name} ") if line.lstrip().startswith("#") else line
        for line in text.splitlines(keepends=True)
    )


def _write_schema_beside(target: Path) -> None:
    """The schema the template's modeline names, for editors; an existing copy is kept."""
    from interlock.cli.schema import write_schema
    from interlock.core.workflow_schema import SCHEMA_FILE, schema_text

    schema = target.parent / SCHEMA_FILE
    if not schema.exists():
        write_schema(schema)
        out.print(f"wrote {schema}: editors validate and complete {target} with it")
    elif schema.read_text(encoding="utf-8", errors="replace") != schema_text():
        out.print(f"{schema} is not this version's; refresh it: interlock schema -o {schema}")


def env_warnings(
    name: str,
    pipeline: Pipeline,
    line_of: Callable[[list[Any]], int | None] = lambda _: None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """A warning for each variable a command's own text reads that it will not get (a
    command gets only the allow-list, its INTERLOCK_* variables and what `env:` names), and
    for each name under `env:` that is not set in `environ` (this process's environment),
    each after "line N: " when the line is known."""
    import os

    from interlock.providers.cli_env import unlisted_reads

    environ = os.environ if environ is None else environ
    warnings = []

    def at(path: list[Any]) -> str:
        line = line_of(path)
        return f"line {line}: " if line is not None else ""

    for name_ in dict.fromkeys(pipeline.env):
        if name_ not in environ:
            index = pipeline.env.index(name_)
            warnings.append(
                f"{at([name, 'env', index])}pipeline {name!r}: {name_}, listed under 'env:', "
                "is not set in this environment: its commands will run without it"
            )
    for p, phase in enumerate(pipeline.phases):
        for w, worker in enumerate(phase.workers):
            if worker.command is None:
                continue
            path = [name, "phases", p, "workers", w]
            place = f"pipeline {name!r}, worker {worker.role!r}"
            for index, listed in enumerate(worker.env):
                if listed not in environ and listed not in pipeline.env:
                    warnings.append(
                        f"{at([*path, 'env', index])}{place}: {listed}, listed under 'env:', "
                        "is not set in this environment: the command will run without it"
                    )
            for read in unlisted_reads(worker.command, pipeline.env_for(worker.role)):
                warnings.append(
                    f"{at([*path, 'command', read.argument])}{place}: its command reads "
                    f"{read.described()}, which it will not get: a command gets PATH, HOME, the "
                    "locale, proxies, its INTERLOCK_* variables and what 'env:' names; add "
                    f"env: [{read.name}] to the worker or the pipeline if it needs it"
                )
    return warnings


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--max-states",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_STATES,
    show_default=True,
    help="Stop exploring a pipeline after this many states and say what was not covered.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only problems, not the pipelines.")
@click.option("--cost", is_flag=True, help="Show the most a run can spend, per pipeline.")
@click.option("--json", "as_json", is_flag=True, help="With --cost: one JSON object per pipeline.")
@click.option("--strict", is_flag=True, help="A worst case over its budget is an error.")
@pass_ctx
@handle_errors
def check(
    ctx: Ctx, file: str, max_states: int, quiet: bool, cost: bool, as_json: bool, strict: bool
) -> None:
    """Validate FILE, explore every path its pipelines can take, and resolve its models."""
    from interlock.cli.quote import budget_gate, quote_lines, quote_of
    from interlock.core.condition_checks import condition_warnings
    from interlock.core.explore import explore
    from interlock.core.loader import calls_models, load_workflow, model_aliases
    from interlock.core.parse import locator
    from interlock.core.shell_scripts import shell_warnings
    from interlock.providers import ModelConfig
    from interlock.providers.batch_checks import batch_problems, batch_warnings, window_warnings
    from interlock.providers.checks import (
        settings_problems,
        tier_warnings,
        tool_problems,
        tool_warnings,
    )
    from interlock.providers.spend_checks import cap_problems
    from interlock.runtime.code_checks import missing_code
    from interlock.runtime.home import Home

    if as_json and not cost:  # the JSON is the quote's: without --cost it was text
        raise click.UsageError(
            "--json prints the quote of --cost as JSON: give 'interlock check FILE --cost "
            "--json' (without --json, check prints its findings as text)"
        )
    workflow = load_workflow(file)
    text = Path(file).read_text(encoding="utf-8-sig", errors="replace")
    line_of = locator(text)
    problems: list[str] = []
    warnings: list[str] = []
    # Tool server commands not found.
    priced: list[str] = []
    priced += typing_warnings(file, text)
    quotes = []
    explored: list[str] = []  # what exploring showed of each fan-out's tolerance
    try:
        config = ModelConfig.for_workflow(Path(file).parent, Home.at(ctx.home).root)
    except Exception as exc:  # an invalid interlock.toml: its message names the file
        raise UsageError(str(exc)) from None
    for name, definition in workflow.definitions.items():
        problems += call_problems(name, definition)
        with _Progress(name) as progress:
            report = explore(definition, max_states=max_states, progress=progress)
        problems += report.problems
        explored += _tolerance_lines(name, report.tolerance)
        if not report.complete:
            phases = [p.id for p in definition.pipeline.phases]
            warnings.append(f"pipeline {name!r}: {report.not_covered(phases)}")
        for alias in config.missing_models(sorted(model_aliases(definition))):
            elsewhere = config.defined_elsewhere(alias)
            if elsewhere is not None:
                problems.append(f"pipeline {name!r}: {config.elsewhere_message(alias, elsewhere)}")
                continue
            searched = ", ".join(str(p) for p in config.searched) or "no file"
            problems.append(
                f"pipeline {name!r}: model {alias!r} is not configured (looked in {searched}); "
                f"add [models.{alias}] to interlock.toml"
            )
        problems += settings_problems(name, definition.pipeline, config)
        problems += tool_problems(name, definition.pipeline, config)
        problems += cap_problems(name, definition.pipeline, config)
        problems += batch_problems(name, definition.pipeline, config)
        priced += tool_warnings(name, definition.pipeline, Path(file).parent.absolute())
        priced += [f"{file}: {w}" for w in env_warnings(name, definition.pipeline, line_of)]
        priced += [f"{file}: {w}" for w in shell_warnings(name, definition.pipeline, line_of)]
        priced += [
            f"{file}: {w}"
            for w in missing_code(name, definition.pipeline, Path(file).parent, line_of)
        ]
        priced += [f"{file}: {w}" for w in condition_warnings(name, definition.pipeline, line_of)]
        priced += tier_warnings(name, definition.pipeline, config)
        priced += batch_warnings(name, definition.pipeline, config)
        priced += window_warnings(name, definition.pipeline, config, file, line_of)
        if cost or definition.pipeline.budget is not None:
            quotes.append((quote_of(definition, config, report=report), definition))
        # A model without a price under a cost budget leaves the worst case unbounded: the
        # budget check below says so once, naming the model and the fix.
    for warning in [*warnings, *priced]:
        err.print(f"warning: {printable(warning)}", soft_wrap=True)
    if problems:
        err.print(f"{printable(file)}: {len(problems)} problem(s)")
        for problem in problems:
            err.print(f"  - {printable(problem)}", soft_wrap=True)
        sys.exit(int(ExitCode.BAD_INPUT))
    budget_gate(quotes, strict=strict, when=file, reasons=not cost or as_json)
    if cost and as_json:
        from interlock.providers.terms import model_prices

        for quote, definition in quotes:
            shown = {**quote.to_json(), "prices": model_prices(definition.pipeline, config)}
            out.print(json.dumps(shown), soft_wrap=True)
        return
    names = printable(", ".join(workflow.definitions))
    partly = " (partly explored, see the warning)" if warnings else ""
    out.print(f"{file}: ok ({names}){partly}")
    if not workflow.language_stated and not quiet:
        out.print(
            f"  workflow language {workflow.language} (assumed: the file has no "
            f"'$language: {workflow.language}' line)",
            soft_wrap=True,
        )
    if cost:
        from interlock.providers.terms import model_prices, price_line

        for quote, definition in quotes:
            for line in quote_lines(quote):
                out.print(line, soft_wrap=True)
            # Which price each model is charged at: its tier, and the table it came from.
            for entry in model_prices(definition.pipeline, config):
                out.print(f"      price: {price_line(entry)}", soft_wrap=True)
    elif not quiet:
        for line in _describe(workflow.definitions, Path(file)):
            out.print(line, soft_wrap=True)
        for line in explored:
            out.print(line, soft_wrap=True)
    if not quiet and (config.loaded or any(map(calls_models, workflow.definitions.values()))):
        out.print(config.used_line, soft_wrap=True, markup=False)  # which file the models use


def typing_warnings(file: str, text: str | None = None) -> list[str]:
    """`file: line N: ...` for each value YAML reads as other than it was written
    (`country: NO` is false): `check` says them among its warnings, and `run`, `batch` and
    `submit` before they record anything (`say_typing_warnings`). JSON has no implicit
    types."""
    if Path(file).suffix.lower() == ".json":
        return []
    from interlock.core.yaml_types import implicit_typing

    if text is None:
        try:
            text = Path(file).read_text(encoding="utf-8-sig", errors="replace")
        except OSError:  # read already by the loader; gone since: nothing to say
            return []
    return [f"{file}: {w}" for w in implicit_typing(text)]


def say_typing_warnings(*files: str) -> None:
    """Print `typing_warnings` of each file once, on stderr, as `check` prints them."""
    for file in dict.fromkeys(files):
        for warning in typing_warnings(file):
            err.print(f"warning: {printable(warning)}", soft_wrap=True)


def _tolerance_lines(name: str, tolerance: dict[str, tuple[bool, bool]]) -> list[str]:
    """One line per fan-out with `tolerate`: which sides of it a path reaches."""
    lines = []
    for phase, (held, passed) in tolerance.items():
        sides = [
            "a path goes on with failed items" if held else "no path has a failed item",
            "a path fails past the tolerance" if passed else "no path goes past it",
        ]
        lines.append(f"  {name}, phase {phase!r}, tolerate: {'; '.join(sides)}")
    return lines


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per pipeline.")
@handle_errors
def pipelines(file: str, as_json: bool) -> None:
    """List the pipelines of FILE with their inputs and how to run each."""
    from interlock.core.loader import load_workflow

    workflow = load_workflow(file)
    if as_json:
        for name, definition in workflow.definitions.items():
            out.print(json.dumps(_summary(name, definition)), soft_wrap=True)
        return
    for line in _describe(workflow.definitions, Path(file)):
        out.print(line, soft_wrap=True)


def _summary(name: str, definition: Definition) -> dict[str, Any]:
    pipeline = definition.pipeline
    return {
        "name": name,
        "description": pipeline.description,
        "phases": [p.id for p in pipeline.phases],
        "workers": sum(len(p.workers) for p in pipeline.phases),
        "inputs": {
            key: {
                "default": spec.default,
                "type": spec.kind,
                "required": spec.required and spec.default is None,
                "description": spec.description,
            }
            for key, spec in pipeline.inputs.items()
        },
    }


def _describe(definitions: dict[str, Definition], file: Path) -> list[str]:
    """Each pipeline: what it is, its inputs, and the command that runs it."""
    lines = []
    for name, definition in definitions.items():
        summary = _summary(name, definition)
        phases, workers = len(summary["phases"]), summary["workers"]
        about = f": {printable(summary['description'])}" if summary["description"] else ""
        lines.append(f"  {printable(name)}{about} ({phases} phase(s), {workers} worker(s))")
        flags = []
        for key, spec in summary["inputs"].items():
            default = spec["default"]
            if spec["required"]:
                state = f"{spec['type']}, required"
                flags.append(f"--input {key}=VALUE")
            elif default is None:
                state = f"{spec['type']}, optional, no default"
            elif isinstance(default, bool):  # as it is written in a file and on a command line
                state = f"{spec['type']}, default {str(default).lower()}"
            else:
                state = f"{spec['type']}, default {default!r}"
            note = f": {printable(spec['description'])}" if spec["description"] else ""
            lines.append(f"      input {key} ({state}){note}")
        command = f"interlock run {shell_word(str(file))} {shell_word(name)} --topic TEXT"
        lines.append(f"      run: {' '.join([command, *flags])}")
    return lines


class _Progress:
    """Shows a long exploration's progress on stderr: on a terminal, or after a few seconds."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.shown = False
        self.last = 0.0

    def __enter__(self) -> Callable[[int, int], None]:
        return self.tell

    def __exit__(self, *exc: object) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def tell(self, states: int, waiting: int) -> None:
        now = time.monotonic()
        elapsed = now - self.started
        if not self.tty and (elapsed < PROGRESS_AFTER_S or now - self.last < 5.0):
            return
        self.last, self.shown = now, True
        line = (
            f"exploring {self.name!r}: {states:,} states, {waiting:,} waiting, {elapsed:.0f}s "
            "(--max-states bounds it)"
        )
        sys.stderr.write(f"\r\033[K{line}" if self.tty else f"{line}\n")
        sys.stderr.flush()


def call_problems(name: str, definition: Definition) -> list[str]:
    """`call:` targets that would not resolve when the pipeline runs from the command line."""
    problems = []
    for phase in definition.pipeline.phases:
        for worker in phase.workers:
            if worker.call is None:
                continue
            from interlock.runtime.executors import resolve_call  # only for a `call:` worker

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


COMMANDS = [init, check, pipelines]
