"""Applying a review's commands to a run, and keeping outputs people changed by hand.

`interlock edit` and `interlock reject` reach the run's driver as commands, like an approval,
so the orchestrator that holds the run records them (exactly once, in the transaction that
consumes the command): the run's step turns them into events (`interlock.engine`). An edit's
new body is stored in the ledger with its event and written into the run directory right
after, like a small output: a crash in between is repaired on resume from the ledger.

A person who edits an output file in the run directory instead gets their change kept, never
overwritten: approving refuses while such a file waits (`unrecorded_changes`), and a driver
that finds one on resume moves it aside to `NAME.unrecorded` before restoring the recorded
version (`keep_hand_edit`), saying how to record it as an edit.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Set
from dataclasses import dataclass
from pathlib import Path

from interlock.core.observe import CommandKind
from interlock.core.review import latest_outputs
from interlock.core.state import RunState
from interlock.errors import StorageError
from interlock.runtime import artifacts
from interlock.storage.base import Store

log = logging.getLogger("interlock.runtime")

REVIEW_KINDS = frozenset({CommandKind.EDIT.value, CommandKind.REJECT.value})


@dataclass(frozen=True, kw_only=True)
class HandEdit:
    """An output file whose content is not what the ledger recorded for it."""

    artifact: str
    path: Path
    recorded_sha256: str


def _known(state: RunState) -> set[str]:
    """Every body the ledger recorded for an output at some point (edits replace some)."""
    return {old for _, old, _ in state.edits} | {new for _, _, new in state.edits}


def _hand_edited(
    path: Path, size: int | None, sha256: str, known: set[str], body: bytes | None = None
) -> bool:
    """Whether `path` holds something a person wrote: not the recorded body, not an earlier
    recorded version, and not a copy of `body` (the recorded one) that a crash cut short."""
    if path.is_symlink() or not path.is_file():
        return False
    if size is not None and size > artifacts.INLINE_LIMIT:
        return False  # large outputs are checked by size alone; a crash may have cut them
    data = path.read_bytes()
    if body is not None and len(data) < len(body) and body.startswith(data):
        return False
    found = hashlib.sha256(data).hexdigest()
    return found != sha256 and found not in known


def unrecorded_changes(state: RunState, run_dir: Path) -> list[HandEdit]:
    """Current outputs in `run_dir` that differ from the ledger (changed by hand)."""
    known = _known(state)
    found = []
    for task in latest_outputs(state):
        if task.artifact is None or task.sha256 is None:
            continue
        path = run_dir / task.artifact
        if _hand_edited(path, task.size, task.sha256, known):
            found.append(HandEdit(artifact=task.artifact, path=path, recorded_sha256=task.sha256))
    return found


def hand_edit_message(run_id: str, changes: list[HandEdit]) -> str:
    """What a person is told when outputs were changed by hand during a pause."""
    lines = [
        f"run {run_id}: {len(changes)} output file(s) differ from what the ledger recorded "
        "(changed by hand?); the run would not read your change. Record each as an edit:"
    ]
    lines += [f"  interlock edit {run_id} {c.artifact} --file {c.path}" for c in changes]
    lines.append(
        "or, to go on with the recorded version, move the file away (it is restored from the "
        "ledger on resume)"
    )
    return "\n".join(lines)


def pending_edits(store: Store, run_id: str) -> set[str]:
    """The SHA-256 of each body that an edit command waiting for the run brings: a file that
    holds one is that edit on its way to the ledger (`interlock edit RUN NAME --file` of the
    run's own file), not a change to keep aside."""
    found: set[str] = set()
    try:
        pending = store.pending_commands(run_id)
    except StorageError:  # a busy ledger: at worst the change is kept aside, never lost
        return found
    for record in pending:
        if record.kind != CommandKind.EDIT.value:
            continue
        try:
            body = json.loads(record.message).get("body")
        except (ValueError, AttributeError):
            continue  # refused with a reason when the driver reads it
        if isinstance(body, str):
            found.add(hashlib.sha256(body.encode()).hexdigest())
    return found


def keep_hand_edit(
    state: RunState,
    path: Path,
    size: int | None,
    sha256: str,
    body: bytes,
    pending: Set[str] = frozenset(),
) -> Path | None:
    """Before the recorded version `body` of `path` is restored: move a hand-made change
    aside to `NAME.unrecorded` (numbered if that exists) and return where it went (None:
    nothing to keep). A change that a `pending` edit brings is not kept aside: the edit
    writes it again once recorded."""
    if not _hand_edited(path, size, sha256, _known(state) | pending, body):
        return None
    target = path.with_name(path.name + ".unrecorded")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.unrecorded{number}")
    path.rename(target)
    log.warning(
        "%s differs from the ledger; kept as %s. To record it: interlock edit %s %s --file %s",
        path.name,
        target.name,
        state.run_id,
        path.name,
        target,
        extra={"run_id": state.run_id, "action": "hand_edit_kept"},
    )
    return target
