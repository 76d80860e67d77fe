"""`--variant NAME=FILE` of `interlock batch` (`interlock experiment`): the variants' files
read and checked against the base pipeline and the rows before anything is recorded, and
the plan of what each variant's rows run and reuse."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from interlock.errors import UsageError

if TYPE_CHECKING:
    from interlock.core.loader import Definition
    from interlock.runtime.models import ModelRunner


class VariantError(UsageError):
    """A variant cannot run the experiment's rows: nothing is recorded (exit 2)."""


def load_variants(
    file: str,
    base: Definition,
    specs: tuple[str, ...],
    inputs_file: str,
    topic_field: str | None,
    ignore_columns: Sequence[str] = (),
) -> list[tuple[str, Definition]]:
    """Each `NAME=FILE` as (name, the definition of the base's pipeline in FILE), checked:
    a good name given once, a file that loads, the same pipeline with the same declared
    inputs, and every row valid for it."""
    from interlock.cli.batch import read_rows
    from interlock.core.experiments import check_variant_name
    from interlock.core.loader import load_workflow

    found: list[tuple[str, Definition]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise VariantError(
                f"--variant {spec!r}: write NAME=FILE, such as --variant short-prompt=edited.yaml"
            )
        why = check_variant_name(name)
        if why is not None:
            raise VariantError(f"--variant {spec!r}: {why}")
        if any(name == n for n, _ in found):
            raise VariantError(f"--variant {name!r} is given twice; give each variant one name")
        workflow = load_workflow(path)  # a file that does not parse: its own error and line
        definition = workflow.definitions.get(base.name)
        if definition is None:
            names = ", ".join(sorted(workflow.definitions)) or "none"
            raise VariantError(
                f"--variant {name}={path}: has no pipeline {base.name!r} (its pipelines: "
                f"{names}); a variant runs the same pipeline as {file}: name it {base.name!r}"
            )
        _same_inputs(file, base, name, path, definition)
        read_rows(inputs_file, definition, topic_field, ignore_columns)  # valid for it too
        found.append((name, definition))
    return found


def _same_inputs(file: str, base: Definition, name: str, path: str, variant: Definition) -> None:
    """A variant takes the same rows: its pipeline declares the same inputs, of one type."""
    mine, theirs = base.pipeline.inputs, variant.pipeline.inputs
    missing = sorted(set(mine) - set(theirs))
    extra = sorted(set(theirs) - set(mine))
    retyped = sorted(k for k in set(mine) & set(theirs) if mine[k].type != theirs[k].type)
    if not (missing or extra or retyped):
        return
    said = []
    if missing:
        said.append(f"lacks {', '.join(missing)}")
    if extra:
        said.append(f"adds {', '.join(extra)}")
    if retyped:
        said.append(f"gives {', '.join(retyped)} another type")
    raise VariantError(
        f"--variant {name}={path}: pipeline {base.name!r} declares other inputs than in {file} "
        f"(it {'; '.join(said)}): a variant runs the same rows, so declare the same inputs "
        "in both files"
    )


def variant_ids(batch_id: str, variants: list[tuple[str, Definition]]) -> list[str]:
    """The batch ids of an experiment: the base's, then each variant's."""
    from interlock.core.experiments import BASE, variant_batch_id

    return [variant_batch_id(batch_id, n) for n in (BASE, *(n for n, _ in variants))]


def print_plan(
    models: ModelRunner,
    base: Definition,
    variants: list[tuple[str, Definition]],
    rows: int,
    *,
    stream: Any,
) -> None:
    """Per variant, the tasks a row runs and reuses, and the calls over all rows."""
    from interlock.core.experiments import UNKNOWN_UP_FRONT
    from interlock.workloads.experiments import earlier_reuse, plans

    found = plans(models, base, variants)
    width = max(len(p.variant) for p in found)
    stream.print(f"experiment plan, {rows} row(s) through {len(found)} variant(s):")
    stream.print(f"  {'variant'.ljust(width)}  tasks/row  run  reused  calls  reused over all rows")
    total = 0
    for one in found:
        total += one.runs * rows
        reused = f"  ({', '.join(one.reused)})" if one.reused else ""
        stream.print(
            f"  {one.variant.ljust(width)}  {one.tasks:>9}  {one.runs:>3}  {len(one.reused):>6}"
            f"  {one.runs * rows:>5}  {len(one.reused) * rows:>6}{reused}",
            soft_wrap=True,
        )
    stream.print(f"  calls in all: {total} (each task {UNKNOWN_UP_FRONT})", soft_wrap=True)
    stream.print(f"  {earlier_reuse(base)}", soft_wrap=True)
