"""Checks that span several places of a pipeline: roles, reads, transitions and loops.

Each problem is one line that names the pipeline, phase and worker, the offending key, and what
is allowed instead, e.g. "phase 'review': goto 'polsh' names no phase; phases are ...".
"""

from __future__ import annotations

import difflib
import re

from interlock.core.bounds import bounds_problems
from interlock.core.dominance import Dominance
from interlock.core.expressions import ROOT_NAMES, ExpressionError, compile_expression
from interlock.core.placeholders import RESERVED_OUTPUTS, command_problems
from interlock.core.reads import paths as read_paths
from interlock.core.reads import show_path
from interlock.core.signal_checks import check_waits
from interlock.core.state import artifact_name
from interlock.core.subpipelines import check_children
from interlock.core.task_slots import KEY_NAMES
from interlock.core.template_checks import limit_problems
from interlock.core.templates import (
    TEMPLATE_NAMES,
    TemplateProblem,
    input_names,
    template_names,
)
from interlock.core.workflow import Phase, Pipeline, WaitFor, Worker

OPTIONAL_READ = "?"  # a read ending in "?" may be absent (written only on some paths)
# Names a condition reads besides roles: a role with one of them could never be read.
# `feedback`, `signals` and `budget` are kept for conditions to come.
CONDITION_NAMES = frozenset(
    {"topic", "inputs", "visits", "roles", "feedback", "signals", "budget", "failed_items"}
)
_VERSION = re.compile(r"^(?P<base>.+?)(?:\.(?P<item>\d+))?(?:\.v(?P<visit>\d+))?$")


def read_name(entry: str) -> tuple[str, bool]:
    """Split a `reads` entry into (file name, optional)."""
    if entry.endswith(OPTIONAL_READ):
        return entry[:-1], True
    return entry, False


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def transitions(pipeline: Pipeline, index: int) -> list[tuple[str, bool]]:
    """Every phase that phase `index` may go to, with whether that edge is bounded."""
    phase = pipeline.phases[index]
    edges = [(rule.goto, rule.max_visits is not None) for rule in phase.next]
    unconditional = any(r.if_ is None and r.max_visits is None for r in phase.next)
    if not unconditional and index + 1 < len(pipeline.phases):
        edges.append((pipeline.phases[index + 1].id, False))
    return edges


def validate_pipeline(name: str, pipeline: Pipeline) -> list[str]:
    """All cross-reference problems of one pipeline (empty when sound)."""
    problems: list[str] = []
    where = f"pipeline {name!r}"
    phase_ids = [p.id for p in pipeline.phases]

    seen_phases: set[str] = set()
    for phase in pipeline.phases:
        if phase.id in seen_phases:
            problems.append(
                f"{where}: phase id {phase.id!r} is used twice; phase ids must be unique"
            )
        seen_phases.add(phase.id)

    roles: dict[str, str] = {}
    outputs: dict[str, str] = {}
    # A role names files (prompts, logs, outputs): on a file system that ignores case
    # (macOS, Windows) `writer` and `Writer` would share them.
    folded: dict[str, tuple[str, str]] = {}
    for phase in pipeline.phases:
        for worker in phase.workers:
            place = f"{where}, phase {phase.id!r}, worker {worker.role!r}"
            if worker.role in roles:
                problems.append(
                    f"{place}: role {worker.role!r} is already used in phase "
                    f"{roles[worker.role]!r}; roles must be unique in a pipeline"
                )
            elif worker.role.casefold() in folded:
                other, other_phase = folded[worker.role.casefold()]
                problems.append(
                    f"{place}: role {worker.role!r} differs from role {other!r} (phase "
                    f"{other_phase!r}) only in case; their files would be one file on macOS "
                    "and Windows: rename one of them"
                )
            folded.setdefault(worker.role.casefold(), (worker.role, phase.id))
            roles[worker.role] = phase.id
            if worker.role in CONDITION_NAMES:
                problems.append(
                    f"{place}: role {worker.role!r} is a name conditions already use "
                    f"({', '.join(sorted(CONDITION_NAMES))}); choose another role name"
                )
            if worker.output_name in outputs:
                problems.append(
                    f"{place}: output {worker.output_name!r} is also written by "
                    f"{outputs[worker.output_name]!r}; give one of them another 'output'"
                )
            outputs[worker.output_name] = worker.role

    problems += _check_output_names(where, pipeline)
    problems += _check_final(where, pipeline)
    problems += _check_reads(where, pipeline)
    problems += _check_transitions(where, pipeline, phase_ids, set(roles))
    problems += _check_templates(where, pipeline)
    if not any("task template" in p for p in problems):  # one that parses, of known names
        problems += limit_problems(where, pipeline)
    problems += _check_for_each(where, pipeline)
    problems += _check_loops(where, pipeline)
    problems += check_waits(where, pipeline)
    problems += _check_not_before(where, pipeline)
    problems += bounds_problems(where, pipeline)
    problems += _check_concurrency(where, pipeline)
    problems += _check_task_keys(where, pipeline)
    problems += check_children(where, pipeline)
    problems += _check_metrics(where, pipeline, set(roles))
    return problems


