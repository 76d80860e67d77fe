"""`interlock serve` and `interlock watch` as people run them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
from tests.server.helpers import SECRET

CLI = [sys.executable, "-c", "from interlock.cli.main import main; main()"]
WORKFLOW = """
echo:
  phases:
    - id: say
      workers:
        - role: speaker
          final: true
          command: ["{python}", "-c", "import time; time.sleep(0.3); print('said: {{ topic }}')"]
"""


def test_serve_then_watch_through_the_server_and_the_store(tmp_path: Path) -> None:
    """A served run is followed to the end by `watch`, over the WebSocket and from the store."""
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    env = {**os.environ, "INTERLOCK_HOME": str(tmp_path / "home")}
    serve = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "-w", "wf.yaml"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stderr is not None
        line = serve.stderr.readline()
        url = line.split("serving on ")[1].strip().removesuffix("/ui/")
        deadline = time.time() + 10
        while True:
            try:
                httpx.get(f"{url}/api/health").raise_for_status()
                break
            except httpx.HTTPError:
                assert time.time() < deadline, "the server did not answer"
                time.sleep(0.1)
        started = httpx.post(f"{url}/api/runs", json={"pipeline": "echo", "topic": "hi"})
        run_id = started.json()["run_id"]
        watched = subprocess.run(
            [*CLI, "watch", run_id, "--server", url],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert watched.returncode == 0, watched.stderr
        lines = watched.stdout.splitlines()
        assert "run of echo created: hi" in lines[0]
        assert "delivered" in lines[-1] and "100%" in watched.stdout
    finally:
        serve.terminate()
        serve.wait(15)
        if serve.stderr is not None:
            serve.stderr.close()
    assert serve.returncode in (0, -15)  # uvicorn re-raises SIGTERM after a graceful stop
    local = subprocess.run(
        [*CLI, "watch", run_id[:12]], env=env, capture_output=True, text=True, timeout=30
    )
    assert local.returncode == 0 and local.stdout.splitlines() == lines


def test_issue_token_and_refuse_open_serving(tmp_path: Path) -> None:
    """`serve --issue-token` prints a signed token; an open address without auth is refused."""
    env = {**os.environ, "INTERLOCK_HOME": str(tmp_path), "INTERLOCK_AUTH_SECRET": SECRET}
    issued = subprocess.run(
        [*CLI, "serve", "--issue-token", "read,operate"], env=env, capture_output=True, text=True
    )
    claims = jwt.decode(issued.stdout.strip(), SECRET, algorithms=["HS256"])
    assert claims["scope"] == "read operate"
    del env["INTERLOCK_AUTH_SECRET"]
    refused = subprocess.run(
        [*CLI, "serve", "--host", "0.0.0.0", "--port", "0"], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "needs auth" in refused.stderr
