"""A reader that closes a driving command's stdout (`| head -1`) stops the output, not the
work: `run`, `resume`, `batch` and `batch resume` go on to their end with stdout discarded,
say so once on stderr, and exit with their usual code."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from interlock import Interlock
from interlock.core.batches import RowInputs
from interlock.core.loader import load_workflow
from interlock.workloads.batches import record_batch

# The worker of a run with n != 1 waits on a FIFO, which the test opens only once it has
# closed its end of stdout: what the command prints after that meets a closed pipe.
WORKFLOW = """\
slow:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: write
      workers:
        - role: writer
          final: true
          command:
            - sh
            - -c
            - '[ "$1" = 1 ] || cat "$2" > /dev/null; echo "row $1" > "$3"'
            - sh
            - "{{ n }}"
            - FIFO
            - "{output}"
"""


def setup(tmp_path: Path) -> Path:
    """The workflow and its FIFO in `tmp_path`; the FIFO's path."""
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    (tmp_path / "wf.yaml").write_text(WORKFLOW.replace("FIFO", str(fifo)))
    (tmp_path / "rows.csv").write_text("topic,n\nfirst,1\nsecond,2\n")
    return fifo


def read_one_line_then_close(
    env: dict[str, str], cwd: Path, fifo: Path, *args: str
) -> tuple[int, str]:
    """Start the command, read one line of its stdout, close the pipe, then let the waiting
    worker go on; the exit code and stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        assert first, process.stderr.read()
        process.stdout.close()
        # Opened once the worker reads it; the worker goes on when it is closed.
        gate = threading.Thread(target=lambda: open(fifo, "w").close(), daemon=True)
        gate.start()
        stderr = process.stderr.read()
        code = process.wait(timeout=120)
    # A command that ended before its worker read the FIFO leaves the opener blocked: a
    # reader of our own lets it through.
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    gate.join(timeout=60)
    return code, stderr


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_run_goes_on_to_its_end_when_its_output_is_closed(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`interlock run ... | head -1`: the run is delivered and the command exits 0."""
    fifo = setup(tmp_path)
    code, stderr = read_one_line_then_close(
        cli_env, tmp_path, fifo, "run", "wf.yaml", "-t", "x", "-i", "n=2", "--run-id", "r1"
    )
    assert code == 0, stderr
    assert "output closed: the work goes on to its end" in stderr
    assert "Traceback" not in stderr
    assert "delivered" in interlock(cli_env, tmp_path, "status", "r1").stdout


def test_resume_goes_on_to_its_end_when_its_output_is_closed(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`interlock resume RUN | head -1` drives the run to its end, exit 0."""
    fifo = setup(tmp_path)
    submitted = interlock(cli_env, tmp_path, "submit", "wf.yaml", "-t", "x", "-i", "n=2")
    run_id = submitted.stdout.strip()
    assert submitted.returncode == 0 and run_id, submitted.stderr
    code, stderr = read_one_line_then_close(cli_env, tmp_path, fifo, "resume", run_id)
    assert code == 0, stderr
    assert "delivered" in interlock(cli_env, tmp_path, "status", run_id).stdout


def test_batch_goes_on_to_its_end_when_its_output_is_closed(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`interlock batch ... | head -1`: every row is delivered (none left 'running (not
    driven)') and the command exits 0, the batch's own code."""
    fifo = setup(tmp_path)
    code, stderr = read_one_line_then_close(
        cli_env, tmp_path, fifo,
        "batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "hd", "--concurrency", "1",
    )  # fmt: skip
    assert code == 0, stderr
    assert stderr.count("output closed:") == 1
    shown = interlock(cli_env, tmp_path, "batch", "status", "hd").stdout
    assert "2/2 done, 2 delivered" in shown, shown


def test_batch_resume_goes_on_to_its_end_when_its_output_is_closed(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`interlock batch resume B | head -1` drives every row to its end, exit 0."""
    fifo = setup(tmp_path)
    app = Interlock(cli_env["INTERLOCK_HOME"])
    definition = load_workflow(tmp_path / "wf.yaml").get("slow")
    rows = [RowInputs(number=n, topic=f"t{n}", inputs={"n": n}) for n in (1, 2)]
    record_batch(
        app, definition, rows, batch_id="later", inputs_file="rows.csv", concurrency=1,
        max_cost_usd=None, now=time.time(),
    )  # fmt: skip
    app.close()
    code, stderr = read_one_line_then_close(cli_env, tmp_path, fifo, "batch", "resume", "later")
    assert code == 0, stderr
    shown = interlock(cli_env, tmp_path, "batch", "status", "later").stdout
    assert "2/2 done, 2 delivered" in shown, shown
