"""What a workflow file may not ask for, though a pinned definition may hold it (pure).

These are checked when a workflow file is read (`validate_pipeline`), not when a run's pinned
definition is rebuilt, so a run recorded before a limit existed still reads: its wait is then
refused when it starts (`waits`), and its schema's references are never retrieved (`schemas`).

- durations (`delay`, `wait_for.timeout`, `cache.ttl`) of at most ten years;
- a `not_before` that reads only inputs gives, with their defaults, a time in 1970-9999;
- integer input defaults of at most 64 bits, which conditions compute with;
- a `schema:` (of a worker or a `wait_for`) whose `$ref`s all point inside it.
"""

from __future__ import annotations

from interlock.core.inputs import scalar_problem
from interlock.core.schemas import ref_problem
from interlock.core.timebounds import duration_problem
from interlock.core.waits import not_before_problems
from interlock.core.workflow import Cache, Pipeline


def bounds_problems(where: str, pipeline: Pipeline) -> list[str]:
    """Each duration, time, number or schema reference of `pipeline` past what it may be."""
    problems = _ttl(where, pipeline.cache)
    for name, spec in pipeline.inputs.items():
        problem = scalar_problem(spec.default)
        if problem is not None:
            problems.append(
                f"{where}, input {name!r}, key 'default': an input's default must be a number "
                f"conditions can use: {problem}"
            )
    for phase in pipeline.phases:
        place = f"{where}, phase {phase.id!r}"
        problem = duration_problem(phase.delay, "delay")
        if problem is not None:
            problems.append(f"{place}, key 'delay': {problem}")
        wait = phase.wait_for
        if wait is not None:
            problem = duration_problem(wait.timeout, "timeout")
            problem = problem or (ref_problem(wait.data_schema) if wait.data_schema else None)
            if problem is not None:
                problems.append(f"{place}, key 'wait_for': {problem}")
        for worker in phase.workers:
            at = f"{place}, worker {worker.role!r}"
            problems += _ttl(at, worker.cache)
            schema = worker.output_schema
            problem = ref_problem(schema) if isinstance(schema, dict) else None
            if problem is not None:
                problems.append(f"{at}, key 'schema': {problem}")
    return problems + not_before_problems(where, pipeline)


def _ttl(place: str, cache: bool | Cache | None) -> list[str]:
    problem = duration_problem(cache.ttl, "ttl") if isinstance(cache, Cache) else None
    return [] if problem is None else [f"{place}, key 'cache': {problem}"]
