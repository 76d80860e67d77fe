"""`status.json` of a run this orchestrator no longer drives.

An orchestrator that loses a run's lease (it stalled past the lease and another took the run
over, or the ledger went away) stops writing the run's `status.json`, which would then keep
saying what was true when it stopped, `running` for ever. It marks its copy superseded
instead: the status becomes `superseded`, and `superseded` says by whom, since when and why.

Several orchestrators may share one state directory; the file is marked only while it is
still this orchestrator's own (`orchestrator` names who wrote it), so the copy of the
orchestrator that took over is never touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.runtime import artifacts
from interlock.runtime.projection import iso
from interlock.storage import codec

SUPERSEDED = "superseded"  # the status of a status.json nobody keeps current any more


def mark_superseded(
    run_dir: Path, owner: str, *, by: str | None, since: float | None, why: str
) -> bool:
    """Mark `run_dir/status.json` superseded if `owner` wrote it; whether it was marked.

    Args:
        run_dir: the run's directory in this orchestrator's state directory.
        owner: this orchestrator's lease owner name.
        by: the orchestrator that drives the run now, when known.
        since: when `by` took the run (or when this orchestrator let it go).
        why: what happened, for the person reading the file.
    """
    path = run_dir / "status.json"
    try:
        view: Any = codec.loads(path.read_bytes())
    except (OSError, ValueError):
        return False  # no status here (or not a readable one): nothing claims to be current
    if not isinstance(view, dict) or view.get("status") == SUPERSEDED:
        return False
    if view.get("orchestrator", owner) != owner:
        return False  # written by whoever drives the run now: it is true
    view["superseded"] = {"by": by, "at": iso(since), "why": why, "last_status": view.get("status")}
    view["status"] = SUPERSEDED
    artifacts.write_atomic(path, codec.dumpb(view), durable=False)
    return True