def _check_metrics(where: str, pipeline: Pipeline, roles: set[str]) -> list[str]:
    """A metric is a name and a CEL expression that reads only extracted values, the topic
    and inputs (what a delivered run's record keeps)."""
    if not pipeline.metrics:
        return []
    from interlock.core.metrics import METRIC_ROOTS, metric_name_problem

    problems = []
    known = METRIC_ROOTS | {r for r in roles if r.isidentifier()}
    for name, expression in pipeline.metrics.items():
        place = f"{where}, metrics {name!r}"
        bad_name = metric_name_problem(name)
        if bad_name is not None:
            problems.append(f"{place}: {bad_name}")
        try:
            compiled = compile_expression(expression)
        except ExpressionError as exc:
            problems.append(f"{place}: {exc}")
            continue
        problems += [f"{place}: {p}" for p in input_problems(pipeline, expression)]
        problems += [f"{place}: {p}" for p in value_problems(pipeline, expression)]
        for unknown in sorted(compiled.names - known):
            problems.append(
                f"{place}: expression {expression!r} reads {unknown!r}, which is not a role, "
                f"'topic', 'inputs' or 'roles'{_suggest(unknown, sorted(known))}; a metric "
                "reads the values workers extract, e.g. reviewer.score"
            )
    return problems


def _check_concurrency(where: str, pipeline: Pipeline) -> list[str]:
    """A concurrency key is known when the run is created: it may read topic and inputs."""
    slots = pipeline.slots
    if slots is None:
        return []
    place = f"{where}, concurrency, key"
    try:
        names = compile_expression(slots.key).names
    except ExpressionError as exc:
        return [f"{place}: {exc}"]
    problems = [f"{place}: {p}" for p in input_problems(pipeline, slots.key)]
    for name in sorted(names - {"topic", "inputs"}):
        problems.append(
            f"{place}: {slots.key!r} reads {name!r}; a key may read only 'topic' and 'inputs' "
            "(it is computed when the run is created), e.g. inputs.customer"
        )
    return problems


def _check_task_keys(where: str, pipeline: Pipeline) -> list[str]:
    """A worker's concurrency key is computed when an attempt is ready: it may read topic,
    inputs, its fan-out item and its model alias."""
    problems = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            slots = worker.concurrency
            if slots is None:
                continue
            place = f"{where}, worker {worker.role!r}, concurrency, key"
            try:
                names = compile_expression(slots.key).names
            except ExpressionError as exc:
                problems.append(f"{place}: {exc}")
                continue
            problems += [f"{place}: {p}" for p in input_problems(pipeline, slots.key)]
            for name in sorted(names - KEY_NAMES):
                problems.append(
                    f"{place}: {slots.key!r} reads {name!r}; a task's key may read only "
                    "'topic', 'inputs', 'item' and 'model', e.g. inputs.customer"
                )
            if "item" in names and phase.for_each is None:
                problems.append(
                    f"{place}: {slots.key!r} reads 'item', but phase {phase.id!r} has no "
                    "for_each: read 'inputs' or 'topic' instead, or fan the phase out"
                )
    return problems


