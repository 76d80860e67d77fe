"""Committing outputs: a file appears at its final path only complete, by an atomic rename."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeAlias, TypeVar

StrPath: TypeAlias = "str | os.PathLike[str]"


def fsync_dir(path: Path) -> None:
    """Make a rename or creation in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes, *, durable: bool = True, make_folder: bool = True
) -> None:
    """Write `data` to `path` through a temporary file and a rename; with `durable`, the
    file is fsynced before the rename and its folder after it. Without `make_folder`, a
    missing folder raises FileNotFoundError instead of being made."""
    tmp, _ = _stage(path, data, durable=durable, make_folder=make_folder)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_record(path: Path, data: bytes) -> None:
    """Write a record that nothing decides on (a prompt as it was sent) in place: no
    temporary file, no rename, no fsync.

    A crash while it is written can leave it short; it belongs to an attempt that had not
    reached the model yet, which the run's resume starts again, writing it anew.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:  # the run's first record: its folder is made once
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write_files(files: Sequence[tuple[StrPath, bytes]], *, durable: bool = True) -> None:
    """Write several files atomically: every body is written to a temporary file, then
    renamed into place, so that a file never appears at its path short or empty after a
    crash of the process. A path given twice (an output written, then edited, within one
    tick) gets its last body: the two would otherwise share one temporary file.

    With `durable`, the same holds after a power loss: every temporary file is fsynced
    before its rename and each folder once after. The fsyncs of several files run at once:
    the file system commits them together, so a batch costs little more than one file. The
    batch is cut into one slice per thread of the pool, each slice written in order by its
    thread: a job per file would cost the calling loop a future, a lock and a thread switch
    per file, more CPU than the writes.

    Without it, nothing waits for the disk: for files whose bodies are durable elsewhere
    (the ledger), made durable later with `sync_files`.
    """
    files = list(dict(files).items())
    if not durable:
        for path, data in files:
            tmp, _ = _stage(path, data, durable=False)
            os.replace(tmp, path)
        return
    if len(files) == 1:
        staged = [_stage(*files[0])]
    else:
        staged = [pair for part in _spread(_stage_all, _slices(files)) for pair in part]
    for tmp, path in staged:
        os.replace(tmp, path)
    _spread(_fsync_present, _slices(_folders(path for _, path in staged)))


def sync_files(paths: Sequence[StrPath]) -> None:
    """Make files written without `durable` (and their renames) durable: each file is
    fsynced, then each folder, the fsyncs of a batch at once. A file no longer there (moved
    aside since) is passed over."""
    _spread(_fsync_present, _slices(list(dict.fromkeys(paths))))
    _spread(_fsync_present, _slices(_folders(paths)))


def _folders(paths: Iterable[StrPath]) -> list[str]:
    """The folders holding `paths`, each once, in the order first met. As strings: a `Path`'s
    `parent` and its hash each parse the path again, several times a file's own write."""
    return list(dict.fromkeys(os.path.dirname(os.fspath(path)) or "." for path in paths))


# Threads that fsync at once. A journaling file system commits the fsyncs that wait together
# in one journal commit, so more at once means fewer commits: 760 files and 190 folders took
# 0.29 s from one thread, 0.06-0.11 s from 8, 0.05 from 32, 0.06 from 64 (a journaled ext4,
# `benchmarks/README.md`). Idle threads cost nothing: the pool makes them as batches need them.
WRITERS = 32

_T = TypeVar("_T")
_R = TypeVar("_R")


def _slices(items: list[_T]) -> list[list[_T]]:
    """`items` dealt into at most WRITERS slices of nearly equal length."""
    count = min(WRITERS, len(items))
    return [items[start::count] for start in range(count)]


def _spread(job: Callable[[list[_T]], _R], parts: list[list[_T]]) -> list[_R]:
    """`job` of every part, the first in this thread and the others in the pool at once."""
    if not parts:
        return []
    if len(parts) == 1:
        return [job(parts[0])]
    futures = [_pool().submit(job, part) for part in parts[1:]]
    first = job(parts[0])
    return [first, *(future.result() for future in futures)]


def _stage_all(part: list[tuple[StrPath, bytes]]) -> list[tuple[str, StrPath]]:
    return [_stage(path, data) for path, data in part]


def _fsync_present(part: Sequence[StrPath]) -> None:
    """fsync each file or folder of `part` that exists."""
    for path in part:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _stage(
    path: StrPath, data: bytes, *, durable: bool = True, make_folder: bool = True
) -> tuple[str, StrPath]:
    """Write `data` beside `path`, fsynced when `durable`: (temporary path, final path)."""
    # `.NAME.PID.tmp` in the same folder, built from the text (`with_name` parses it again).
    folder, sep, name = os.fspath(path).rpartition("/")
    tmp = f"{folder}{sep}.{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:  # the folder is usually there: only then pay for a mkdir
        if not make_folder:
            raise
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    return tmp, path


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="interlock-fsync")


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
"""Outputs up to this size are stored in the ledger with their completion, and rewritten from
it if a crash damages the file; larger ones exist only as files."""


def commit(tmp: Path, final: Path) -> tuple[str, int, bytes | None]:
    """Move a finished output into place: (sha256, size, body if it is small enough to be
    stored in the ledger, else None).

    The file is durable before its rename (a small one is fsynced here, a large one by the
    worker side); the caller fsyncs the folder before the completion is recorded. A power
    loss can then leave nothing at the final path, or the whole file, never an empty one.
    """
    with open(tmp, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= INLINE_LIMIT:
            body = handle.read()
            os.fsync(handle.fileno())
    if size <= INLINE_LIMIT:
        os.replace(tmp, final)
        return hashlib.sha256(body).hexdigest(), len(body), body
    sha, size = digest(tmp)
    os.replace(tmp, final)
    return sha, size, None


def discard(path: Path) -> None:
    """Remove a temporary output if it exists."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
