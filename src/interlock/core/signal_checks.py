"""What `interlock check` finds wrong with waits: signals read but never waited for, one
signal with two schemas, a `not_before` that does not compile, signal data no path reads.

The first three are validation errors (the file cannot run as meant); the last is found while
exploring (`core.explore`), which knows which reads can happen after a wait took its signal.
Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from interlock.core.expressions import ExpressionError, compile_expression
from interlock.core.waits import waited_signals
from interlock.core.workflow import Pipeline

# `signals.NAME`, `signals['NAME']` or `signals["NAME"]` in a CEL condition or a template.
_READ = re.compile(r"""\bsignals\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*['"]([A-Za-z_]\w*)['"]\s*\])""")


def signals_read(text: str) -> set[str]:
    """The signal names a condition or template reads."""
    return {a or b for a, b in _READ.findall(text)}


def reading_places(pipeline: Pipeline) -> Iterator[tuple[str, str, str]]:
    """(phase id, place in words, text) of every condition and template that may read
    signals."""
    for phase in pipeline.phases:
        for number, rule in enumerate(phase.next, start=1):
            if rule.if_:
                yield phase.id, f"phase {phase.id!r}, next rule {number}", rule.if_
        if phase.not_before:
            yield phase.id, f"phase {phase.id!r}, not_before", phase.not_before
        for worker in phase.workers:
            for text in [worker.task, *(worker.command or [])]:
                yield phase.id, f"phase {phase.id!r}, worker {worker.role!r}", text


def check_waits(where: str, pipeline: Pipeline) -> list[str]:
    """Problems of the pipeline's waits that need no exploring."""
    problems = []
    waits = waited_signals(pipeline)
    for _, place, text in reading_places(pipeline):
        for name in sorted(signals_read(text) - set(waits)):
            known = ", ".join(sorted(waits)) or "none"
            problems.append(
                f"{where}, {place}: reads signals.{name}, but no phase waits for signal "
                f"{name!r} (signals waited for: {known}); add 'wait_for: {{signal: {name}}}' "
                "to the phase that should wait for it, or fix the name"
            )
    for name, phases in waits.items():
        schemas = {json.dumps(p.wait_for.data_schema, sort_keys=True) for p in phases if p.wait_for}
        if len(schemas) > 1:
            ids = ", ".join(repr(p.id) for p in phases)
            problems.append(
                f"{where}: phases {ids} wait for signal {name!r} with different schemas; "
                "a signal is checked when it is sent, before anyone knows which wait takes it: "
                "give them the same schema, or use two signal names"
            )
    for phase in pipeline.phases:
        if phase.not_before is None:
            continue
        try:
            compile_expression(phase.not_before)
        except ExpressionError as exc:
            problems.append(f"{where}, phase {phase.id!r}, not_before: {exc}")
    return problems


def unread_signal_data(pipeline: Pipeline, used: set[str]) -> list[str]:
    """A problem for each wait whose signal carries data (it has a schema) that nothing on
    any explored path reads after the wait took it (`used`: the names that were read)."""
    problems = []
    for name, phases in waited_signals(pipeline).items():
        if name in used or not any(p.wait_for and p.wait_for.data_schema for p in phases):
            continue
        problems.append(
            f"phase {phases[0].id!r}: signal {name!r} carries data (its wait has a schema), "
            f"but no path reads it after the wait: read signals.{name} in a later next rule "
            f"or task template (e.g. {{{{ signals.{name} }}}}), or drop the schema"
        )
    return problems
