"""`interlock serve` on a port already in use says so with a usage exit code, not an
internal error; at start it names the configuration its workflows use."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.server.test_pipeline_not_found import FLOW

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


def test_serve_names_each_workflow_folders_configuration_and_that_it_is_read_once(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """At start the server says which interlock.toml the runs of each workflow folder use and
    that a change to it needs a restart, rather than keeping the file it read without a word."""
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "flow.yaml").write_text(FLOW)
    (folder / "interlock.toml").write_text('[models.m]\nprovider = "offline"\n')
    said: list[str] = []
    flow = str(folder / "flow.yaml")
    with subprocess.Popen(
        [sys.executable, "-m", "interlock", "serve", "--port", "0", "-w", flow],
        env=cli_env, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    ) as server:  # fmt: skip
        try:
            assert server.stderr is not None
            while not said or not said[-1].startswith("note:"):
                line = server.stderr.readline()
                assert line, "".join(said)  # the server ended before saying it
                said.append(line)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert f"{folder}: config: {folder / 'interlock.toml'}\n" in said, said
    assert "restart the server to apply a change to it" in said[-1]
