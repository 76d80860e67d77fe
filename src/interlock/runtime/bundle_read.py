"""Reading a bundle's tar within limits, a member at a time, into a folder.

A bundle is read once, sequentially, never whole into memory: `manifest.json` declares every
member's size, and `interlock export` writes it first, so a bundle that would pass the limits
is refused before anything else is decompressed; each member's header must then match what
was declared, and its bytes are streamed to a file while they are hashed. A bundle packed
again with an ordinary `tar` (directory entries, `./` names, the manifest where it sorts) is
read too: the members before the manifest are held to the limits as they are read and checked
against it once it comes. Decompression itself is bounded too
(no read past the total limit, no metadata block past `META_LIMIT`), so a gzip or tar bomb
costs at most the limit it is refused at, whatever it claims in its headers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from interlock.errors import UsageError, VerificationFailed

FORMAT = "interlock-run"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SIGNATURE = "signature.json"
MANIFEST_LIMIT = 64 * 1024 * 1024  # bytes of manifest.json (a line per member)
SIGNATURE_LIMIT = 64 * 1024
META_LIMIT = 1024 * 1024  # one tar metadata block (a long name, a pax header)
COPY_CHUNK = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How much a bundle may hold; each is named when a bundle passes it."""

    total: int = 1024**3  # bytes of all members together (--max-size)
    member: int = 256 * 1024**2  # bytes of one member (--max-member-size)
    members: int = 200_000  # members


def parse_size(text: str) -> int:
    """A size such as 2GiB, 500M, 64k or 1000000 (bytes); K, M, G, T are powers of 1024."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = 1
    for unit, power in (("K", 1), ("M", 2), ("G", 3), ("T", 4)):
        if value.endswith(unit):
            value, factor = value[:-1], 1024**power
            break
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{text!r} is not a size: give bytes, or e.g. 500M, 2G") from None
    if number <= 0:
        raise UsageError(f"{text!r}: a size must be positive")
    return int(number * factor)


def _fail(path: Path, problem: str) -> VerificationFailed:
    return VerificationFailed(f"{path}: the bundle fails verification: {problem}")


def _too_large(path: Path, problem: str) -> VerificationFailed:
    return VerificationFailed(f"{path}: the bundle is refused: {problem}")


def show_size(size: int) -> str:
    """A size in the unit a person reads it in."""
    for unit, power in (("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if size >= 1024**power:
            return f"{size / 1024**power:.1f} {unit}".replace(".0 ", " ")
    return f"{size} bytes"


class _Bounded:
    """A read-only file over the decompressed stream that never reads past `limit` bytes,
    nor more than `META_LIMIT` at once except in the chunks this module asks for."""

    def __init__(self, raw: IO[bytes], limit: int, path: Path) -> None:
        self.raw, self.limit, self.path = raw, limit, path

    def _refuse(self, position: int) -> None:
        if position > self.limit:
            raise _too_large(
                self.path,
                f"it holds more than {show_size(self.limit)} (the limit of a bundle's "
                "content: --max-size raises it)",
            )

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > max(META_LIMIT, COPY_CHUNK):
            raise _too_large(
                self.path, f"a block of its tar is larger than {show_size(META_LIMIT)}"
            )
        self._refuse(self.raw.tell() + size - tarfile.BLOCKSIZE)
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._refuse(offset)
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()


@dataclass
class Extracted:
    """A bundle read into `folder`: its manifest (and its bytes), its signature's JSON, and
    each member's file there with its SHA-256."""

    manifest: dict[str, Any]
    manifest_bytes: bytes
    signature: Any
    folder: Path
    paths: dict[str, Path] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)

    def read(self, name: str) -> bytes:
        """A member's content (only for the small ones: the definition)."""
        return self.paths[name].read_bytes()


