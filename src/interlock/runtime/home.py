"""The state directory: where the ledger, run directories and the archive live.

    <home>/ledger.db            the embedded ledger (SQLite)
    <home>/runs/<run-id>/       outputs, final.md, status.json, logs/ of a live run
    <home>/archive/<run-id>/    the same, once delivered and archived

Every path handed out is checked to stay inside the state directory.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from interlock.errors import RunFolderTaken, UsageError

RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,80}$")
RUN_ID_LIMIT = 81  # characters: the pattern above
_SHAPE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_SHOWN = 40  # characters of a refused id echoed back: enough to know it, never a screenful


def default_home() -> Path:
    """`$INTERLOCK_HOME`, else `./.interlock`."""
    return Path(os.environ.get("INTERLOCK_HOME") or ".interlock")


def check_run_id(run_id: str) -> str:
    """Reject run ids that could name a path outside the state directory."""
    if RUN_ID.match(run_id):
        return run_id
    shown = repr(run_id) if len(run_id) <= _SHOWN else f"{run_id[:_SHOWN]!r}... (cut)"
    if _SHAPE.match(run_id):  # well formed, only too long
        raise UsageError(
            f"run id {shown} is too long ({len(run_id):,} characters; at most {RUN_ID_LIMIT})"
        )
    raise UsageError(f"run id {shown} is not valid: lowercase letters, digits and '-' only")


@dataclass(frozen=True)
class Home:
    """Paths inside one state directory."""

    root: Path

    @classmethod
    def at(cls, root: str | Path | None = None) -> Home:
        """The state directory at `root` (default: `default_home()`), made absolute."""
        return cls(Path(root or default_home()).absolute())

    def live_dir(self, run_id: str) -> Path:
        """`runs/<id>` (the directory of a run that is not archived)."""
        return self._runs / check_run_id(run_id)

    def archive_dir(self, run_id: str) -> Path:
        """`archive/<id>`."""
        return self._archive / check_run_id(run_id)

    @functools.cached_property
    def _runs(self) -> Path:
        return self.root / "runs"

    @functools.cached_property
    def _archive(self) -> Path:
        return self.root / "archive"

    def run_dir(self, run_id: str) -> Path:
        """Wherever the run's directory is now (archive once moved there)."""
        archived = self.archive_dir(run_id)
        return archived if archived.is_dir() else self.live_dir(run_id)

    def refuse_taken(self, run_id: str) -> None:
        """Raise RunFolderTaken when a run the ledger does not know yet would be given a
        folder that already holds files (`runs/ID` with anything in it, or `archive/ID`):
        those are another run's, of another store (a SQLite ledger and a PostgreSQL one
        given the same --home) or of a ledger that was replaced, and are never written over.
        An empty `runs/ID` is what a process killed before recording its run left: taken."""
        for folder in (self.live_dir(run_id), self.archive_dir(run_id)):
            try:
                with os.scandir(folder) as entries:
                    held = next(entries, None) is not None
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                held = True
            if held or folder == self.archive_dir(run_id):
                raise RunFolderTaken(
                    f"run id {run_id!r} is taken in {self.root}: {folder} holds the files of "
                    "a run this ledger does not know (a run of another store given the same "
                    "state directory, such as a SQLite ledger and a PostgreSQL --store, or of "
                    "a ledger that was replaced); nothing was recorded and those files were "
                    "left as they are. Give another --run-id, or give each store a --home of "
                    "its own"
                )

    def inside(self, base: Path, name: str) -> Path:
        """`base/name`, refusing names that escape `base` (.., absolute, symlinks out)."""
        if not name or "\x00" in name or name.startswith(("/", "\\")):
            raise UsageError(f"file name {name!r} is not allowed")
        target = (base / name).resolve()
        if not target.is_relative_to(base.resolve()):
            raise UsageError(f"file name {name!r} points outside the run directory")
        return target
