"""A run's status.json: what it shows (a projection of the run's state), and when a running
run's copy is rewritten (coalesced, so that changes in between cost one write)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.state import RunState, RunStatus
from interlock.runtime.projection import status_view
from interlock.runtime.runfiles import status_writer
from interlock.storage import codec

if TYPE_CHECKING:
    from interlock.core.workflow import Pipeline

STATUS_COST_FACTOR = 20  # status.json rewrites take at most about 1/20 of a running run's time


@dataclass(kw_only=True, slots=True)
class StatusMarks:
    """What the loop remembers of a run's status.json between its steps."""

    written: float = 0.0  # when status.json was last written
    shows: int = -1  # the number of events the written status.json reflects
    due: float | None = None  # when a coalesced rewrite is scheduled
    cost: float = 0.0  # seconds the last status.json write took


def write_status(
    pipeline: Pipeline,
    state: RunState,
    run_dir: Path,
    owner: str,
    *,
    spend_waits: dict[str, dict[str, Any]],
    batch_waits: dict[str, dict[str, Any]],
) -> None:
    """Hand `status.json` to the process's status writer (a projection, written
    atomically by a thread of its own, no fsync: see `runtime/runfiles.py`).

    One line of compact JSON: the C encoder writes it several times faster than an
    indented one; `interlock status RUN --json` shows it indented.
    """
    view = status_view(
        pipeline, state, run_dir.name, spend_waits=spend_waits, batch_waits=batch_waits
    )
    view["orchestrator"] = owner  # who keeps this copy current
    status_writer().put(run_dir / "status.json", codec.dumpb(view))


def refresh_status(
    marks: StatusMarks,
    state: RunState,
    run_dir: Path,
    *,
    now: float,
    interval: float,
    cost_timer: Callable[[], float],
    wake_at: Callable[[float], None],
    write: Callable[[Path], None],
) -> None:
    """Rewrite status.json for a changed state: at once at a pause or an end, or when
    `interval` has passed since the last write; otherwise at that time (the loop wakes the
    run then: `wake_at`), so that changes in between cost one write; `write` writes it into
    a folder."""
    # A wide run's status.json costs time to build: it is then rewritten less often, so
    # that the rewrites never take more than a small share of the loop.
    spacing = max(interval, marks.cost * STATUS_COST_FACTOR)
    due = marks.written + spacing
    awaiting_archive = state.status is RunStatus.DELIVERED and not state.archived
    if awaiting_archive and marks.due is None:
        # Archived once its files are durable, a fraction of a second from now, and the
        # status.json then written into the archive shows it delivered: this one is
        # written only if the archive is late (a sync that fails, say).
        due = max(due, now + spacing)
    if (state.status is RunStatus.RUNNING or awaiting_archive) and now < due:
        if marks.due is None:
            marks.due = due
            wake_at(due)
        return
    marks.due = None
    if run_dir.is_dir():
        began = cost_timer()
        write(run_dir)
        marks.written = now
        marks.shows = state.events
        marks.cost = cost_timer() - began
