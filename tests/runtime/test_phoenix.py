"""A real OpenTelemetry receiver nobody here wrote: Arize Phoenix (run from its own virtualenv,
made by `tests/runtime/phoenix/setup.sh`) receives the trace of a run that `interlock run`
exports through OTLP over HTTP, and shows its model calls as LLM spans with their tokens."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.runtime.tracing import trace_id_of

pytestmark = pytest.mark.slow

VERSION = "20.26.1"  # as tests/runtime/phoenix/setup.sh pins it
ENV = Path(
    os.environ.get("INTERLOCK_PHOENIX_ENV")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "interlock"
    / f"phoenix-{VERSION}"
)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = ENV / "bin" / "phoenix"
    if not binary.exists():
        pytest.fail(f"Phoenix is not installed in {ENV}: run tests/runtime/phoenix/setup.sh")
    work = tmp_path_factory.mktemp("phoenix")
    port = _port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "log").open("w")
    server = subprocess.Popen(
        [str(binary), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # migrations and start: 80 s on a busy 2-core machine
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"Phoenix did not start: {(work / 'log').read_text()[-3000:]}")
                time.sleep(1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_a_runs_trace_reaches_phoenix_with_its_model_calls(phoenix: str, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix, "OTEL_SERVICE_NAME": "t"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "interlock",
            "run",
            "examples/taste.yaml",
            "translate",
            "--topic",
            "How bees navigate",
            "--run-id",
            "bees-1",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    spans: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # Phoenix ingests in the background
        spans = _get(f"{phoenix}/v1/projects/default/spans?limit=100")["data"]
        if any(s["name"] == "run translate" for s in spans):
            break
        time.sleep(1)
    names = sorted(s["name"] for s in spans)
    assert "run translate" in names, names
    assert names.count("chat sonnet") == 2, names  # the translator's and the editor's
    assert {s["context"]["trace_id"] for s in spans} == {f"{trace_id_of('bees-1'):032x}"}
    for chat in (s for s in spans if s["name"] == "chat sonnet"):
        assert chat["span_kind"] == "LLM"
        attributes = chat["attributes"]
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["llm.token_count.total"] == (
            attributes["llm.token_count.prompt"] + attributes["llm.token_count.completion"]
        )
        assert attributes["interlock.run_id"] == "bees-1"
    root = next(s for s in spans if s["name"] == "run translate")
    assert not root.get("parent_id")
    ids = {s["context"]["span_id"] for s in spans}
    assert all(s.get("parent_id") in ids for s in spans if s is not root)
