"""The committed outputs in a run's folder: renamed into place as their completions are
recorded, found there after a crash (adopted), and restored from the ledger when they are
missing or damaged.

Functions of the pipeline, the run's state and its folder: the run's record in the loop
(`RunDriver`) is never handed over.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.core import events as ev
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.state import RunState, TaskState, artifact_name
from interlock.engine import effects as fx
from interlock.engine import inputs as obs
from interlock.runtime import artifacts
from interlock.runtime.edits import keep_hand_edit, pending_edits
from interlock.runtime.faults import crash_point

if TYPE_CHECKING:
    from interlock.core.workflow import Pipeline
    from interlock.runtime.reuse import Reuser
    from interlock.storage.base import Store

FINAL_MD = "final.md"


def final_path(pipeline: Pipeline, run_dir: Path, task: TaskState) -> Path:
    """Where a task's output is committed."""
    worker = pipeline.worker(task.role)
    return run_dir / artifact_name(worker.output_name, task.visit, task.item)


def commit_output(
    pipeline: Pipeline, state: RunState, run_dir: Path, event: ev.TaskCompleted, tmp: Path
) -> tuple[ev.TaskCompleted, bytes | None]:
    """Rename the output into place; the completion to record, and the body to store
    with it (small outputs)."""
    final = final_path(pipeline, run_dir, state.tasks[event.task_id])
    crash_point("before_commit_output")
    sha, size, body = artifacts.commit(tmp, final)
    crash_point("after_commit_output")
    committed = ev.TaskCompleted(
        at=event.at,
        task_id=event.task_id,
        attempt=event.attempt,
        artifact=final.name,
        sha256=sha,
        size=size,
        values=event.values,
        usage=event.usage,
        records=event.records,
    )
    return committed, body


def adopted(
    pipeline: Pipeline, state: RunState, run_dir: Path, running: Container[str], now: float
) -> list[obs.Input]:
    """Outputs committed while no orchestrator was recording (it died in between), for the
    attempts in flight that nothing `running` here works on."""
    found: list[obs.Input] = []
    for task in state.in_flight():
        final = final_path(pipeline, run_dir, task)
        if task.task_id in running or final.is_symlink() or not final.is_file():
            continue  # a symlink was not committed by us and may point outside the run
        if final.stat().st_size == 0:
            # Not a commit of ours (those are durable before they appear): what a power
            # loss can leave of a file renamed unsynced. The task runs again.
            continue
        worker = pipeline.worker(task.role)
        try:
            values = extract_values(worker.extract, final.read_text(encoding="utf-8"))
        except (ExtractionError, UnicodeDecodeError):
            continue  # only outputs that passed extraction are ever committed
        sha, size = artifacts.digest(final)
        if sha == task.sha256:
            continue  # the output it had before an edit's re-run: not a new result
        body = None
        if size <= artifacts.INLINE_LIMIT:
            body = final.read_bytes()
        else:
            artifacts.fsync_file(final)
        event = ev.TaskCompleted(
            at=now,
            task_id=task.task_id,
            attempt=task.attempt,
            artifact=final.name,
            sha256=sha,
            size=size,
            values=values,
            adopted=True,
        )
        found.append(obs.Adopted(event=event, body=body))
    return found


def recorded_writes(state: RunState, writes: Sequence[fx.WriteOutput]) -> list[fx.WriteOutput]:
    """After a commit that may have failed: the in-memory outputs whose completions the
    ledger really holds (the state was rebuilt from it)."""
    recorded = {(t.artifact, t.sha256) for t in state.tasks.values() if t.artifact}
    return [w for w in writes if (w.artifact, w.sha256) in recorded]


def restore_outputs(store: Store, state: RunState, run_dir: Path, reuser: Reuser | None) -> bool:
    """Rewrite committed outputs that are missing or damaged (after a crash or a power
    loss) from the bodies the ledger stored with their completions. True when a final.md
    cut short by a crash was removed, to be placed again."""
    pending: set[str] | None = None  # asked for once, and only when a file differs
    for task in state.tasks.values():
        if task.artifact is None or task.sha256 is None:
            continue
        path = run_dir / task.artifact
        if _intact(path, task.size, task.sha256):
            continue
        if pending is None:
            pending = pending_edits(store, state.run_id)
        body = store.artifact(task.sha256)
        if body is None and reuser is not None:
            body = reuser.recover(task)  # carried over from a run's folder
        if body is not None:
            keep_hand_edit(state, path, task.size, task.sha256, body, pending)
            artifacts.write_atomic(path, body)
    if state.delivered is not None:
        final_md, delivered = run_dir / FINAL_MD, run_dir / state.delivered
        both = final_md.is_file() and delivered.is_file()
        if both and final_md.stat().st_size != delivered.stat().st_size:
            final_md.unlink()  # cut short by a crash: `act` writes it again
            return True
    return False


def _intact(path: Path, size: int | None, sha256: str) -> bool:
    """Whether a committed output is on disk as recorded (large ones: by size alone)."""
    if not path.is_file() or path.stat().st_size != size:
        return False
    return size > artifacts.INLINE_LIMIT or artifacts.digest(path)[0] == sha256
