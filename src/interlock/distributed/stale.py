"""Status files left `running` in this state directory by an orchestrator that is gone.

An orchestrator killed outright (SIGKILL, a power cut) cannot mark the `status.json` files
of the runs it drove; another orchestrator took those runs over, maybe on another machine.
A fleet orchestrator starting in the same state directory looks once at every live run
directory and marks superseded each `status.json` that says `running` while someone other
than its writer holds the run, or the run has ended (see `runtime.superseded`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from interlock.errors import InterlockError
from interlock.runtime.superseded import SUPERSEDED, mark_superseded
from interlock.storage import codec
from interlock.storage.base import Store

log = logging.getLogger("interlock.distributed")


def supersede_stale(store: Store, runs: Path, owner: str) -> int:
    """Mark the stale status files under `runs` (a `runs/` folder); returns how many."""
    marked = 0
    try:
        folders = sorted(p for p in runs.iterdir() if p.is_dir())
    except OSError:
        return 0  # no runs/ yet
    for folder in folders:
        view = _status(folder)
        if view is None or view.get("status") not in ("running", "waiting"):
            continue
        writer = view.get("orchestrator")
        if not isinstance(writer, str) or writer == owner:
            continue
        try:
            record = store.get_run(folder.name)
        except InterlockError:
            continue  # not a run of this ledger
        if record.lease_owner == writer and record.summary.status in ("running", "waiting"):
            continue  # its writer still drives it
        why = (
            f"the orchestrator that wrote this ({writer}) no longer drives the run; "
            f"the ledger says it is {record.summary.status}"
        )
        since = record.lease_acquired_at if record.lease_owner else None
        try:
            if mark_superseded(folder, writer, by=record.lease_owner, since=since, why=why):
                marked += 1
        except OSError as exc:
            log.warning("cannot mark %s superseded: %s", folder / "status.json", exc)
    if marked:
        log.info("marked %d stale status.json file(s) %s", marked, SUPERSEDED)
    return marked


def _status(folder: Path) -> dict[str, Any] | None:
    try:
        view = codec.loads((folder / "status.json").read_bytes())
    except (OSError, ValueError):
        return None
    return view if isinstance(view, dict) else None
