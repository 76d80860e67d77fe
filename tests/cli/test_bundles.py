"""The real CLI on bundles that are code, forged, or bombs: export, verify, import, rerun,
trust, serve, keygen and signatures."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from tests.cli.test_cli import cli

PAUSED = """
demo:
  phases:
    - id: write
      pause_after: true
      workers:
        - role: writer
          model: sonnet
          task: "Write about the topic; the reviewer's token is api_key=abcdefghijklmnop"
        - role: builder
          output: built.md
          command: [sh, -c, "echo built > \\"$INTERLOCK_OUTPUT\\"; cat key.txt; echo to-stderr >&2"]
    - id: publish
      workers:
        - role: marker
          final: true
          command: [sh, -c, "touch \\"$MARKER_DIR/ran\\"; cat built.md > \\"$INTERLOCK_OUTPUT\\""]
          env: [MARKER_DIR]
"""
KEY = "the-configured-key-0123456789"
CONFIG = """
[providers.gateway]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key_env = "GATEWAY_KEY"

[providers.local]
kind = "offline"

[models.sonnet]
provider = "local"
"""


def _env(cli_env: dict[str, str], home: Path, marker_dir: Path) -> dict[str, str]:
    return {**cli_env, "INTERLOCK_HOME": str(home), "MARKER_DIR": str(marker_dir)}


def _paused_bundle(cli_env: dict[str, str], tmp_path: Path) -> tuple[str, Path, Path]:
    """A run paused after its first phase (a model prompt, a command with logs), exported;
    (run id, bundle, the folder where the second phase's command leaves a marker)."""
    flow = tmp_path / "src" / "wf.yaml"
    flow.parent.mkdir()
    flow.write_text(PAUSED.replace("key.txt", str(flow.parent / "key.txt")))
    (flow.parent / "key.txt").write_text(f"token {KEY}\n")
    (flow.parent / "interlock.toml").write_text(CONFIG)
    marker = tmp_path / "marker"
    marker.mkdir()
    env = {**_env(cli_env, tmp_path / "a", marker), "GATEWAY_KEY": KEY}
    ran = subprocess.run(
        [sys.executable, "-m", "interlock", "run", "wf.yaml", "demo", "--topic", "tides"],
        cwd=flow.parent, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 3, ran.stderr
    run_id = next(w.split()[1] for w in ran.stderr.splitlines() if w.startswith("run "))
    bundle = tmp_path / "run.tar.gz"
    exported = cli(env, "export", run_id, "-o", str(bundle))
    assert exported.returncode == 0, exported.stderr
    return run_id, bundle, marker


def test_an_imported_run_runs_nothing_under_serve_resume_or_approve(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A paused run imported elsewhere is inert: `serve` with no workflow does not take it
    up, `resume` and `approve` are refused naming `trust`, and its next command never runs;
    once a person trusts it, the approval carries it to the end and the command runs."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "b", marker)
    imported = cli(env, "import", str(bundle))
    assert imported.returncode == 0, imported.stderr
    assert "inert" in imported.stdout and "publish/marker: command" in imported.stdout
    approved = cli(env, "approve", run_id)
    assert approved.returncode == 2 and f"interlock trust {run_id}" in approved.stderr
    resumed = cli(env, "resume", run_id)
    assert resumed.returncode == 2 and "imported from a bundle" in resumed.stderr
    serve = subprocess.Popen(
        [sys.executable, "-m", "interlock", "serve", "--port", "0"],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert serve.stderr is not None
        url = serve.stderr.readline().split("serving on ")[1].strip().removesuffix("/ui/")
        deadline = time.time() + 20
        while True:
            try:
                httpx.get(f"{url}/api/health").raise_for_status()
                break
            except httpx.HTTPError:
                assert time.time() < deadline, "the server did not answer"
                time.sleep(0.1)
        time.sleep(3)  # a housekeeping round or more: each would take up an orphaned run
        assert not (marker / "ran").exists()
    finally:
        serve.terminate()
        serve.wait(15)
        if serve.stderr is not None:
            serve.stderr.close()
    assert not (marker / "ran").exists()
    status = json.loads(cli(env, "status", run_id, "--json").stdout)
    assert status["status"] == "paused"
    trusted = cli(env, "trust", run_id)
    assert trusted.returncode == 0 and "publish/marker: command" in trusted.stdout
    done = cli(env, "approve", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (marker / "ran").exists()


def test_an_imported_run_can_be_cancelled_without_trusting_it(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Cancelling an imported run needs no trust, and runs none of its commands."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "b", marker)
    assert cli(env, "import", str(bundle)).returncode == 0
    cancelled = cli(env, "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cli(env, "status", run_id, "--json").stdout)["status"] == "cancelled"
    assert not (marker / "ran").exists()


def test_rerun_of_an_imported_run_needs_your_workflow_or_the_trust_flag(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`rerun` of an imported run without --workflow is refused naming both fixes; with the
    user's own workflow it runs that workflow's commands; --trust-bundle runs the bundle's."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "b", marker)
    assert cli(env, "import", str(bundle)).returncode == 0
    assert cli(env, "cancel", run_id).returncode == 0  # a rerun needs an ended source
    refused = cli(env, "rerun", run_id)
    assert refused.returncode == 2
    assert "--workflow FILE" in refused.stderr and "--trust-bundle" in refused.stderr
    assert cli(env, "rerun", run_id, "--dry-run").returncode == 2
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        PAUSED.replace("pause_after: true", "pause_after: false").replace("ran", "mine")
    )
    own = subprocess.run(
        [sys.executable, "-m", "interlock", "rerun", run_id, "--workflow", str(mine)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert own.returncode == 0, own.stdout + own.stderr
    assert (marker / "mine").exists() and not (marker / "ran").exists()
    trusted = subprocess.run(
        [sys.executable, "-m", "interlock", "rerun", run_id, "--trust-bundle"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert trusted.returncode == 3, trusted.stdout + trusted.stderr  # its own pause_after


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def _forge(bundle: Path, target: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    """Change members, then hash the manifest again as a forger would (no signature)."""
    members = _members(bundle)
    members.pop("signature.json", None)
    change(members)
    manifest = json.loads(members.pop("manifest.json"))
    manifest.update(json.loads(members.pop("manifest", b"{}")))
    manifest["files"] = {
        name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for name, data in members.items()
    }
    _write(target, [("manifest.json", json.dumps(manifest).encode()), *members.items()])


def _write(target: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(target, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _replace(name: str, data: bytes) -> Callable[[dict[str, bytes]], None]:
    def change(members: dict[str, bytes]) -> None:
        assert name in members, sorted(members)
        members[name] = data

    return change


def test_every_kind_of_file_changed_in_a_bundle_is_caught(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """final.md, an output, its stored body, a prompt, a command's log, an added file and
    each manifest field the history holds: changed and the manifest hashed again, each is
    refused by `verify` and `import` (exit 6, naming what differs) and nothing is imported."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "b", marker)
    approve_env = _env(cli_env, tmp_path / "a", marker)
    approved = cli(approve_env, "approve", run_id)
    assert approved.returncode == 0, approved.stderr
    assert cli(approve_env, "export", run_id, "-o", str(bundle)).returncode == 0
    members = _members(bundle)
    assert {"run/final.md", "run/built.md", "run/prompts/writer@1.1.md"} <= set(members)
    body = next(n for n in members if n.startswith("artifacts/"))
    cases: dict[str, Callable[[dict[str, bytes]], None]] = {
        "final.md": _replace("run/final.md", b"forged result\n"),
        "built.md": _replace("run/built.md", b"forged output\n"),
        "prompts/writer@1.1.md": _replace("run/prompts/writer@1.1.md", b"forged prompt\n"),
        "logs/builder@1.1.stdout": _replace("run/logs/builder@1.1.stdout", b"forged log\n"),
        "its name": _replace(body, b"forged body\n"),
        "run/notes.md": lambda m: m.__setitem__("run/notes.md", b"an added file\n"),
        "topic": lambda m: m.__setitem__("manifest", json.dumps({"topic": "forged"}).encode()),
        "pipeline": lambda m: m.__setitem__("manifest", b'{"pipeline": "forged"}'),
        "created_at": lambda m: m.__setitem__("manifest", b'{"created_at": 1.0}'),
    }
    for named, change in cases.items():
        forged = tmp_path / "forged.tar.gz"
        _forge(bundle, forged, change)
        checked = cli(env, "verify", str(forged))
        assert checked.returncode == 6, (named, checked.stdout, checked.stderr)
        assert named in checked.stderr, (named, checked.stderr)
        refused = cli(env, "import", str(forged))
        assert refused.returncode == 6, (named, refused.stderr)
    assert cli(env, "status", run_id).returncode != 0  # nothing was imported
    _forge(bundle, tmp_path / "same.tar.gz", lambda m: None)
    assert cli(env, "verify", str(tmp_path / "same.tar.gz")).returncode == 0


def test_signatures_good_bad_other_key_and_unsigned(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A signed bundle checks against its public key (exit 0); a forged one re-hashed, or one
    checked against another key, exits 8; an unsigned one says "unsigned", and exits 8 when a
    public key is required."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    env = _env(cli_env, tmp_path / "a", marker)
    unsigned = cli(env, "verify", str(bundle))
    assert unsigned.returncode == 0 and "unsigned" in unsigned.stdout
    keys = tmp_path / "keys"
    keys.mkdir()
    made = cli(env, "keygen", str(keys / "mine"))
    assert made.returncode == 0, made.stderr
    assert oct((keys / "mine").stat().st_mode & 0o777) == "0o600"
    assert cli(env, "keygen", str(keys / "mine")).returncode == 2  # never replaced
    assert cli(env, "keygen", str(keys / "other")).returncode == 0
    signed = tmp_path / "signed.tar.gz"
    done = cli(env, "export", run_id, "-o", str(signed), "--sign-key", str(keys / "mine"))
    assert done.returncode == 0 and "signed by SHA256:" in done.stdout
    good = cli(env, "verify", str(signed), "--public-key", str(keys / "mine.pub"))
    assert good.returncode == 0 and "signed by the key given" in good.stdout
    other = cli(env, "verify", str(signed), "--public-key", str(keys / "other.pub"))
    assert other.returncode == 8 and "signed by another key" in other.stderr
    required = cli(env, "verify", str(bundle), "--public-key", str(keys / "mine.pub"))
    assert required.returncode == 8 and "unsigned" in required.stderr
    forged = tmp_path / "forged.tar.gz"
    members = _members(signed)
    manifest = json.loads(members["manifest.json"])
    manifest["topic"] = "forged"
    members["manifest.json"] = json.dumps(manifest).encode()
    _write(forged, list(members.items()))
    for extra in ([], ["--public-key", str(keys / "mine.pub")]):
        bad = cli(env, "verify", str(forged), *extra)
        assert bad.returncode == 8 and "does not match the manifest" in bad.stderr
    imported = cli(
        _env(cli_env, tmp_path / "b", marker),
        "import", str(forged), "--public-key", str(keys / "mine.pub"),
    )  # fmt: skip
    assert imported.returncode == 8


def test_exports_are_masked_like_every_view_and_still_verify(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The configured key a command printed and a credential in a prompt are masked in the
    bundle (as in the attempt detail), and the masked files still match the history."""
    run_id, bundle, marker = _paused_bundle(cli_env, tmp_path)
    members = _members(bundle)
    everything = b"".join(members.values())
    assert KEY.encode() not in everything
    prompt = members["run/prompts/writer@1.1.md"]
    assert b"abcdefghijklmnop" not in prompt and b"api_key=[redacted]" in prompt
    assert b"[redacted]" in members["run/logs/builder@1.1.stdout"]
    assert cli(cli_env, "verify", str(bundle)).returncode == 0
    # A record that holds a key configured after it was kept is left out, never exported raw.
    log = tmp_path / "a" / "runs" / run_id / "logs" / "builder@1.1.stdout"
    assert log.is_file()
    env = {**_env(cli_env, tmp_path / "a", marker), "GATEWAY_KEY": "built-a-new-key-0123"}
    (tmp_path / "a" / "interlock.toml").write_text(CONFIG)
    log.write_bytes(log.read_bytes().replace(b"token", b"built-a-new-key-0123"))
    again = cli(env, "export", run_id, "-o", str(tmp_path / "again.tar.gz"))
    assert again.returncode == 0, again.stderr
    assert "left out logs/builder@1.1.stdout" in again.stderr
    assert b"built-a-new-key-0123" not in b"".join(_members(tmp_path / "again.tar.gz").values())


def _bomb(target: Path, manifest_size: int | None, member: tuple[str, int]) -> None:
    """A bundle whose one member is `member[1]` bytes of zeros (a few KB compressed), its
    manifest declaring `manifest_size` for it (None: the size it has)."""
    name, size = member
    declared = size if manifest_size is None else manifest_size
    manifest = {
        "format": "interlock-run", "version": 2, "run_id": "bomb", "definition_hash": "x",
        "files": {name: {"sha256": "0" * 64, "size": declared}},
    }  # fmt: skip
    with (
        gzip.open(target, "wb", compresslevel=1) as raw,
        tarfile.open(fileobj=raw, mode="w|") as tar,
    ):
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, _Zeros(size))


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        self.left -= size
        return bytes(size)


# Runs the CLI as its only child and prints that child's peak RSS last: this test process's
# own RUSAGE_CHILDREN also counts every earlier test's children (xdist runs many in one).
_PEAK = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(done.returncode)"
)


def cli_peak(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """The CLI's result (its own output) and its peak resident size in KiB."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "interlock", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    *lines, peak = done.stderr.splitlines()
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    own = subprocess.CompletedProcess(done.args, done.returncode, done.stdout, "\n".join(lines))
    return own, int(peak)


def test_size_bombs_are_refused_with_the_limit_named(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A member that declares more than the limit, members that lie about their size, and a
    total over --max-size are refused (exit 6, the limit named) without the process growing."""
    big = tmp_path / "declared.tar.gz"
    _bomb(big, None, ("run/final.md", 600 * 1024**2))
    lying = tmp_path / "lying.tar.gz"
    _bomb(lying, 10, ("run/final.md", 300 * 1024**2))
    for bundle, extra, said in (
        (big, [], "the limit of one member"),
        (lying, [], "where the manifest says 10"),
        (big, ["--max-member-size", "1G", "--max-size", "100M"], "--max-size raises it"),
    ):
        for command in ("verify", "import"):
            refused, peak = cli_peak(cli_env, command, str(bundle), *extra)
            assert refused.returncode == 6, refused.stdout + refused.stderr
            assert said in refused.stderr, refused.stderr
            assert peak < 300 * 1024, peak  # KiB: each refused well below 300 MB
    assert not any((Path(cli_env["INTERLOCK_HOME"])).glob(".import-*"))


def test_a_long_tar_name_block_is_refused_before_it_is_read(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A GNU long-name block of 200 MB (which tarfile would read whole) is refused at its
    header."""
    target = tmp_path / "longname.tar.gz"
    with gzip.open(target, "wb", compresslevel=1) as raw:
        manifest = {"format": "interlock-run", "version": 2, "run_id": "r", "definition_hash": "x"}
        data = json.dumps({**manifest, "files": {}}).encode()
        header = tarfile.TarInfo("manifest.json")
        header.size = len(data)
        raw.write(header.tobuf(tarfile.GNU_FORMAT) + data + bytes(-len(data) % 512))
        long = tarfile.TarInfo("././@LongLink")
        long.type, long.size = tarfile.GNUTYPE_LONGNAME, 200 * 1024**2
        raw.write(long.tobuf(tarfile.GNU_FORMAT))
        for _ in range(200):
            raw.write(bytes(1024**2))
    refused = cli(cli_env, "verify", str(target))
    assert refused.returncode == 6 and "larger than 1 MiB" in refused.stderr, refused.stderr
    assert os.path.getsize(target) < 2 * 1024**2
