"""`interlock check` on a worker whose model is sent in batches: streaming is a warning, a
tool loop a problem; the worker's timeout needs no room for the batch."""

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


def test_the_default_timeout_on_a_batch_model_needs_no_warning(tmp_path: Path) -> None:
    """The time a call waits in a batch counts in no timeout: the default 600 s is enough,
    and check says nothing of it."""
    done = check(tmp_path, FLOW)
    assert done.returncode == 0, done.stderr
    assert "sent in batches" not in done.stderr


def test_streaming_on_a_batch_model_is_a_warning(tmp_path: Path) -> None:
    """A batch answers all at once: check says `stream = true` is not honoured."""
    config = write_config(tmp_path, "http://127.0.0.1:9")
    config.write_text(config.read_text().replace("batch = true", "batch = true\nstream = true", 1))
    (tmp_path / "flow.yaml").write_text(FLOW)
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "check",
         str(tmp_path / "flow.yaml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "is sent in batches: stream = true is not honoured" in " ".join(done.stderr.split())


def test_tools_on_a_batch_model_are_a_problem(tmp_path: Path) -> None:
    """A tool loop cannot run in batch mode: check refuses it, naming the fix."""
    done = check(tmp_path, TOOLS)
    assert done.returncode != 0
    assert "cannot run the worker's tool loop" in " ".join(done.stderr.split())


def test_tools_on_a_worker_with_batch_true_are_a_problem(tmp_path: Path) -> None:
    """The worker asks for batches of a direct alias: check refuses its tool loop, saying
    where the batch mode comes from."""
    flow = TOOLS.replace("model: cheap,", "model: direct, batch: true,")
    done = check(tmp_path, flow)
    assert done.returncode != 0
    text = " ".join(done.stderr.split())
    assert "model 'direct' is sent in batches (the worker's batch: true)" in text


def test_a_batch_window_without_batch_true_is_refused(tmp_path: Path) -> None:
    """`batch_window` on a worker that does not say `batch: true`: refused, naming the fix."""
    done = check(tmp_path, FLOW.replace("model: cheap}", "model: direct, batch_window: 10m}"))
    assert done.returncode != 0
    text = " ".join(done.stderr.split())
    assert "'batch_window' and 'batch_max' need 'batch: true' on the worker" in text
    assert "flow.yaml" in text and "Traceback" not in text


def test_a_worker_may_opt_out_of_its_alias_batches(tmp_path: Path) -> None:
    """`batch: false` on a worker of a batch alias with tools: its calls go one by one, so
    the tool loop is no problem."""
    done = check(tmp_path, TOOLS.replace("model: cheap,", "model: cheap, batch: false,"))
    assert "sent in batches" not in done.stderr


def test_a_batch_window_past_24_hours_is_a_warning_naming_file_and_line(tmp_path: Path) -> None:
    """A window longer than a provider batch may take (24 h) is said at `check`, at the
    line that sets it: the alias's in interlock.toml, the worker's in the workflow file;
    24 hours is no warning."""
    config = write_config(tmp_path, "http://127.0.0.1:9", window='"25h"')
    line = config.read_text().splitlines().index('batch_window = "25h"') + 1
    (tmp_path / "flow.yaml").write_text(FLOW)
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "check",
         str(tmp_path / "flow.yaml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert (
        f"warning: {config}, line {line}: batch_window of [models.cheap] is 25 h (90000 s), "
        "longer than a provider batch may take to complete (24 h)"
    ) in said
    worker = "    - {role: w, final: true, model: direct, batch: true, batch_window: 1d}\n"
    done = check(tmp_path, FLOW.replace("    - {role: w, final: true, model: cheap}\n", worker))
    assert done.returncode == 0, done.stderr
    assert "longer than a provider batch" not in done.stderr
    late = worker.replace("1d", "90000")
    done = check(tmp_path, FLOW.replace("    - {role: w, final: true, model: cheap}\n", late))
    said = " ".join(done.stderr.split())
    assert (
        f"{tmp_path / 'flow.yaml'}, line 6: pipeline 'p', worker 'w': batch_window is 25 h "
        "(90000 s), longer than a provider batch may take to complete (24 h)"
    ) in said
