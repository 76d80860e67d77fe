"""The real CLI on bundle keys (without the `sign` extra, of the wrong kind) and on bundles
unpacked and packed again with an ordinary `tar`."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

from tests.cli.test_bundles import _env, _paused_bundle
from tests.cli.test_cli import cli

BLOCK_CRYPTOGRAPHY = """
import sys

class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "cryptography" or name.startswith("cryptography."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, _Blocked())
"""


def _without_cryptography(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BLOCK_CRYPTOGRAPHY)
    path = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path}


def test_keys_without_the_sign_extra_name_it_and_exit_69(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Without `cryptography`, keygen, --sign-key and --public-key exit 69 naming
    `interlock[sign]`; a key file that does not exist is named first (exit 2)."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _without_cryptography(_env(cli_env, tmp_path / "a", marker), tmp_path)
    blocked = cli(env, "verify", str(bundle))
    assert blocked.returncode == 0, blocked.stderr  # an unsigned bundle needs no extra
    (tmp_path / "given.pub").write_text("ssh-ed25519 AAAA\n")
    (tmp_path / "given").write_text("not checked before the extra\n")
    for args in (
        ["keygen", str(tmp_path / "key")],
        ["verify", str(bundle), "--public-key", str(tmp_path / "given.pub")],
        ["export", run_id, "-o", str(tmp_path / "s.tar.gz"), "--sign-key", str(tmp_path / "given")],
    ):
        done = cli(env, *args)
        assert done.returncode == 69, (args, done.stderr)
        assert "pip install 'interlock[sign]'" in done.stderr, done.stderr
    assert not (tmp_path / "key").exists()
    missing = cli(env, "verify", str(bundle), "--public-key", str(tmp_path / "nonexist.pub"))
    assert missing.returncode == 2 and "nonexist.pub" in missing.stderr, missing.stderr


def test_a_key_of_the_wrong_kind_is_named_and_exits_2(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The private key given as --public-key, the public key as --sign-key, or a file that is
    no key at all: exit 2 with the reason, never an internal error."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "a", marker)
    key = tmp_path / "key"
    assert cli(env, "keygen", str(key)).returncode == 0
    private = cli(env, "verify", str(bundle), "--public-key", str(key))
    assert private.returncode == 2, private.stderr
    assert f"{key} is a private key; pass {key}.pub" in private.stderr
    signed = tmp_path / "s.tar.gz"
    public = cli(env, "export", run_id, "-o", str(signed), "--sign-key", f"{key}.pub")
    assert public.returncode == 2 and "is a public key" in public.stderr, public.stderr
    junk = tmp_path / "junk"
    junk.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    for args in (
        ["verify", str(bundle), "--public-key"],
        ["export", run_id, "-o", str(signed), "--sign-key"],
    ):
        done = cli(env, *args, str(junk))
        assert done.returncode == 2 and "not an ed25519" in done.stderr, (args, done.stderr)