def _check_output_names(where: str, pipeline: Pipeline) -> list[str]:
    """Outputs may not be a name the run directory uses, nor another output's later versions.

    A worker's output is kept once per visit and item (`x.md`, `x.v2.md`, `x.0.md`), so an
    output named `x.v2.md` would overwrite the second visit of `x.md`. File systems that
    ignore case make `Final.md` the same file as `final.md`, so names are compared folded.
    """
    problems = []
    owners = {w.output_name.casefold(): w.role for p in pipeline.phases for w in p.workers}
    for phase in pipeline.phases:
        for worker in phase.workers:
            place = f"{where}, phase {phase.id!r}, worker {worker.role!r}"
            name = worker.output_name
            reserved = RESERVED_OUTPUTS.get(name.casefold())
            if reserved is not None:
                problems.append(
                    f"{place}: output {name!r} is {reserved} in every run directory; choose "
                    f"another 'output' (reserved: {', '.join(RESERVED_OUTPUTS)})"
                )
                continue
            clash = _version_of(name, owners, worker.role)
            if clash is not None:
                other, version = clash
                problems.append(
                    f"{place}: output {name!r} is the name of {version} of {other!r}'s output "
                    f"({pipeline.worker(other).output_name!r}); choose another 'output'"
                )
    return problems


def _version_of(name: str, owners: dict[str, str], role: str) -> tuple[str, str] | None:
    """(other role, which version) when `name` is a later visit or an item of another output."""
    stem, dot, ext = name.rpartition(".")
    splits = [(stem, f"{dot}{ext}"), (name, "")] if dot else [(name, "")]
    for stem, ext in splits:
        match = _VERSION.match(stem)
        if match is None or not (match["item"] or match["visit"]):
            continue
        base = f"{match['base']}{ext}"
        other = owners.get(base.casefold())
        if other is None or other == role:
            continue
        visit = int(match["visit"] or 1)
        item = None if match["item"] is None else int(match["item"])
        if artifact_name(base, visit, item).casefold() != name.casefold():
            continue
        parts = [f"visit {visit}"] if visit > 1 else []
        parts += [f"item {item}"] if item is not None else []
        return other, " ".join(parts)
    return None


def _check_final(where: str, pipeline: Pipeline) -> list[str]:
    finals = [(p, w) for p in pipeline.phases for w in p.workers if w.final]
    last = pipeline.phases[-1]
    if not finals:
        return [
            f"{where}: no worker has 'final: true'; mark the last worker of the last phase "
            f"({last.workers[-1].role!r} in {last.id!r}) as final"
        ]
    problems = []
    if len(finals) > 1:
        names = ", ".join(repr(w.role) for _, w in finals)
        problems.append(f"{where}: several workers are final ({names}); exactly one may be")
    phase, worker = finals[-1]
    if phase is not last or worker is not last.workers[-1]:
        problems.append(
            f"{where}, phase {phase.id!r}, worker {worker.role!r}: the final worker must be the "
            f"last worker of the last phase ({last.id!r})"
        )
    if last.next:
        problems.append(f"{where}, phase {last.id!r}: the final phase cannot have 'next' rules")
    if last.for_each is not None:
        problems.append(f"{where}, phase {last.id!r}: the final phase cannot use 'for_each'")
    return problems


def _check_reads(where: str, pipeline: Pipeline) -> list[str]:
    """A required read must be written on every way the run can reach its reader.

    The writer is either an earlier worker of the same sequential phase, or a phase that
    dominates the reader's (runs on every way from the first phase to it). A file written only
    on one branch, or only after a loop, is read as optional: `name?`.
    """
    problems = []
    written: dict[str, int] = {}  # output name -> index of the phase that writes it
    for index, phase in enumerate(pipeline.phases):
        for worker in phase.workers:
            written[worker.output_name] = index
    dominance = _phase_dominance(pipeline)
    for index, phase in enumerate(pipeline.phases):
        in_phase: set[str] = set()
        for worker in phase.workers:
            place = f"{where}, phase {phase.id!r}, worker {worker.role!r}"
            listed: dict[str, str] = {}
            for entry in worker.reads:
                file, optional = read_name(entry)
                if file in listed:
                    problems.append(
                        f"{place}: reads {file!r} twice ({listed[file]!r} and {entry!r}); "
                        f"list it once, as '{file}' or, if the task can do without it, '{file}?'"
                    )
                    continue
                listed[file] = entry
                writer = written.get(file)
                if writer is None:
                    problems.append(
                        f"{place}: reads {file!r}, which no worker writes"
                        f"{_suggest(file, sorted(written))}; outputs are "
                        f"{', '.join(sorted(written))}"
                    )
                elif optional or (phase.mode == "sequential" and file in in_phase):
                    continue
                elif (wait := _skipping_wait(pipeline.phases[writer])) and writer != index:
                    problems.append(
                        f"{place}: reads {file!r}, which phase {pipeline.phases[writer].id!r} "
                        f"writes only if signal {wait.signal!r} arrives before its wait times "
                        f"out; mark it optional as '{file}?' if the task can do without it"
                    )
                elif not _sure(dominance, writer, index):
                    problems.append(
                        f"{place}: {_unsure_read(pipeline, dominance, file, writer, index)}"
                    )
            in_phase.add(worker.output_name)
    return problems


