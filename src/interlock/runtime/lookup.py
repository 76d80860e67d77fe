"""Finding a run by an unambiguous prefix of its id, with the ledger alone: commands that
only read a run use it without loading the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock.errors import RunNotFound, UsageError

if TYPE_CHECKING:
    from interlock.storage.base import Store


def resolve(store: Store, prefix: str) -> str:
    """The run id `prefix` names.

    Raises:
        UsageError: no prefix, or one that matches several runs.
        RunNotFound: no run matches it.
    """
    if not prefix:
        raise UsageError("give a run id (see 'interlock runs')")
    matches = store.find_runs(prefix)
    if prefix in matches:
        return prefix
    if not matches:
        raise RunNotFound(f"no run matches {prefix!r} (see 'interlock runs')")
    if len(matches) > 1:
        shown = ", ".join(matches[:5])
        if len(matches) > 5:
            shown += f" and {len(matches) - 5} more"
        raise UsageError(f"{prefix!r} matches {len(matches)} runs ({shown}); give more of the id")
    return matches[0]
