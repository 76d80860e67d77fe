"""The records an attempt leaves beside its output, masked and bound to the history.

An attempt may leave its prompt (`prompts/<task>.<attempt>.md`), a tool loop's transcript
(`prompts/<task>.<attempt>.tools.md`) and a command's logs (`logs/<task>.<attempt>.stdout`,
`.stderr`). When the attempt ends they are masked in place (every key the run's configuration
reaches and anything shaped like a credential, as every view of them is) and the SHA-256 of
what is kept goes into the event that ends the attempt (`records`). A bundle carries a record
only when its bytes are the ones that event names, so the masking and the hash chain agree.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from interlock.providers.redaction import Secret, scrub

CHUNK = 1 << 20  # bytes of a line masked at once: a line longer than this is cut for it


def names(task_id: str, attempt: int) -> list[str]:
    """The paths (in the run directory) an attempt's records may have."""
    stem = f"{task_id}.{attempt}"
    return [f"prompts/{stem}.md", f"prompts/{stem}.tools.md"] + [
        f"logs/{stem}.{stream}" for stream in ("stdout", "stderr")
    ]


def masked(data: bytes, secrets: Iterable[Secret | None]) -> bytes:
    """`data` as every view shows it: each line through `scrub` (bytes that are not UTF-8
    are kept as they are)."""
    keys = list(secrets)
    out = bytearray()
    for line in data.splitlines(keepends=True):
        out += _masked_line(line, keys)
    return bytes(out)


def _masked_line(line: bytes, secrets: list[Secret | None]) -> bytes:
    text = line.decode("utf-8", "surrogateescape")
    return scrub(text, secrets).encode("utf-8", "surrogateescape")


def mask_file(path: Path, secrets: Iterable[Secret | None]) -> str:
    """Mask the file at `path` in place (rewritten atomically only when masking changed it);
    returns the SHA-256 of what it holds then. Read a line (at most `CHUNK`) at a time."""
    keys = list(secrets)
    digest = hashlib.sha256()
    changed = False
    with open(path, "rb") as source:
        while line := source.readline(CHUNK):
            kept = _masked_line(line, keys)
            changed = changed or kept != line
            digest.update(kept)
    if not changed:
        return digest.hexdigest()
    temporary = path.with_name(f".{path.name}.masking")
    digest = hashlib.sha256()
    with open(path, "rb") as source, open(temporary, "wb") as sink:
        while line := source.readline(CHUNK):
            kept = _masked_line(line, keys)
            digest.update(kept)
            sink.write(kept)
    os.replace(temporary, path)
    return digest.hexdigest()


def any_left(run_dir: Path) -> bool:
    """Whether any attempt of the run may have left a record: its record folders exist."""
    folder = os.fspath(run_dir)
    return os.path.isdir(f"{folder}/prompts") or os.path.isdir(f"{folder}/logs")


def seal(
    run_dir: Path, task_id: str, attempt: int, secrets: Iterable[Secret | None]
) -> dict[str, str] | None:
    """Mask the attempt's records and return their hashes by path (None: it left none)."""
    # Most attempts leave no record (a `call:` worker's, a command's that printed nothing):
    # their folders are looked at first, two `stat`s instead of one per possible record.
    if not any_left(run_dir):
        return None
    keys = list(secrets)
    found: dict[str, str] = {}
    for name in names(task_id, attempt):
        path = run_dir / name
        try:
            if path.is_file() and not path.is_symlink():
                found[name] = mask_file(path, keys)
        except OSError:
            continue  # unreadable: left out of the history, and so out of any bundle
    return found or None
