"""The worst-case quote on the command line: `check --cost`, and the budget warning of
`check` and `run` (an error with `--strict`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.cli.base import err
from interlock.errors import ExitCode, InterlockError

if TYPE_CHECKING:
    from interlock.core.explore import ExploreReport
    from interlock.core.loader import Definition
    from interlock.core.quote import Quote, TextSizes
    from interlock.providers import ModelConfig


class OverBudget(InterlockError):
    """The worst case of a run is over its pipeline's budget, and `--strict` was given."""

    exit_code = ExitCode.OVER_BUDGET


def quote_of(
    definition: Definition,
    config: ModelConfig,
    sizes: TextSizes | None = None,
    report: ExploreReport | None = None,
) -> Quote:
    """The worst case of `definition` (exploring it unless `report` is given)."""
    from interlock.runtime.budget_reserve import run_quote

    return run_quote(definition, config, sizes, report)


def budget_gate(
    quotes: list[tuple[Quote, Definition]], *, strict: bool, when: str, reasons: bool = True
) -> None:
    """Warn about each budget a worst case is over; raise OverBudget under `strict`.

    `reasons=False`: the caller prints the quotes' "no bound" lines after, so a warning does
    not repeat them (an error under `strict` always says them: no quote follows it).
    """
    reasons = reasons or strict
    lines = [line for q, d in quotes for line in q.over_budget(d.pipeline.budget, reasons=reasons)]
    if not lines:
        return
    if strict:
        text = "\n".join(f"  - {line}" for line in lines)
        raise OverBudget(
            f"{when}: the worst case is over the budget (--strict):\n{text}\n"
            "  ('interlock check FILE --cost' shows the quote; leave out --strict to go on)"
        )
    for line in lines:
        err.print(f"warning: {line}", soft_wrap=True)


def run_gate(
    file: str, definition: Definition, home: Path, topic: str, inputs: dict[str, Any], strict: bool
) -> None:
    """Before a run starts: which configuration its models use (one line), and its worst
    case, with its own topic and inputs, against its budget."""
    from interlock.core.loader import calls_models

    models = calls_models(definition)
    if definition.pipeline.budget is None and not models:
        return
    from interlock.core.quote import TextSizes
    from interlock.errors import UsageError
    from interlock.providers import ModelConfig

    try:
        config = ModelConfig.for_workflow(Path(file).parent, home)
    except Exception as exc:  # an invalid interlock.toml: its message names the file
        raise UsageError(str(exc)) from None
    if models:
        err.print(config.used_line, soft_wrap=True, markup=False)
    if definition.pipeline.budget is None:
        return
    defaults = {
        k: v.default for k, v in definition.pipeline.inputs.items() if v.default is not None
    }
    sizes = TextSizes.of_run(topic, {**defaults, **inputs})
    budget_gate(
        [(quote_of(definition, config, sizes), definition)],
        strict=strict,
        when=f"{file}: pipeline {definition.name!r}",
    )


def refuse_unrunnable_calls(file: str, name: str, definition: Definition) -> None:
    """Before a run starts here: a `call:` target that does not import, a script beside the
    workflow that a command runs and that is not there, or `tools:` without the MCP library,
    fails its task when the phase is reached, after what came before was paid for. Said now,
    `check`'s way (which warns of the script only: the file may be put there before a run)."""
    from interlock.cli.workflows import call_problems
    from interlock.core.parse import locator
    from interlock.errors import UsageError
    from interlock.runtime.code_checks import missing_code

    problems = call_problems(name, definition)
    try:
        line_of = locator(Path(file).read_text(encoding="utf-8-sig", errors="replace"))
    except OSError:  # read a moment ago; gone now: no lines to name
        line_of = lambda path: None  # noqa: E731
    problems += missing_code(name, definition.pipeline, Path(file).parent, line_of)
    problems += tools_unrunnable(name, definition)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise UsageError(f"{file}: nothing was recorded:\n{listed}")


def tools_unrunnable(name: str, definition: Definition) -> list[str]:
    """Workers with `tools:` when the MCP library is not installed: their tasks would fail
    after what came before them was paid for."""
    pipeline = definition.pipeline
    workers = [(p, w) for p in pipeline.phases for w in p.workers if w.tools]
    if not workers:
        return []  # the MCP library takes most of a second to import: only for tools
    from interlock.providers.mcp_tools import sdk_missing

    missing = sdk_missing()
    if missing is None:
        return []
    return [f"pipeline {name!r}, phase {p.id!r}, worker {w.role!r}: {missing}" for p, w in workers]


def quote_lines(quote: Quote) -> list[str]:
    """The quote in words, one line each."""
    from interlock.core.quote import ASSUMED_TEXT_TOKENS

    if quote.usd is not None and quote.tokens is not None:
        most = f"at most ${quote.usd:,.4f} and {quote.tokens:,} tokens"
    elif quote.usd is not None:
        most = f"at most ${quote.usd:,.4f}; tokens: no bound"
    elif quote.tokens is not None:
        most = f"cost: no bound; at most {quote.tokens:,} tokens"
    else:
        most = "no bound on cost or tokens"
    if quote.uncounted:
        # Said in the headline: a reader of the amount alone must not take it as the whole.
        roles = ", ".join(repr(role) for role in quote.uncounted)
        workers = "worker" if len(quote.uncounted) == 1 else "workers"
        most += f", not counting the model calls of call: {workers} {roles}"
    assumed = (
        f"; topic and each input taken as {ASSUMED_TEXT_TOKENS:,} tokens" if quote.assumed else ""
    )
    lines = [f"  {quote.pipeline}: {most} (worst case{assumed})"]
    if not quote.complete:
        lines.append("      not a bound: exploring stopped early (raise --max-states)")
    elif not quote.exact:
        lines.append("      a bound: the dearest run may cost less (too many ways back to weigh)")
    if quote.usd_path and quote.usd is not None:  # with no bound, no path is the dearest
        path = ", ".join(f"{phase} x{count}" for phase, count in quote.usd_path)
        lines.append(f"      dearest path: {path}")
    for task in quote.tasks:
        if task.calls == 0:
            continue
        lanes = f" x {task.lanes} lanes" if task.lanes > 1 else ""
        cost = "no bound" if task.usd is None else f"${task.usd:,.4f}"
        used = "no bound" if task.tokens is None else f"{task.tokens:,} tokens"
        prompt = (
            "prompt with no bound"
            if task.prompt_tokens is None
            else f"prompt up to {task.prompt_tokens:,} tokens"
        )
        lines.append(
            f"      {task.role} (phase {task.phase}{lanes}): up to {task.calls} call(s), "
            f"{prompt}: {cost}, {used} per task"
        )
    reasons = dict.fromkeys([*quote.usd_unbounded, *quote.tokens_unbounded])
    for reason in reasons:
        lines.append(f"      no bound: {reason}")
    for line in quote.not_quoted:
        lines.append(f"      not quoted: {line}")
    return lines
