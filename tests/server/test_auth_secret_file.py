"""`interlock serve --auth-secret-file`: the token secret read from a file, so that it is not
on the command line other users of the machine can read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
from tests.server.helpers import token

from interlock.server.config import ServerConfig

CLI = [sys.executable, "-m", "interlock"]
SECRET = "file-secret-a3f9c2e8b1d4f6a0c2e4b6d8f0a2c4e6"


def serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`interlock serve ARGS` to its end (for options that make it exit)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    return subprocess.run(
        [*CLI, "serve", *args],
        cwd=tmp_path, env={**environ, "INTERLOCK_HOME": str(tmp_path / "home"), **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_server_reads_its_secret_from_a_file_and_it_is_not_in_its_command_line(
    tmp_path: Path,
) -> None:
    """A server started with --auth-secret-file accepts tokens signed with the file's secret
    (a trailing newline ignored) and refuses others, and its command line, as `ps` shows it,
    does not hold the secret."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    process = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--auth-secret-file", str(secret_file)],
        cwd=tmp_path, env={**environ, "INTERLOCK_HOME": str(tmp_path / "home")},
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        url = process.stderr.readline().split("serving on ")[1].strip().removesuffix("/ui/")
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert SECRET.encode() not in command_line and b"--auth-secret-file" in command_line
        deadline = time.time() + 10
        while True:
            try:
                httpx.get(f"{url}/api/health").raise_for_status()
                break
            except httpx.HTTPError:
                assert time.time() < deadline, "the server did not answer"
                time.sleep(0.1)
        good = {"Authorization": f"Bearer {token(['read'], secret=SECRET)}"}
        forged = {"Authorization": f"Bearer {token(['read'], secret='x' * 40)}"}
        assert httpx.get(f"{url}/api/runs", headers=good).status_code == 200
        assert httpx.get(f"{url}/api/runs", headers=forged).status_code == 401
    finally:
        process.terminate()
        process.wait(15)
        if process.stderr is not None:
            process.stderr.close()


def test_secret_file_options_and_their_refusals(tmp_path: Path) -> None:
    """--issue-token signs with the file's secret (also named by INTERLOCK_AUTH_SECRET_FILE);
    a secret given twice, a missing file and an empty one are usage errors naming the fix;
    the help of --auth-secret says the command line is visible to other users; the server's
    settings never show the secret, a webhook's URL or the store's password in their repr."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(f"  {SECRET}  \r\n")
    for result in (
        serve(tmp_path, "--auth-secret-file", str(secret_file), "--issue-token", "read"),
        serve(tmp_path, "--issue-token", "read", INTERLOCK_AUTH_SECRET_FILE=str(secret_file)),
    ):
        assert result.returncode == 0, result.stderr
        claims = jwt.decode(result.stdout.strip(), SECRET, algorithms=["HS256"])
        assert claims["scope"] == "read"
    twice = serve(
        tmp_path, "--auth-secret-file", str(secret_file), "--issue-token", "read",
        INTERLOCK_AUTH_SECRET=SECRET,
    )  # fmt: skip
    assert twice.returncode == 2 and "give the token secret once" in twice.stderr
    missing = serve(tmp_path, "--auth-secret-file", str(tmp_path / "nope"), "--issue-token", "r")
    assert missing.returncode == 2 and "cannot read it" in missing.stderr
    assert str(tmp_path / "nope") in missing.stderr
    (tmp_path / "empty").write_text("\n")
    empty = serve(tmp_path, "--auth-secret-file", str(tmp_path / "empty"), "--issue-token", "r")
    assert empty.returncode == 2 and "is empty" in empty.stderr
    helped = serve(tmp_path, "--help")
    said = " ".join(helped.stdout.split())
    assert "visible to other users" in said and "--auth-secret-file" in said
    for result in (twice, missing, empty):
        assert SECRET not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    hook = "https://hooks.example.com/services/T0/B0/keyPartOfTheUrl0123"
    config = ServerConfig(
        home=tmp_path, auth_secret=SECRET, webhooks=[hook], store_url="postgresql://u:pw@h/db"
    )
    assert SECRET not in repr(config) and hook not in repr(config) and "pw@" not in repr(config)
    # Webhooks come from INTERLOCK_WEBHOOKS too; a bad one is refused without repeating it.
    bad = "ftp://hooks.example.com/keyPartOfTheUrl0123"
    refused = serve(tmp_path, "--port", "0", INTERLOCK_WEBHOOKS=f"https://ok.example/ {bad}")
    assert refused.returncode == 2 and "must be an http:// or https:// URL" in refused.stderr
    assert "keyPartOfTheUrl" not in refused.stderr


def test_issue_token_refuses_a_secret_the_server_would_refuse(tmp_path: Path) -> None:
    """--issue-token with a secret under 32 bytes exits 2 with the server's reason and
    prints no token."""
    secret_file = tmp_path / "short"
    secret_file.write_text("short\n")
    done = serve(tmp_path, "--auth-secret-file", str(secret_file), "--issue-token", "read")
    assert done.returncode == 2, done
    assert "too short: use at least 32 bytes" in done.stderr
    assert done.stdout == "" and "Warning" not in done.stderr
