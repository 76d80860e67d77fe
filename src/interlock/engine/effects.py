"""What a run step asks the runtime to do: frozen values, carried out by one applier.

The machine decides; the runtime's applier performs the file, worker, child and status I/O,
with a crash point named after each effect's kind before and after it
(`before_<kind>`, `after_<kind>`). Every effect is safe to carry out twice: a crash between
"recorded" and "done" is repaired by the next step, which asks again from the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EffectKind(StrEnum):
    """The kinds of effect; the names of their crash points."""

    WRITE_OUTPUT = "write_output"  # an output held in memory is written to its final path
    PLACE_FINAL = "place_final"  # final.md, a copy of the delivered output, is placed
    START_ATTEMPT = "start_attempt"  # a worker (or a child run) starts a recorded attempt
    CANCEL_ATTEMPT = "cancel_attempt"  # a worker of an attempt that is no longer current stops
    STOP_WORKERS = "stop_workers"  # the run ended: every worker still running stops
    STOP_CHILDREN = "stop_children"  # the run ended: its child runs are asked to stop
    WITHDRAW = "withdraw"  # the run is failing: attempts queued but not started are withdrawn
    ARCHIVE = "archive"  # the delivered run's folder moves to the archive
    REFRESH_STATUS = "refresh_status"  # status.json shows the new state


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteOutput:
    """Write `body` to the run folder's `artifact` (recorded already: written after the
    commit, never before). `reused`: the output was carried over from another run."""

    kind = EffectKind.WRITE_OUTPUT
    artifact: str
    body: bytes
    sha256: str
    reused: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class PlaceFinal:
    """Place final.md, a copy of the delivered output `artifact` whose recorded hash is
    `sha256` (None: none recorded). `body` is that output when this step holds it."""

    kind = EffectKind.PLACE_FINAL
    artifact: str
    sha256: str | None
    body: bytes | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StartAttempt:
    """Start the recorded attempt `attempt` of `task_id`: a child run when `child`, else a
    worker, unless an earlier output can be carried over (`may_reuse`)."""

    kind = EffectKind.START_ATTEMPT
    task_id: str
    attempt: int
    child: bool = False
    may_reuse: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelAttempt:
    """Stop the worker running attempt `attempt` of `task_id`: the engine timed it out and
    recorded the next one, which the old worker must not stand in for."""

    kind = EffectKind.CANCEL_ATTEMPT
    task_id: str
    attempt: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StopWorkers:
    """The run ended: stop the workers of `task_ids` (a model call stopped reports its cost,
    so the run is looked at again when each has ended)."""

    kind = EffectKind.STOP_WORKERS
    task_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class StopChildren:
    """The run ended: ask each child run that has not ended to stop (a child never outlives
    its parent's end)."""

    kind = EffectKind.STOP_CHILDREN


@dataclass(frozen=True, kw_only=True, slots=True)
class Withdraw:
    """The run fails once its running attempts end: withdraw those queued, not started."""

    kind = EffectKind.WITHDRAW


@dataclass(frozen=True, kw_only=True, slots=True)
class Archive:
    """Move the delivered (and durable) run's folder to the archive."""

    kind = EffectKind.ARCHIVE


@dataclass(frozen=True, kw_only=True, slots=True)
class RefreshStatus:
    """Show the run's state in status.json (the applier coalesces rewrites)."""

    kind = EffectKind.REFRESH_STATUS


Effect = (
    WriteOutput
    | PlaceFinal
    | StartAttempt
    | CancelAttempt
    | StopWorkers
    | StopChildren
    | Withdraw
    | Archive
    | RefreshStatus
)
