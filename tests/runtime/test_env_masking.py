"""The values of secret-named `env:` variables are masked in what a failed command leaves
(its error, its logs, the CLI's report, an export); other values stay as they are."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from interlock import Interlock
from interlock.core.state import RunStatus
from interlock.providers.cli_env import secret_named
from interlock.runtime.orchestrator import Settings

TOKEN = "supersecretvalue123"
BUCKET = "my-bucket-name-1234"


def test_secret_named_variables_follow_the_documented_rule() -> None:
    """Names holding TOKEN, KEY, SECRET, PASS..., CREDENTIAL, AUTH, PRIVATE (any case) or
    ending in _PW / _PWD look like secrets; paths and bucket names do not."""
    secret: tuple[str, ...] = (
        "DEPLOY_TOKEN",
        "aws_secret_access_key",
        "DB_PASSWORD",
        "SMTP_PASS",
        "DB_PWD",
    )
    secret += ("ADMIN_PW", "GCP_CREDENTIALS", "AuthHeader", "PRIVATE_PEM", "API_KEY")
    for name in secret:
        assert secret_named(name), name
    for name in ("S3_BUCKET", "DATA_DIR", "HOME_PATH", "REGION", "PWDIR"):
        assert not secret_named(name), name


def test_a_secret_env_value_a_failing_command_prints_is_masked_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_env: dict[str, str]
) -> None:
    """A command given DEPLOY_TOKEN and S3_BUCKET under `env:` that prints both and fails:
    the token is '[redacted]' in the failure, its stderr log, `interlock status` and an
    export, and the bucket name is shown as it is."""
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    monkeypatch.setenv("S3_BUCKET", BUCKET)
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        textwrap.dedent("""
        p:
          phases:
            - id: a
              workers:
                - role: w
                  command: [sh, -c, 'echo "tok=$DEPLOY_TOKEN bucket=$S3_BUCKET" >&2; exit 1']
                  env: [DEPLOY_TOKEN, S3_BUCKET]
                  final: true
        """)
    )
    home = tmp_path / "home"
    app = Interlock(home, settings=Settings(heartbeat=0.05))
    state = app.run(flow, "p", topic="t")
    app.close()
    assert state.status is RunStatus.FAILED
    assert f"tok=[redacted] bucket={BUCKET}" in (state.failure or "")
    logs = list(home.rglob("w@1.1.stderr"))
    assert logs and all(TOKEN not in log.read_text() for log in logs)
    assert BUCKET in logs[0].read_text()
    shown = subprocess.run(
        [sys.executable, "-m", "interlock", "status", state.run_id],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "tok=[redacted]" in shown.stdout + shown.stderr, shown
    bundle = tmp_path / "run.tar.gz"
    exported = subprocess.run(
        [sys.executable, "-m", "interlock", "export", state.run_id, "-o", str(bundle)],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    import tarfile

    with tarfile.open(bundle) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member)
            if data is not None:
                assert TOKEN.encode() not in data.read(), member.name
    everything = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())
    assert TOKEN.encode() not in everything