def _listed(path: Path, manifest: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """The manifest's members: name -> (sha256, declared size)."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise _fail(path, "manifest.json lists no files")
    listed: dict[str, tuple[str, int]] = {}
    for name, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
            raise _fail(path, f"manifest.json's entry for {name!r} is not a hash and a size")
        listed[str(name)] = (str(entry.get("sha256")), int(entry["size"]))
    return listed


def _check_declared(path: Path, listed: dict[str, tuple[str, int]], limits: Limits) -> None:
    if len(listed) + 2 > limits.members:
        raise _too_large(
            path, f"it has {len(listed)} members, more than the limit of {limits.members}"
        )
    sizes = [size for _, size in listed.values()]
    for name, (_, size) in sorted(listed.items()):
        if size < 0 or size > limits.member:
            raise _too_large(
                path,
                f"{name} declares {show_size(size)}, more than {show_size(limits.member)} (the "
                "limit of one member: --max-member-size raises it)",
            )
    if sum(sizes) > limits.total:
        raise _too_large(
            path,
            f"its members declare {show_size(sum(sizes))}, more than {show_size(limits.total)} "
            "(the limit of a bundle's content: --max-size raises it)",
        )


def _open(path: Path) -> IO[bytes]:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    with open(path, "rb") as probe:
        compressed = probe.read(2) == b"\x1f\x8b"
    if compressed:
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _copy(handle: IO[bytes], target: Path) -> str:
    digest = hashlib.sha256()
    with open(target, "wb") as sink:
        while chunk := handle.read(COPY_CHUNK):
            digest.update(chunk)
            sink.write(chunk)
    return digest.hexdigest()


def _small(handle: IO[bytes], size: int) -> bytes:
    data = bytearray()
    while len(data) < size and (chunk := handle.read(min(COPY_CHUNK, size - len(data)))):
        data += chunk
    return bytes(data)


def _member_name(path: Path, info: tarfile.TarInfo) -> str | None:
    """The member's name in the manifest (an ordinary `tar -C DIR .` writes `./NAME`), or None
    for a directory entry (a repack with `tar` adds them; they hold nothing)."""
    parts = [part for part in PurePosixPath(info.name).parts if part != "."]
    if info.name.startswith("/") or ".." in parts:
        raise _fail(path, f"member {info.name!r} is not a plain file of the bundle")
    if info.isdir():
        return None
    if not info.isfile() or not parts:
        raise _fail(path, f"member {info.name!r} is not a plain file of the bundle")
    return "/".join(parts)


def read_members(path: Path, folder: Path, limits: Limits) -> Extracted:
    """Read the bundle at `path` into `folder` within `limits` (raises VerificationFailed
    naming the first problem, or the limit passed). `manifest.json` may come anywhere (an
    ordinary `tar` repack puts it where it sorts): the members before it are bounded by the
    limits as they are read, and checked against their declared sizes once it is read."""
    stream = _open(path)
    bounded = _Bounded(stream, limits.total + (limits.members + 16) * 2 * tarfile.BLOCKSIZE, path)
    found: Extracted | None = None
    signature: Any = None
    paths: dict[str, Path] = {}
    hashes: dict[str, str] = {}
    sizes: dict[str, int] = {}
    listed: dict[str, tuple[str, int]] = {}
    total = count = 0
    try:
        with tarfile.open(fileobj=bounded, mode="r:") as tar:  # type: ignore[call-overload]
            while (info := tar.next()) is not None:
                tar.members.clear()  # kept by tarfile for random access, unused here
                count += 1
                if count > limits.members + 2:
                    raise _too_large(path, f"it has more than {limits.members} members")
                name = _member_name(path, info)
                if name is None:
                    continue
                if name == MANIFEST:
                    if found is not None or info.size > MANIFEST_LIMIT:
                        raise _fail(path, "manifest.json appears twice, or is too large")
                    found = _manifest(path, tar, info, folder, limits)
                    listed = _listed(path, found.manifest)
                    _check_declared(path, listed, limits)
                    for seen in sorted(sizes):
                        _check_member(path, listed, seen, sizes[seen])
                    continue
                if name == SIGNATURE:
                    handle = tar.extractfile(info)
                    if signature is not None or info.size > SIGNATURE_LIMIT or handle is None:
                        raise _fail(path, "signature.json is not a signature")
                    try:
                        signature = json.loads(_small(handle, info.size))
                    except ValueError:
                        raise _fail(path, "signature.json is not JSON") from None
                    continue
                if name in paths:
                    raise _fail(path, f"{name} appears twice")
                if found is not None:
                    _check_member(path, listed, name, info.size)
                total += info.size
                if info.size > limits.member:
                    raise _too_large(
                        path,
                        f"{name} holds {show_size(info.size)}, more than "
                        f"{show_size(limits.member)} (--max-member-size raises the limit)",
                    )
                if total > limits.total:
                    raise _too_large(
                        path,
                        f"its members hold more than {show_size(limits.total)} (--max-size "
                        "raises the limit)",
                    )
                handle = tar.extractfile(info)
                assert handle is not None  # a regular file
                target = folder / f"m{count}"
                sizes[name] = info.size
                paths[name] = target
                hashes[name] = _copy(handle, target)
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
        problem = f"it is not an interlock bundle (a .tar.gz from 'interlock export'): {exc}"
        raise _fail(path, problem) from None
    finally:
        stream.close()
    if found is None:
        raise _fail(path, "manifest.json is missing")
    found.signature, found.paths, found.hashes = signature, paths, hashes
    for member in sorted(listed):
        if member not in found.paths:
            raise _fail(path, f"{member} is listed in the manifest but missing")
        if found.hashes[member] != listed[member][0]:
            raise _fail(path, f"{member} does not match its hash in the manifest")
    return found


def _check_member(path: Path, listed: dict[str, tuple[str, int]], name: str, size: int) -> None:
    if name not in listed:
        raise _fail(path, f"{name} is in the bundle but not in its manifest")
    declared = listed[name][1]
    if declared != size:
        raise _fail(path, f"{name} holds {size} bytes where the manifest says {declared}")


def _manifest(
    path: Path, tar: tarfile.TarFile, info: tarfile.TarInfo, folder: Path, limits: Limits
) -> Extracted:
    handle = tar.extractfile(info)
    assert handle is not None
    data = _small(handle, info.size)
    try:
        manifest = json.loads(data)
    except ValueError:
        raise _fail(path, "manifest.json is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _fail(path, "manifest.json does not describe an interlock run")
    version = manifest.get("version", 0)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise _fail(path, f"bundle version {version} is newer than this interlock")
    if version < FORMAT_VERSION:
        raise _fail(
            path,
            f"bundle version {version} was written by an older interlock: it binds neither its "
            "files to the run's history nor their sizes to its manifest; export the run again",
        )
    for name in ("run_id", "definition_hash"):
        if not isinstance(manifest.get(name), str):
            raise _fail(path, f"manifest.json has no {name}")
    return Extracted(manifest=manifest, manifest_bytes=data, signature=None, folder=folder)
