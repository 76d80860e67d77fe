"""`interlock serve` on a port already in use says so with a usage exit code, not an
internal error."""

from __future__ import annotations

import socket
import subprocess
import sys

from interlock.errors import ExitCode


def test_a_port_in_use_is_a_clear_error_not_an_internal_one(cli_env: dict[str, str]) -> None:
    """Another listener on the port: exit 2 naming the port and the fix, no traceback."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        result = subprocess.run(
            [sys.executable, "-m", "interlock", "serve", "--port", str(port)],
            env=cli_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        taken.close()
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert f"cannot serve on 127.0.0.1:{port}: the port is in use" in result.stderr
    assert "--port" in result.stderr and "Traceback" not in result.stderr
