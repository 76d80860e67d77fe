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


def _tar(cwd: Path, *args: str) -> None:
    subprocess.run(["tar", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def test_a_bundle_unpacked_and_packed_again_with_tar_still_verifies(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`tar -czf B .` and `tar czf B *` of an untouched unpack (directory entries, `./` names,
    the manifest where it sorts) verify with the signature and import; a file added, a link or
    a `..` name in such a repack is still refused (exit 6)."""
    run_id, _bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "a", marker)
    key = tmp_path / "key"
    assert cli(env, "keygen", str(key)).returncode == 0
    signed = tmp_path / "signed.tar.gz"
    assert cli(env, "export", run_id, "-o", str(signed), "--sign-key", str(key)).returncode == 0
    unpacked = tmp_path / "unp"
    unpacked.mkdir()
    _tar(unpacked, "-xzf", str(signed))
    names = sorted(p.name for p in unpacked.iterdir())
    _tar(unpacked, "-czf", str(tmp_path / "dot.tar.gz"), ".")
    _tar(unpacked, "czf", str(tmp_path / "star.tar.gz"), *names)
    with tarfile.open(tmp_path / "star.tar.gz") as tar:
        assert tar.getnames()[0] != "manifest.json"  # where `tar` puts it, not where export does
    for repacked in ("dot.tar.gz", "star.tar.gz"):
        checked = cli(env, "verify", str(tmp_path / repacked), "--public-key", f"{key}.pub")
        assert checked.returncode == 0, (repacked, checked.stdout, checked.stderr)
        assert "signed by the key given" in checked.stdout
    imported = cli(_env(cli_env, tmp_path / "b", marker), "import", str(tmp_path / "dot.tar.gz"))
    assert imported.returncode == 0, imported.stderr
    (unpacked / "run" / "notes.md").write_text("an added file\n")
    _tar(unpacked, "-czf", str(tmp_path / "added.tar.gz"), ".")
    added = cli(env, "verify", str(tmp_path / "added.tar.gz"))
    assert added.returncode == 6 and "run/notes.md" in added.stderr, added.stderr
    (unpacked / "run" / "notes.md").unlink()
    (unpacked / "run" / "link.md").symlink_to("/etc/passwd")
    _tar(unpacked, "-czf", str(tmp_path / "link.tar.gz"), ".")
    linked = cli(env, "verify", str(tmp_path / "link.tar.gz"))
    assert linked.returncode == 6 and "not a plain file" in linked.stderr, linked.stderr
    (unpacked / "run" / "link.md").unlink()
    _tar(
        unpacked,
        "-czf",
        str(tmp_path / "up.tar.gz"),
        "-P",
        "--transform",
        "s,^\\./run,../run,",
        ".",
    )
    upward = cli(env, "verify", str(tmp_path / "up.tar.gz"))
    assert upward.returncode == 6 and "not a plain file" in upward.stderr, upward.stderr
