"""The container deployment, built and run: deploy/build.sh builds the images from Debian's
packages and the wheel, deploy/compose.yaml starts PostgreSQL, `serve`, `orchestrate` and two
workers, and a run started over serve's API and one recorded with `interlock submit` are
delivered, their tasks shared by both workers.

The images are kept between runs (deploy/build.sh builds again only what changed): the
first build takes about ten minutes (debootstrap), later ones seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
IMAGE = "localhost/interlock:0.2.0"
PARTS = 6  # the sample pipeline's default: its write phase has six tasks


def podman_compose() -> str:
    """podman-compose of the dev group (beside this Python, or on PATH)."""
    beside = Path(sys.executable).with_name("podman-compose")
    found = str(beside) if beside.exists() else shutil.which("podman-compose")
    if found is None:
        pytest.fail(
            "podman-compose is missing: pip install --group dev (or pip install podman-compose)"
        )
    return found


def need_tools() -> None:
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: the deployment test builds and runs containers"
            " (apt-get install podman runc debootstrap)"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """One compose project of deploy/compose.yaml, under a name of its own."""

    def __init__(self, compose: str, env: dict[str, str], port: int) -> None:
        self.compose = compose
        self.env = env
        self.project = f"interlock-test-{os.getpid()}"
        self.base = f"http://127.0.0.1:{port}"
        self.token = ""

    def run(self, *args: str, timeout: float = 300) -> str:
        cmd = [self.compose, "-p", self.project, "-f", str(DEPLOY / "compose.yaml"), *args]
        done = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"{' '.join(args)}: {done.returncode}\n{done.stderr[-3000:]}"
        return done.stdout

    def exec(self, service: str, *command: str) -> str:
        return self.run("exec", "-T", service, *command).strip()

    def api(self, method: str, path: str, body: object = None) -> object:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"authorization": f"Bearer {self.token}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
        return json.loads(text) if answer.headers.get_content_type() == "application/json" else text


def wait_until(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out after {seconds:g} s waiting for {what}"
        time.sleep(1)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    need_tools()
    compose = podman_compose()
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(DEPLOY / "containers.conf"))
    env["PYTHON"] = sys.executable
    built = subprocess.run(
        [str(DEPLOY / "build.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=2000,
        check=False,
    )
    assert built.returncode == 0, f"deploy/build.sh: {built.returncode}\n{built.stderr[-3000:]}"
    print(built.stdout)
    port = free_port()
    env.update(
        POSTGRES_PASSWORD="test-" + os.urandom(8).hex(),
        INTERLOCK_AUTH_SECRET=os.urandom(32).hex(),
        INTERLOCK_PORT=str(port),
    )
    stack = Stack(compose, env, port)
    try:
        stack.run("up", "-d")
        yield stack
    finally:
        logs = subprocess.run(
            [compose, "-p", stack.project, "-f", str(DEPLOY / "compose.yaml"), "logs"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        print(logs.stdout[-20000:], logs.stderr[-5000:])
        stack.run("down", "-v")


def health(stack: Stack) -> bool:
    try:
        with urllib.request.urlopen(stack.base + "/api/health", timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def submit_when_named(stack: Stack, seconds: float = 180) -> str:
    """`interlock submit` in the orchestrate container, tried again while the container
    network's resolver cannot name `postgres` yet (podman's DNS answers "try again" for a
    while as the stack's containers start and restart)."""
    cmd = [stack.compose, "-p", stack.project, "-f", str(DEPLOY / "compose.yaml"), "exec", "-T"]
    cmd += ["orchestrate", "interlock", "submit", "/workflows/hello.yaml", "hello"]
    cmd += ["--topic", "waves"]
    deadline = time.monotonic() + seconds
    while True:
        done = subprocess.run(
            cmd, env=stack.env, capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode == 0:
            return done.stdout.strip()
        lookup = "Temporary failure in name resolution" in done.stderr
        assert lookup and time.monotonic() < deadline, f"submit: {done.returncode}\n{done.stderr}"
        time.sleep(2)


def test_the_stack_delivers_runs_over_both_workers(stack: Stack) -> None:
    """Runs started over the API and with `interlock submit` are delivered by the stack."""
    # The image: interlock runs as a user of its own, and the image stays small.
    env = stack.env
    user = subprocess.run(
        ["podman", "run", "--rm", "--network", "none", "--entrypoint", "id", IMAGE, "-u"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert user.stdout.strip() == "10001"
    size = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", IMAGE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert int(size.stdout) < 250_000_000, f"{IMAGE} is {int(size.stdout) / 1e6:.0f} MB"

    wait_until(lambda: health(stack), 300, "serve to answer /api/health")
    stack.token = stack.exec("serve", "interlock", "serve", "--issue-token", "read,operate")
    served = stack.api("POST", "/api/runs", {"pipeline": "hello", "topic": "tides"})
    assert isinstance(served, dict)
    submitted = submit_when_named(stack).splitlines()[-1]
    runs = {served["run_id"]: "tides", submitted: "waves"}

    def status(run_id: str) -> str:
        run = stack.api("GET", f"/api/runs/{run_id}")
        assert isinstance(run, dict)
        assert run["status"] not in ("failed", "cancelled"), run
        return str(run["status"])

    wait_until(lambda: all(status(r) == "delivered" for r in runs), 300, "both runs delivered")
    for run_id, topic in runs.items():
        final = stack.api("GET", f"/api/runs/{run_id}/outputs/final.md")
        assert final == "".join(f"Part {i} about {topic}\n" for i in range(1, PARTS + 1))

    # Every task of both runs (a plan, six parts, a merge each) was run by a worker, and
    # each of the two workers ran some.
    done = stack.exec(
        "postgres",
        "psql",
        "-U",
        "interlock",
        "-At",
        "-F",
        " ",
        "-c",
        "SELECT worker, count(*) FROM task_queue WHERE state = 'done' GROUP BY 1",
    )
    by_worker = {line.split()[0]: int(line.split()[1]) for line in done.splitlines()}
    assert len(by_worker) == 2, done
    assert sum(by_worker.values()) == 2 * (PARTS + 2), done
