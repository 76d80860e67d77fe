"""Pruning: removing old ended runs whole, with their files, and a receipt for each.

How it keeps the ledger consistent:
- Only whole runs go, and only ended ones (delivered, failed, cancelled) whose lease nobody
  holds: an orchestrator acting on a run still holds its lease, so nothing in use is removed.
- The hash chain is per run (see `interlock.storage.chain`): removing a run whole leaves every
  other run's chain complete from its first event, so `interlock verify` of every remaining
  run passes as before. Each pruned run leaves a receipt (its last seq and the hash of its last
  event), so a copy of its history exported before the prune can still be checked against it.
- A batch of runs goes in one transaction (their events, commands, notifications, cache
  entries and queued tasks, the receipt written in the same transaction); their directories
  are removed after it commits. A crash in between leaves directories the ledger no longer
  knows: harmless, `doctor` lists them as notes and the next prune removes them. The other
  order could leave runs in the ledger with their outputs gone, which `doctor` reports broken.
- Stored outputs are content-addressed and may be shared: those the pruned runs named are
  deleted only when no remaining event names them, after the runs are gone. A crash before
  that leaves them stored: space, never a dangling reference.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from interlock.errors import UsageError
from interlock.runtime.home import Home
from interlock.storage.base import ENDED_STATUSES, PrunedRun, Store

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
BATCH = 500  # runs per transaction: short enough that running orchestrators never wait long


def parse_duration(text: str, where: str) -> float:
    """Seconds in `90d`, `12h`, `30m`, `2w`, `45s` (a number and a unit)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if match is None:
        raise UsageError(
            f"{where}: {text!r} is not a duration; write a number and a unit, like 90d, 12h, "
            "30m, 2w or 45s"
        )
    return float(match.group(1)) * UNITS[match.group(2)]


@dataclass(frozen=True, kw_only=True)
class Retention:
    """How long ended runs are kept, by status (`[retention]` in interlock.toml)."""

    older_than: float  # seconds since the run ended
    statuses: tuple[str, ...] = ENDED_STATUSES


def load_retention(paths: list[Path]) -> Retention | None:
    """The `[retention]` table of the first interlock.toml among `paths` that has one.

    [retention]
    older_than = "90d"                      # runs that ended longer ago are pruned
    status = ["delivered", "cancelled"]     # optional: only these (default: all ended)
    """
    for path in paths:
        if not path.is_file():
            continue
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("retention")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{path}: cannot read [retention]: {exc}") from None
        if table is None:
            continue
        where = f"{path}: [retention]"
        if isinstance(table, dict):
            _known_keys(table, where)
        if not isinstance(table, dict) or not isinstance(table.get("older_than"), str):
            raise UsageError(f'{where} needs older_than = "<duration>", like "90d"')
        statuses = table.get("status", list(ENDED_STATUSES))
        return Retention(
            older_than=parse_duration(table["older_than"], f"{where} older_than"),
            statuses=check_statuses(statuses, f"{where} status"),
        )
    return None


RETENTION_KEYS = ("older_than", "status")
# Names other tools give these settings: each points to ours.
_LIKELY = {"max_age": "older_than", "age": "older_than", "keep": "older_than",
           "ttl": "older_than", "statuses": "status"}  # fmt: skip


def _known_keys(table: dict[str, object], where: str) -> None:
    """Refuse a key `[retention]` does not have (it would be ignored), naming the right one."""
    for key in table:
        if key in RETENTION_KEYS:
            continue
        close = _LIKELY.get(key) or next(iter(difflib.get_close_matches(key, RETENTION_KEYS)), "")
        hint = f"did you mean {close!r}? " if close else ""
        raise UsageError(
            f'{where} has no key {key!r}: {hint}its keys are older_than = "<duration>" '
            '(like "90d") and, optionally, status = ["delivered", ...]'
        )


def check_statuses(statuses: object, where: str) -> tuple[str, ...]:
    """The statuses to prune, each an ended one."""
    if not isinstance(statuses, list | tuple) or not all(isinstance(s, str) for s in statuses):
        raise UsageError(f'{where} must be a list of statuses, like ["delivered"]')
    wrong = [s for s in statuses if s not in ENDED_STATUSES]
    if wrong or not statuses:
        raise UsageError(
            f"{where}: {wrong[0] if wrong else 'nothing'!r} cannot be pruned; only ended runs "
            f"can: {', '.join(ENDED_STATUSES)}"
        )
    return tuple(statuses)


@dataclass
class PruneReport:
    """What a prune removed (or, dry, would remove)."""

    runs: list[PrunedRun] = field(default_factory=list)
    would: list[str] = field(default_factory=list)  # a dry run's candidates
    directories: int = 0
    artifacts: int = 0


def prune(
    store: Store,
    home: Home,
    retention: Retention,
    now: float,
    *,
    dry_run: bool = False,
    batch: int = BATCH,
) -> PruneReport:
    """Remove the runs `retention` lets go (see the module docstring for the guarantees)."""
    before = now - retention.older_than
    report = PruneReport()
    if dry_run:
        report.would = store.prunable_runs(before, retention.statuses, now, 10**12)
        return report
    shared: set[str] = set()
    tried: set[str] = set()
    while True:
        ids = [r for r in store.prunable_runs(before, retention.statuses, now, batch)]
        ids = [r for r in ids if r not in tried]
        if not ids:
            break
        tried.update(ids)  # one taken up again meanwhile is kept, and not asked for again
        receipts, shas = store.prune_runs(ids, now)
        shared |= shas
        report.runs += receipts
        for receipt in receipts:
            report.directories += remove_directories(home, receipt.run_id)
    report.artifacts = store.drop_artifacts(shared)
    return report


def remove_directories(home: Home, run_id: str) -> int:
    """Remove a pruned run's directory (live or archived); how many there were."""
    removed = 0
    for folder in (home.live_dir(run_id), home.archive_dir(run_id)):
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