def _skipping_wait(phase: Phase) -> WaitFor | None:
    """The wait that may pass a phase over even on the way: one for a signal before the
    phase starts, with a timeout (when it times out, the phase does not run)."""
    wait = phase.wait_for
    if wait is not None and wait.when == "before" and wait.timeout is not None:
        return wait
    return None


def _phase_dominance(pipeline: Pipeline) -> Dominance | None:
    """The phases' dominance, or None while phase ids repeat or a `goto` names no phase (the
    graph is then unknown, and that problem is reported on its own)."""
    indices = {phase.id: index for index, phase in enumerate(pipeline.phases)}
    if len(indices) < len(pipeline.phases):
        return None
    if any(rule.goto not in indices for phase in pipeline.phases for rule in phase.next):
        return None
    return Dominance(
        [
            [indices[to] for to, _ in transitions(pipeline, index) if to in indices]
            for index in range(len(pipeline.phases))
        ]
    )


def _sure(dominance: Dominance | None, writer: int, reader: int) -> bool:
    if writer == reader:
        return False
    if dominance is None:
        return writer < reader
    # A phase no way reaches never runs, so its reads cannot fail.
    return dominance.dominates(writer, reader) or not dominance.reachable(reader)


def _unsure_read(
    pipeline: Pipeline, dominance: Dominance | None, file: str, writer: int, reader: int
) -> str:
    """Why a required read may find nothing, and the fix."""
    writer_id = pipeline.phases[writer].id
    way = [] if dominance is None else dominance.way_around(writer, reader)
    if writer < reader and way:
        shown = " -> ".join(pipeline.phases[i].id for i in way)
        return (
            f"reads {file!r}, which only phase {writer_id!r} writes, but the run can reach "
            f"phase {pipeline.phases[reader].id!r} without it ({shown}); mark it optional as "
            f"'{file}?' if the task can do without it, or read a file that every branch writes"
        )
    return (
        f"reads {file!r}, which is written by phase {writer_id!r}, not by an earlier phase; "
        f"if it is only there after a loop, mark it optional as '{file}?'"
    )


def _check_transitions(
    where: str, pipeline: Pipeline, phase_ids: list[str], roles: set[str]
) -> list[str]:
    problems = []
    for phase in pipeline.phases:
        for number, rule in enumerate(phase.next, start=1):
            place = f"{where}, phase {phase.id!r}, next rule {number}"
            if rule.goto not in phase_ids:
                problems.append(
                    f"{place}: goto {rule.goto!r} names no phase{_suggest(rule.goto, phase_ids)}; "
                    f"phases are {', '.join(phase_ids)}"
                )
            if rule.if_ is None:
                continue
            try:
                compiled = compile_expression(rule.if_)
            except ExpressionError as exc:
                problems.append(f"{place}: {exc}")
                continue
            problems += [f"{place}: {p}" for p in budget_problems(pipeline, rule.if_)]
            problems += [f"{place}: {p}" for p in input_problems(pipeline, rule.if_)]
            problems += [f"{place}: {p}" for p in value_problems(pipeline, rule.if_)]
            known = ROOT_NAMES | {r for r in roles if r.isidentifier()}
            for unknown in sorted(compiled.names - known):
                problems.append(
                    f"{place}: expression {rule.if_!r} reads {unknown!r}, which is not a role, "
                    f"'topic', 'inputs', 'visits' or 'roles'{_suggest(unknown, sorted(known))}"
                )
    return problems


