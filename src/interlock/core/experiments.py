"""Experiments: the same rows through several variants of a pipeline. Pure: no I/O.

A variant's row runs as a rerun of the base row's run with the variant's definition, so each
of its tasks whose fingerprint equals the base task's is carried over instead of paid again
(`interlock.runtime.reuse`). Before anything runs, `plan` says which tasks that will be, from
what can be known up front: a task is reused when its worker is defined alike in both (the
same command, call, or model with the same resolved settings and task template) and every
file it reads comes from a task that is reused too, since a carried-over output is the very
same bytes. What it cannot know: which way a condition goes or how often a loop turns (from
values a changed worker extracts), how many items a `for_each` has, retries and fallbacks,
and a base task that fails (a failed task is not carried over).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from interlock.core.validate import read_name
from interlock.core.workflow import Pipeline

BASE = "base"  # the name of an experiment's base variant (the workflow file given first)
_VARIANT = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")


def check_variant_name(name: str) -> str | None:
    """Why `name` cannot name a variant (None: it can): its batch and run ids are made of it."""
    if name == BASE:
        return f"{BASE!r} is the name of the workflow file given first; choose another"
    if not _VARIANT.match(name):
        return (
            "a variant's name is lowercase letters, digits and '-', starting with a letter or "
            "digit, at most 16 characters (its rows' runs are named after it)"
        )
    return None


def variant_batch_id(experiment: str, variant: str) -> str:
    """The batch id of a variant: the experiment's (its base batch's) with the name after."""
    return experiment if variant == BASE else f"{experiment}-{variant}"


@dataclass(frozen=True, kw_only=True)
class VariantPlan:
    """What one variant's row costs, one pass through its phases: tasks run and reused."""

    variant: str
    tasks: int  # one per worker (a for_each phase's workers counted once)
    reused: tuple[str, ...]  # roles carried over from the base row
    changed: tuple[str, ...]  # roles that run: defined otherwise, or reading what changed

    @property
    def runs(self) -> int:
        """Tasks that run (and call their worker) per row."""
        return self.tasks - len(self.reused)


def _producers(pipeline: Pipeline) -> dict[str, str]:
    return {w.output_name: w.role for phase in pipeline.phases for w in phase.workers}


def plan(
    base: Pipeline,
    variant: Pipeline,
    *,
    name: str,
    base_identity: Mapping[str, Any],
    identity: Mapping[str, Any],
) -> VariantPlan:
    """Which of the variant's tasks a row reuses from its base row (see the module's text).

    `base_identity`/`identity`: what each role's worker resolves to (model settings, code
    files), read by the runtime; workers alike in definition and identity are the same.
    """
    made_by = _producers(variant)
    base_phase = {w.role: phase.id for phase in base.phases for w in phase.workers}
    reused: list[str] = []
    changed: list[str] = []
    same: set[str] = set()
    # Phases in order: a worker reads only what earlier phases (or loops) wrote, so each
    # read's producer is judged before it; one read from a later phase counts as changed.
    for phase in variant.phases:
        for worker in phase.workers:
            role = worker.role
            alike = (
                base_phase.get(role) == phase.id
                and base.worker(role).model_dump() == worker.model_dump()
                and base_identity.get(role) == identity.get(role)
            )
            reads = [made_by.get(read_name(entry)[0]) for entry in worker.reads]
            if alike and all(r is None or r in same for r in reads):
                same.add(role)
                reused.append(role)
            else:
                changed.append(role)
    return VariantPlan(
        variant=name, tasks=len(reused) + len(changed), reused=tuple(reused), changed=tuple(changed)
    )


def base_plan(base: Pipeline) -> VariantPlan:
    """The base variant: every task runs."""
    roles = tuple(w.role for phase in base.phases for w in phase.workers)
    return VariantPlan(variant=BASE, tasks=len(roles), reused=(), changed=roles)


UNKNOWN_UP_FRONT = (
    "counted once per worker; not known before running: loop visits and branches (from values "
    "a changed worker extracts), for_each items, retries and fallbacks, and base tasks that "
    "fail (a failed task is not reused)"
)
