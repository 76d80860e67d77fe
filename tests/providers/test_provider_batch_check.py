"""`interlock check` on a worker whose model is sent in batches: a timeout shorter than a
batch can take is a warning naming the fix; a tool loop is a problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .test_provider_batch import write_config

FLOW = """
p:
  phases:
  - id: a
    workers:
    - {role: w, final: true, model: cheap}
"""
TOOLS = """
p:
  phases:
  - id: a
    workers:
    - {role: w, final: true, model: cheap, tools: [{mcp: ["some-server"]}]}
"""


def check(tmp_path: Path, flow: str) -> subprocess.CompletedProcess[str]:
    """`interlock check` of `flow` beside a config with the batch alias `cheap`."""
    write_config(tmp_path, "http://127.0.0.1:9")
    (tmp_path / "flow.yaml").write_text(flow)
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "check",
         str(tmp_path / "flow.yaml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_short_worker_timeout_on_a_batch_model_is_a_warning(tmp_path: Path) -> None:
    """The default 600 s timeout cannot wait for a batch: check says which timeout would."""
    done = check(tmp_path, FLOW)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stderr.split())
    assert "model 'cheap' is sent in batches" in text
    assert "set timeout: 86401 on the worker" in text


def test_tools_on_a_batch_model_are_a_problem(tmp_path: Path) -> None:
    """A tool loop cannot run in batch mode: check refuses it, naming the fix."""
    done = check(tmp_path, TOOLS)
    assert done.returncode != 0
    assert "cannot run the worker's tool loop" in " ".join(done.stderr.split())
