"""`.ci/services`, which the README's test command runs the suite under: throwaway PostgreSQL
and Redis where none answers, the running ones where they do, a failure where neither can be
had. Real servers on free ports; the shared services are never touched."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / ".ci" / "services"

PROBE = """
import os, psycopg, redis
with psycopg.connect(os.environ["INTERLOCK_TEST_PG"], connect_timeout=5) as db:
    assert db.execute("SELECT 1").fetchone() == (1,)
assert redis.Redis.from_url(os.environ["INTERLOCK_TEST_REDIS"]).ping()
print("PG", os.environ["INTERLOCK_TEST_PG"])
print("REDIS", os.environ["INTERLOCK_TEST_REDIS"])
"""


def closed_port() -> int:
    """A port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    """Whether something listens on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def services(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    """Run COMMAND under `.ci/services`."""
    return subprocess.run(
        ["bash", str(SERVICES), *command],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_starts_throwaway_services_and_stops_them(tmp_path: Path) -> None:
    """With nothing at the configured ports, PostgreSQL and Redis are started on free ports
    in a scratch directory, the command reaches both, and both are gone afterwards."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.update(INTERLOCK_CI_PG_PORT=str(closed_port()), INTERLOCK_CI_REDIS_PORT=str(closed_port()))
    result = services(env, sys.executable, "-c", PROBE)
    assert result.returncode == 0, result.stderr
    assert "started a throwaway PostgreSQL" in result.stderr
    assert "started a throwaway Redis" in result.stderr
    ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", result.stdout)]
    assert len(ports) == 2 and 5432 not in ports and 6379 not in ports
    assert not any(answers(port) for port in ports)
    assert list(tmp_path.iterdir()) == []  # the scratch directory is removed


def test_uses_services_that_answer(tmp_path: Path) -> None:
    """Services already answering at the configured ports are used, and left running."""
    env = dict(os.environ, INTERLOCK_CI_PG_PORT="5432", INTERLOCK_CI_REDIS_PORT="6379")
    env["TMPDIR"] = str(tmp_path)
    result = services(env, sys.executable, "-c", PROBE)
    assert result.returncode == 0, result.stderr
    assert "127.0.0.1:5432/postgres" in result.stdout and "127.0.0.1:6379/7" in result.stdout
    assert "throwaway" not in result.stderr
    assert answers(5432) and answers(6379)


def test_fails_when_a_service_cannot_be_had(tmp_path: Path) -> None:
    """Without Redis and without a way to install it, the command is not run and the exit
    status says so: the tests never run without their services."""
    tools = tmp_path / "bin"
    tools.mkdir()
    needed = "python3 mktemp chmod mkdir rm cat seq sleep id dirname ls sort tail kill runuser"
    for name in [*needed.split(), "chown", "env", "bash", "test"]:
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    env = dict(os.environ, PATH=str(tools), TMPDIR=str(tmp_path))
    env.update(INTERLOCK_CI_PG_PORT="5432", INTERLOCK_CI_REDIS_PORT=str(closed_port()))
    marker = tmp_path / "ran"
    result = services(env, "bash", "-c", f": > {marker}")
    assert result.returncode != 0
    assert "cannot install redis-server" in result.stderr
    assert not marker.exists()