BUDGET_FIELDS = {  # what `budget.*` holds -> the limit it needs, if any
    "spent_usd": None,
    "spent_tokens": None,
    "remaining_usd": "max_cost_usd",
    "remaining_tokens": "max_tokens",
}


def budget_problems(pipeline: Pipeline, condition: str) -> list[str]:
    """`budget.*` names a condition reads that do not exist, or need a limit not set."""
    compiled = compile_expression(condition)
    if "budget" not in compiled.names:
        return []
    problems = []
    for path in read_paths(compiled.tree, frozenset({"budget"})):
        name = path[1] if len(path) > 1 else ""
        if name not in BUDGET_FIELDS:
            problems.append(
                f"expression {condition!r} reads {show_path(path)}; the budget has "
                f"{', '.join('budget.' + f for f in BUDGET_FIELDS)}"
            )
            continue
        limit = BUDGET_FIELDS[name]
        if limit is not None and getattr(pipeline.budget, limit, None) is None:
            problems.append(
                f"expression {condition!r} reads budget.{name}, but the pipeline's budget sets "
                f"no {limit}; add budget: {{{limit}: ...}} to the pipeline"
            )
    return problems


def _check_not_before(where: str, pipeline: Pipeline) -> list[str]:
    """A `not_before` reads only declared inputs (its syntax is `check_waits`' concern)."""
    problems = []
    for phase in pipeline.phases:
        if phase.not_before is None:
            continue
        try:
            found = input_problems(pipeline, phase.not_before)
        except ExpressionError:
            continue  # reported by check_waits
        problems += [f"{where}, phase {phase.id!r}, not_before: {p}" for p in found]
    return problems


def value_problems(pipeline: Pipeline, expression: str) -> list[str]:
    """`role.NAME` (or `roles["role"].NAME`) an expression reads that the role's worker does
    not extract: a role's values are exactly its `extract` names, so it never has one."""
    workers = {w.role: w for phase in pipeline.phases for w in phase.workers}
    problems = []
    tree = compile_expression(expression).tree
    for path in read_paths(tree, frozenset({*workers, "roles"})):
        named = path[1:] if path[0] == "roles" else path
        if len(named) < 2 or named[0] not in workers:
            continue  # the role alone, or one that is not there (said by the caller)
        role, name = named[0], named[1]
        extracted = sorted(workers[role].extract)
        if name not in extracted:
            shown = show_path(path[: len(path) - len(named) + 2])
            problems.append(
                f"expression {expression!r} reads {shown}, which worker {role!r} does not "
                f"extract{_suggest(name, extracted)}; it extracts "
                f"{', '.join(extracted) or 'nothing'} (add it under the worker's 'extract')"
            )
    return problems


def input_problems(pipeline: Pipeline, expression: str) -> list[str]:
    """`inputs.NAME` an expression reads that the pipeline does not declare: a run can never
    have it (undeclared inputs are refused when a run is created)."""
    declared = sorted(pipeline.inputs)
    problems = []
    for path in read_paths(compile_expression(expression).tree, frozenset({"inputs"})):
        if len(path) > 1 and path[1] not in pipeline.inputs:
            problems.append(
                f"expression {expression!r} reads {show_path(path[:2])}, which is not a declared "
                f"input{_suggest(path[1], declared)}; declared inputs: "
                f"{', '.join(declared) or 'none'} (declare it under the pipeline's 'inputs')"
            )
    return problems


_ITEM_NAMES = frozenset({"item", "item_index"})  # set only in a phase that fans out


