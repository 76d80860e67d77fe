"""Opening a PostgreSQL ledger that cannot be opened: said at once, in the server's words,
with the place and the fix, and nothing else on the screen."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.storage.conftest import pg_url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://nobody:hunter2-canary@127.0.0.1:9/x", "port 9 failed: Connection refused"),
        (pg_url("interlock_no_such_database"), 'database "interlock_no_such_database" does not'),
    ],
)
def test_a_ledger_that_cannot_be_opened_is_said_at_once(
    url: str, says: str, tmp_path: Path
) -> None:
    """Exit 5 (storage) within seconds, not after the pool's 10 s; one line naming the ledger
    (its password left out), what the server said and what to check."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(tmp_path), "--store", url, "runs"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 5, done.stderr
    assert time.monotonic() - began < 8
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: postgresql://") and "cannot open the ledger" in lines[0]
    assert says in lines[0] and "check the URL given with --store or INTERLOCK_STORE" in lines[0]
    assert "hunter2-canary" not in done.stderr + done.stdout
