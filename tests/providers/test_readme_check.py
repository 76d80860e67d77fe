"""The optional check that runs the README's pipelines against a real model server
(`tests/providers/llamacpp/readme_check.sh`, docs/local-servers.md), run here against the fake
server in place of llama-server: every step it takes works, over both wire formats, on a
server it is pointed at or one it starts and stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import API_KEY
from .fake_llm_server import FakeServer

SCRIPT = Path(__file__).resolve().parent / "llamacpp" / "readme_check.sh"
STUB = SCRIPT.with_name("stub_llama_server.py")


def _stub(tmp_path: Path) -> str:
    """An executable that starts the stand-in for llama-server with this Python."""
    stub = tmp_path / "llama-server"
    stub.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STUB}" "$@"\n')
    stub.chmod(0o755)
    return str(stub)


def test_the_readme_check_delivers_every_run_over_both_wire_formats(
    cli_env: dict[str, str], tmp_path: Path, server: FakeServer
) -> None:
    """Pointed at a running server, the script runs the README's pipelines, batch and
    experiment, and one run over the Messages route: all 15 runs are delivered."""
    env = {
        **cli_env,
        "TMPDIR": str(tmp_path),
        "INTERLOCK_LLAMA_URL": server.url,
        "INTERLOCK_LLAMA_KEY": API_KEY,
        "INTERLOCK_LLAMA_MODEL": "gpt-test",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[readme-check] ok: 15 runs delivered" in done.stdout, done.stdout
    paths = {r.path for r in server.state.requests}
    assert {"/v1/chat/completions", "/v1/messages"} <= paths, paths
    assert list(tmp_path.glob("interlock-readme-check.*")) == []  # nothing left behind


def test_without_a_model_or_a_server_it_says_how_to_run_it(cli_env: dict[str, str]) -> None:
    """Given neither a model file nor a running server, it prints its usage and exits 2."""
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=cli_env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "usage: tests/providers/llamacpp/readme_check.sh MODEL.gguf" in done.stderr
    assert "INTERLOCK_LLAMA_URL=" in done.stderr


def test_given_a_model_it_starts_the_server_and_stops_it_after(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Given a model file, it starts `llama-server` (here the stand-in, as LLAMA_SERVER) on a
    free port, waits for its health check, runs every step and stops the server."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    env = {**cli_env, "TMPDIR": str(tmp_path), "LLAMA_SERVER": _stub(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        ["bash", str(SCRIPT), str(model)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[readme-check] ok: 15 runs delivered" in done.stdout, done.stdout
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(STUB) not in running.stdout  # the server it started is gone


def test_a_server_that_ends_at_start_is_said_with_its_log(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A model llama-server cannot load: the check fails at once, naming the server's log."""
    env = {**cli_env, "TMPDIR": str(tmp_path), "LLAMA_SERVER": _stub(tmp_path)}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "missing.gguf")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "[readme-check] llama-server ended at start: see " in done.stderr, done.stderr
    log = Path(done.stderr.split("see ", 1)[1].strip())
    assert "failed to load model" in log.read_text()
