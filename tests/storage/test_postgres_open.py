"""Opening a PostgreSQL ledger that cannot be opened: said at once, in the server's words,
with the place and the fix, and nothing else on the screen."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.storage.conftest import pg_url

from interlock.errors import StorageError
from interlock.storage.postgres import PostgresStore


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


def resolver(answers: list[int | None]):
    """A host name resolver for the name `ledger.compose`: each lookup takes the next answer
    (an EAI_* error number, or None for the loopback address); other names resolve as usual."""
    real = socket.getaddrinfo
    asked: list[int | None] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "ledger.compose":
            return real(host, port, *args, **kwargs)
        answer = answers[min(len(asked), len(answers) - 1)]
        asked.append(answer)
        if answer is not None:
            raise socket.gaierror(answer, "lookup failed")
        return real("127.0.0.1", port, *args, **kwargs)

    return getaddrinfo, asked


def test_a_host_name_that_cannot_be_looked_up_for_now_is_waited_for(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolver of a container network answers "try again" while the network's containers
    start: the ledger opens once the name resolves, instead of failing a command run then."""
    lookup, asked = resolver([socket.EAI_AGAIN] * 4 + [None])
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    url = pg_database.replace("127.0.0.1", "ledger.compose")
    store = PostgresStore(url, connect_timeout=10)
    try:
        assert store.list_runs() == []
    finally:
        store.close()
    assert socket.EAI_AGAIN in asked and None in asked


def test_a_host_name_that_does_not_exist_is_said_at_once(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No such name: said at the first try, not after the connect timeout."""
    lookup, asked = resolver([socket.EAI_NONAME])
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    began = time.monotonic()
    with pytest.raises(StorageError, match=r"cannot open the ledger: failed to resolve host"):
        PostgresStore(pg_database.replace("127.0.0.1", "ledger.compose"), connect_timeout=10)
    assert time.monotonic() - began < 3
    assert len(asked) <= 2, asked  # psycopg's lookup and the "for now?" one
