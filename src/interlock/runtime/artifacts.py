"""Committing outputs: a file appears at its final path only complete, by an atomic rename."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a rename or creation in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        handle = open(tmp, "wb")  # noqa: SIM115 - closed by the with block below
    except FileNotFoundError:  # the folder is usually there: only then pay for a mkdir
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(tmp, "wb")  # noqa: SIM115
    with handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_plain(path: Path, data: bytes) -> None:
    """Write `data` to `path` in place (no temporary file, no fsync), for files whose
    content the ledger holds and which are checked and rewritten after a crash."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def digest(path: Path) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a file."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
            size += len(block)
    return sha.hexdigest(), size


def fsync_file(path: Path) -> None:
    """Make a file's content durable (done by the worker side, before it reports)."""
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


INLINE_LIMIT = 1 << 20
"""Outputs up to this size are stored in the ledger with their completion, so the file needs
no fsync of its own; larger ones are fsynced by the worker side and their rename by a
directory fsync before they are recorded."""


def commit(tmp: Path, final: Path) -> tuple[str, int, bytes | None]:
    """Move a finished output into place: (sha256, size, body if it is small enough to be
    stored in the ledger, else None)."""
    if tmp.stat().st_size <= INLINE_LIMIT:
        body = tmp.read_bytes()
        os.replace(tmp, final)
        return hashlib.sha256(body).hexdigest(), len(body), body
    sha, size = digest(tmp)
    os.replace(tmp, final)
    return sha, size, None


def discard(path: Path) -> None:
    """Remove a temporary output if it exists."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
