"""The file format of a task's journals (`call_journal`, `tool_journal`): JSON lines, each
``{"body": ..., "sha": ...}`` with the SHA-256 of its body, appended and fsynced one by one.

Reading trusts the file up to its first line that does not match its hash (changed, or cut
short by a crash while it was written) and, for a chained journal, whose ``prev`` is not the
hash of the line before it. A last line with no newline after it is a write cut short, and
is not read either. What follows the good prefix is dropped from the file (`keep_good`), so
that what is appended next follows it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.runtime.artifacts import fsync_dir, write_atomic

journal_appends: ContextVar[Callable[[Path], None] | None] = ContextVar(
    "interlock_journal_appends", default=None
)
"""Told the path of each line appended in this context, once it is fsynced: a fleet worker
keeps a copy of the task's journals where the next hand-out of the attempt reads them
(`interlock.distributed.worker`). Unset: nobody is told."""


def seal(body: dict[str, Any]) -> str:
    """The SHA-256 of `body`, as its line carries it."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass
class Sealed:
    """What `read_sealed` found in a journal file.

    Attributes:
        bodies: The bodies of the good lines, in order.
        last: The hash of the last good line ("" when there is none): the next line's
            ``prev`` in a chained journal.
        broken: The number (from 1) of the first line that failed its hash or its chain,
            or None.
    """

    bodies: list[dict[str, Any]] = field(default_factory=list)
    last: str = ""
    broken: int | None = None
    _good: list[bytes] = field(default_factory=list)
    _lines: int = 0  # the lines in the file, good or not


def read_sealed(
    path: Path, *, chained: bool = False, until: Callable[[dict[str, Any]], bool] | None = None
) -> Sealed:
    """The good prefix of the journal at `path` (empty when there is no file). `chained`:
    each body's ``prev`` must be the hash of the line before. `until`: a body for which it
    is true ends the prefix, as a broken line does, but is not `broken`."""
    found = Sealed()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return found
    chunks = raw.split(b"\n")
    found._lines = sum(1 for chunk in chunks if chunk)
    for number, chunk in enumerate(chunks, start=1):
        if not chunk:
            continue
        if number == len(chunks):  # no newline after it: a write cut short by a crash
            break
        try:
            line = json.loads(chunk)
            body = line["body"]
            good = line["sha"] == seal(body) and (not chained or body["prev"] == found.last)
        except (ValueError, KeyError, TypeError):
            good = False
        if not good:
            found.broken = number
            break
        if until is not None and until(body):
            break
        found.bodies.append(body)
        found._good.append(chunk)
        found.last = line["sha"]
    return found


def keep_good(path: Path, found: Sealed) -> None:
    """Cut the file at `path` to the good prefix `found` was read as, when anything
    follows it."""
    if len(found._good) != found._lines:
        write_atomic(path, b"".join(chunk + b"\n" for chunk in found._good))


def append_sealed(path: Path, body: dict[str, Any]) -> str:
    """Append `body` as a sealed line, fsynced (and its folder, when the file is new);
    return its hash."""
    sha = seal(body)
    line = json.dumps({"body": body, "sha": sha}, ensure_ascii=False)
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    if new:
        fsync_dir(path.parent)
    told = journal_appends.get()
    if told is not None:
        told(path)
    return sha
