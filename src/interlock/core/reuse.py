"""Whether a task may carry over an earlier output instead of running: a decision as data.

A rerun matches each task of the new run against the task with the same id in its source run
(loops match visit by visit, fan-outs item by item): the task is reused when both have the
same fingerprint and the new run has not yet reached the phase given with `--from`. The
runtime looks the candidate up and applies the verdict; this module only judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from interlock.core.fingerprint import FILE_PART, PART_WORDS, Fingerprint, changed_files
from interlock.core.state import TASK_COMPLETED, RunState, TaskState


class ReuseReason(StrEnum):
    """Why a task is reused or runs; persisted in explanations as text."""

    MATCH = "match"  # same fingerprint as the source's completed task: reused
    FORCED = "forced"  # the run reached the phase named by --from: everything runs
    RETRY = "retry"  # a later attempt of a task that already ran in this run
    NOT_IN_SOURCE = "not_in_source"  # the source run has no task with this id
    NOT_COMPLETED = "not_completed"  # the source's task failed or never finished
    NO_FINGERPRINT = "no_fingerprint"  # recorded before fingerprints existed
    CHANGED = "changed"  # a part of the fingerprint differs


@dataclass(frozen=True, kw_only=True, slots=True)
class ReuseVerdict:
    """Reuse or run, the rule that chose it, and (when it runs) what changed."""

    reuse: bool
    reason: ReuseReason
    why: str
    changed: list[str] = field(default_factory=list)


def judge(
    state: RunState,
    task: TaskState,
    current: Fingerprint,
    candidate: TaskState | None,
    *,
    source_run: str,
    candidate_parts: dict[str, str] | None = None,
    missing: frozenset[str] = frozenset(),
) -> ReuseVerdict:
    """Judge one task of a rerun against `candidate`, the source run's task with its id
    (`candidate_parts`: the per-part hashes recorded with it, to say what changed;
    `missing`: the files the worker would run that are not there now)."""
    if task.attempt > 1:
        return ReuseVerdict(
            reuse=False, reason=ReuseReason.RETRY, why="a retry runs: it was not reused before"
        )
    forced_from = state.rerun_from
    if forced_from is not None and state.visits.get(forced_from, 0) > 0:
        return ReuseVerdict(
            reuse=False,
            reason=ReuseReason.FORCED,
            why=f"runs: at or after phase {forced_from!r} (--from)",
        )
    if candidate is None:
        return ReuseVerdict(
            reuse=False,
            reason=ReuseReason.NOT_IN_SOURCE,
            why=f"runs: run {source_run} has no task {task.task_id}",
        )
    if candidate.status is not TASK_COMPLETED or candidate.sha256 is None:
        return ReuseVerdict(
            reuse=False,
            reason=ReuseReason.NOT_COMPLETED,
            why=f"runs: it did not complete in run {source_run} ({candidate.status.value})",
        )
    if candidate.fingerprint is None:
        return ReuseVerdict(
            reuse=False,
            reason=ReuseReason.NO_FINGERPRINT,
            why=(
                f"runs: run {source_run} was recorded without fingerprints (an older "
                "interlock), so its outputs cannot be matched"
            ),
        )
    if candidate.fingerprint != current.digest:
        return changed_verdict(current, candidate_parts, missing)
    return ReuseVerdict(
        reuse=True,
        reason=ReuseReason.MATCH,
        why=f"reused from {source_run}: same fingerprint {current.digest[:12]}",
    )


def changed_verdict(
    current: Fingerprint, parts: dict[str, str] | None, missing: frozenset[str] = frozenset()
) -> ReuseVerdict:
    """A verdict to run, naming the parts of the fingerprint that changed (and, for the
    worker, which file it runs changed, when that is known; `missing`: the files it would
    run that are not there now, named as such)."""
    changed = current.changed(parts)
    files = changed_files(current.parts, parts) if "worker" in changed else []
    # A file of the source's that the worker no longer reads: not there now, or no longer
    # named (the command names another path, as a workflow copied to another folder does).
    dropped = [f for f in files if FILE_PART + f not in current.parts]
    gone = sorted(missing) if "worker" in changed else []
    left = [f for f in dropped if f not in missing]
    edited = [f for f in files if f not in dropped]
    said = []
    if edited:
        said.append(
            f"{'a file it runs' if len(edited) == 1 else 'files it runs'}: {', '.join(edited)}"
        )
    before = f"it ran {', '.join(left)} before"
    if gone:
        after = f" ({before})" if left else ""
        said.append(
            f"{'a file it runs' if len(gone) == 1 else 'files it runs'}: {', '.join(gone)}, "
            f"which {'is' if len(gone) == 1 else 'are'} not there now: the task would fail{after}"
        )
    elif left:
        said.append(f"the files it runs: {before}, which it no longer names")
    named = ["; ".join(said) if p == "worker" and said else PART_WORDS[p] for p in changed]
    words = "; ".join(named) or "the fingerprint recipe"
    return ReuseVerdict(
        reuse=False, reason=ReuseReason.CHANGED, why=f"runs: changed {words}", changed=changed
    )