def _check_templates(where: str, pipeline: Pipeline) -> list[str]:
    problems = []
    allowed = TEMPLATE_NAMES | set(pipeline.inputs)
    for phase in pipeline.phases:
        for worker in phase.workers:
            place = f"{where}, phase {phase.id!r}, worker {worker.role!r}"
            if worker.command is not None:
                reads = [read_name(entry)[0] for entry in worker.reads]
                optional = [read_name(e)[0] for e in worker.reads if read_name(e)[1]]
                found = command_problems(worker.command, reads, pipeline.inputs, optional)
                for problem in found:
                    problems.append(f"{place}: key 'command', {problem}")
            texts = [("task", worker.task)] + [("command", arg) for arg in worker.command or []]
            texts += [("system", worker.system)] if worker.system else []
            texts += [
                (f"inputs.{k}", v) for k, v in sorted(worker.inputs.items()) if isinstance(v, str)
            ]
            for key, text in texts:
                try:
                    names = template_names(text)
                except TemplateProblem as exc:
                    problems.append(f"{place}: key {key!r}: {exc}")
                    continue
                here = allowed if phase.for_each is not None else allowed - _ITEM_NAMES
                for unknown in sorted(names - allowed):
                    problems.append(
                        f"{place}: key {key!r} uses {{{{ {unknown} }}}}, which is not defined"
                        f"{_suggest(unknown, sorted(here))}; available: "
                        f"{', '.join(sorted(here))} (declare it under 'inputs')"
                    )
                declared = sorted(pipeline.inputs)
                for name in sorted(input_names(text) - set(declared)):
                    problems.append(
                        f"{place}: key {key!r} uses inputs.{name}, which is not a declared "
                        f"input{_suggest(name, declared)}; declared inputs: "
                        f"{', '.join(declared) or 'none'} (declare it under the pipeline's "
                        "'inputs')"
                    )
                if phase.for_each is None and (used := sorted(names & _ITEM_NAMES)):
                    shown = " and ".join(f"{{{{ {name} }}}}" for name in used)
                    they = ("it is", "it") if len(used) == 1 else ("they are", "them")
                    problems.append(
                        f"{place}: key {key!r} uses {shown} outside a for_each phase: "
                        f"{they[0]} set only in a phase that fans out (give phase "
                        f"{phase.id!r} a 'for_each', or take {they[1]} out)"
                    )
    return problems


def _check_for_each(where: str, pipeline: Pipeline) -> list[str]:
    problems = []
    for index, phase in enumerate(pipeline.phases):
        if phase.for_each is None:
            continue
        role, _, value = phase.for_each.items.rpartition(".")
        place = f"{where}, phase {phase.id!r}, for_each"
        source = _earlier_worker(pipeline, index, role)
        if source is None:
            problems.append(f"{place}: items {phase.for_each.items!r}: no earlier worker {role!r}")
        elif value not in source.extract or source.extract[value].type != "list":
            problems.append(
                f"{place}: items {phase.for_each.items!r}: worker {role!r} must extract "
                f"{value!r} with type 'list'"
            )
    return problems


def _earlier_worker(pipeline: Pipeline, index: int, role: str) -> Worker | None:
    for phase in pipeline.phases[:index]:
        for worker in phase.workers:
            if worker.role == role:
                return worker
    return None


def _check_loops(where: str, pipeline: Pipeline) -> list[str]:
    """A cycle made only of unbounded edges could run forever: reject it."""
    ids = [p.id for p in pipeline.phases]
    graph = {
        ids[i]: [to for to, bounded in transitions(pipeline, i) if not bounded and to in ids]
        for i in range(len(ids))
    }
    cycle = _find_cycle(ids, graph)
    if cycle:
        path = " -> ".join([*cycle, cycle[0]])
        return [f"{where}: loop {path} has no bound; give one of its rules 'max_visits: N'"]
    return []


def _find_cycle(ids: list[str], graph: dict[str, list[str]]) -> list[str] | None:
    """The first cycle a depth-first search finds, in file order; iterative, so that a
    pipeline of thousands of phases does not exhaust Python's stack."""
    state: dict[str, int] = {}  # 0 unseen, 1 on the stack, 2 done
    for start in ids:
        if state.get(start):
            continue
        state[start] = 1
        path = [start]
        pending = [iter(graph[start])]
        while pending:
            succ = next(pending[-1], None)
            if succ is None:
                state[path.pop()] = 2
                pending.pop()
                continue
            if state.get(succ) == 1:
                return path[path.index(succ) :]
            if not state.get(succ):
                state[succ] = 1
                path.append(succ)
                pending.append(iter(graph[succ]))
    return None
