"""What `check` says of the files a command worker runs: a script beside the workflow that
its command names (`python {workflow_dir}/scripts/clean.py`) and that is not there, as in a
workflow copied to another folder without its scripts. The run would fail at that task, and
`rerun --dry-run` would count the missing file as a changed one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from interlock.core.workflow import Pipeline


def missing_code(
    name: str,
    pipeline: Pipeline,
    workflow_dir: Path,
    line_of: Callable[[Sequence[Any]], int | None],
) -> list[str]:
    """One warning per code file a command names under `workflow_dir` that does not exist."""
    folder = workflow_dir.absolute()
    warnings = []
    for p, phase in enumerate(pipeline.phases):
        for w, worker in enumerate(phase.workers):
            argv = [arg.replace("{workflow_dir}", str(folder)) for arg in worker.command or []]
            for index, arg in enumerate(argv):
                if "{" in arg or not Path(arg).is_absolute():
                    continue
                path = Path(arg)
                if not path.is_relative_to(folder) or path.exists():
                    continue
                # Only a missing file loads the reuse machinery (the ledger's and the model
                # runner's modules with it): `check` of a workflow whose files are there
                # needs none of it.
                from interlock.runtime.reuse import is_code

                if not is_code(argv, index, folder):
                    continue
                line = line_of([name, "phases", p, "workers", w, "command", index])
                where = f"line {line}: " if line is not None else ""
                place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
                shown = worker.command[index] if worker.command else arg
                warnings.append(
                    f"{where}{place}, key 'command': it runs {shown!r}, which is not there "
                    f"({path}): the task would fail; copy the file beside the workflow or "
                    "fix the path"
                )
    return warnings
