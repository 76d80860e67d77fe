"""Which files of a run the API serves, and from where.

Only what the ledger names as a worker's committed output, and `final.md` once written, is
served as a file (to the `read` scope). The rest of a run's directory (`status.json`, whose
content `GET /api/runs/{id}` already gives; `logs/` with what agents printed; `prompts/` with
the exact text sent to models) is never served as files: one attempt's prompt and logs are
shown, capped and masked, by its detail (`interlock.server.insight`).

Paths are resolved against the real state directory: a run directory (or `runs/`,
`archive/`) that is a symlink leading elsewhere is refused, and so is a file that resolves
outside the run's directory.
"""

from __future__ import annotations

from pathlib import Path

from interlock.core.state import RunState
from interlock.runtime.home import Home, check_run_id
from interlock.server.errors import ApiError

FINAL = "final.md"


def real_run_dir(home: Home, base: Path) -> Path | None:
    """`base` (a run's live or archive directory) as a real path, or None when it, or a
    folder between it and the state directory, is a symlink that leads out of place."""
    root = home.root.resolve()
    expected = root / base.parent.name / base.name
    return expected if base.resolve() == expected else None


def run_dir(home: Home, run_id: str) -> Path:
    """The real directory of run `run_id` (archived or live); refused when it is not where
    the state directory says it is."""
    base = home.run_dir(check_run_id(run_id))
    real = real_run_dir(home, base)
    if real is None:
        raise ApiError(
            403,
            "outside_home",
            f"the directory of run {run_id} leads outside the state directory (a symlink); "
            "nothing of it is served",
        )
    return real


def served(state: RunState, directory: Path) -> list[dict[str, object]]:
    """The files a reader may fetch: committed outputs, then `final.md` once it exists."""
    found: list[dict[str, object]] = []
    seen: set[str] = set()
    for task in state.tasks.values():
        if task.artifact and task.artifact not in seen:
            seen.add(task.artifact)
            found.append({"name": task.artifact, "role": task.role, "size": task.size})
    final = directory / FINAL
    if FINAL not in seen and final.is_file() and not final.is_symlink():
        found.append({"name": FINAL, "role": None, "size": final.stat().st_size})
    return found


def output_path(home: Home, state: RunState, run_id: str, name: str) -> Path:
    """The file behind output `name` of a run: one that `served` lists, inside the run's
    real directory."""
    directory = run_dir(home, run_id)
    names = {str(item["name"]) for item in served(state, directory)}
    if name not in names:
        raise ApiError(
            404,
            "not_found",
            f"run {run_id} has no output {name!r}: only the files GET "
            f"/api/runs/{run_id}/outputs lists are served",
        )
    path = home.inside(directory, name)
    if not path.is_file():
        raise ApiError(404, "not_found", f"run {run_id} has no output {name!r}")
    return path
