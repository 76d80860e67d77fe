"""Ed25519 signatures of exported bundles (through `cryptography`, the `sign` extra).

A hash chain anyone can recompute shows that a bundle is consistent, not who wrote it: a
forger who changes an output can rewrite the events and the manifest to match. The exporter
signs the manifest (which holds the chain head and the SHA-256 of every member) with a key
only they hold, and whoever checks the bundle verifies it against the public key they were
given. Keys are files: a private key in PKCS#8 PEM (or an OpenSSH `ed25519` key), a public
key in PEM (or an OpenSSH `ssh-ed25519 ...` line).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.errors import BadSignature, MissingExtra, UsageError

ALGORITHM = "ed25519"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise MissingExtra(
            f"signing bundles needs an extra: pip install 'interlock[sign]' ({exc})"
        ) from None
    return ed25519


def _serialization() -> Any:
    _crypto()
    from cryptography.hazmat.primitives import serialization

    return serialization


_PRIVATE_MARKERS = (b"PRIVATE KEY-----", b"-----BEGIN OPENSSH PRIVATE KEY")


def fingerprint(raw_public: bytes) -> str:
    """How a public key is named in messages (as OpenSSH names keys)."""
    digest = base64.b64encode(hashlib.sha256(raw_public).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


@dataclass(frozen=True)
class Signature:
    """What `signature.json` holds."""

    public_key: bytes  # raw 32 bytes
    signature: bytes

    def as_dict(self) -> dict[str, str]:
        """The member's JSON content."""
        return {
            "algorithm": ALGORITHM,
            "public_key": base64.b64encode(self.public_key).decode(),
            "fingerprint": fingerprint(self.public_key),
            "signature": base64.b64encode(self.signature).decode(),
            "signs": "manifest.json",
        }

    @staticmethod
    def from_dict(data: Any) -> Signature:
        """Read `signature.json` (raises ValueError when it is not one)."""
        if not isinstance(data, dict) or data.get("algorithm") != ALGORITHM:
            raise ValueError("not an ed25519 signature of the manifest")
        public = base64.b64decode(str(data["public_key"]), validate=True)
        signature = base64.b64decode(str(data["signature"]), validate=True)
        if len(public) != 32 or len(signature) != 64:
            raise ValueError("the key or the signature has the wrong length")
        return Signature(public_key=public, signature=signature)


def _raw_public(key: Any) -> bytes:
    serialization = _serialization()

    raw: bytes = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw


def keygen(path: Path) -> tuple[Path, str]:
    """Write a new private key to `path` (mode 0600) and its public key to `path`.pub;
    returns the public key's path and fingerprint. An existing file is never replaced."""
    public_path = path.with_name(path.name + ".pub")
    for target in (path, public_path):
        if target.exists():
            raise UsageError(f"{target} already exists: choose another path, or remove it first")
    ed25519 = _crypto()
    serialization = _serialization()
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(private)
        public_path.write_bytes(public)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the key: {exc.strerror}") from None
    return public_path, fingerprint(_raw_public(key.public_key()))


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror}") from None


def sign(manifest: bytes, key_path: Path) -> Signature:
    """Sign the manifest's bytes with the private key at `key_path`."""
    data = _read(key_path, "private key")
    ed25519 = _crypto()
    serialization = _serialization()
    key: Any = None
    for load in (serialization.load_pem_private_key, serialization.load_ssh_private_key):
        try:
            key = load(data, password=None)
            break
        except TypeError:
            raise UsageError(
                f"{key_path}: the private key is encrypted; give one without a passphrase "
                "(interlock keygen PATH makes one)"
            ) from None
        except Exception:  # any key the library cannot load is not one
            continue
    if key is None and (b"PUBLIC KEY-----" in data or data.startswith(b"ssh-")):
        raise UsageError(
            f"{key_path} is a public key: signing needs the private key (the file without .pub)"
        )
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UsageError(
            f"{key_path}: not an ed25519 private key (interlock keygen PATH makes one)"
        )
    return Signature(public_key=_raw_public(key.public_key()), signature=key.sign(manifest))


def public_key(path: Path) -> bytes:
    """The raw public key in the file at `path` (PEM or an OpenSSH line)."""
    data = _read(path, "public key")
    if any(marker in data for marker in _PRIVATE_MARKERS):
        raise UsageError(f"{path} is a private key; pass {path}.pub (its public key)")
    ed25519 = _crypto()
    serialization = _serialization()
    key: Any = None
    for load in (serialization.load_pem_public_key, serialization.load_ssh_public_key):
        try:
            key = load(data)
            break
        except Exception:  # any key the library cannot load is not one
            continue
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise UsageError(f"{path}: not an ed25519 public key (the .pub of interlock keygen)")
    return _raw_public(key)


def check(manifest: bytes, signature: Signature, where: str) -> None:
    """Raise BadSignature unless `signature` signs `manifest` with its own public key."""
    ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    key = ed25519.Ed25519PublicKey.from_public_bytes(signature.public_key)
    try:
        key.verify(signature.signature, manifest)
    except InvalidSignature:
        raise BadSignature(
            f"{where}: the signature does not match the manifest: the bundle was changed "
            "after it was signed (or the signature is forged); do not import it"
        ) from None
