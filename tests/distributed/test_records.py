"""What a remote attempt records beside its output (a model call's prompt, a command's
logs) reaches the run's folder on the orchestrator, as for an attempt run there."""

from __future__ import annotations

from pathlib import Path

from tests.distributed.helpers import Processes, statuses, wait_until

from interlock.distributed import submit
from interlock.distributed.payload import RECORD_LIMIT, keep_records
from interlock.distributed.worker import _records

FLOW = """
logged:
  phases:
    - id: one
      workers:
        - role: talker
          command: ["sh", "-c", "echo said on stdout; echo said on stderr >&2; echo ok > {output}"]
          final: true
"""


def test_a_remote_commands_logs_reach_the_runs_folder(procs: Processes, tmp_path: Path) -> None:
    """A command run by a worker process: its stdout and stderr are in the delivered run's
    folder on the orchestrator, under `logs/`, as a local run leaves them."""
    flow = tmp_path / "logged.yaml"
    flow.write_text(FLOW)
    run_id = submit(procs.url, flow, topic="t", home=procs.root / "submitter")
    procs.orchestrator("o")
    procs.worker("w")
    wait_until(lambda: statuses(procs.url).get("delivered") == 1, 60, "the run delivered")
    logs = procs.home / "archive" / run_id / "logs"
    wait_until(lambda: logs.is_dir(), 10, "the logs kept")
    assert (logs / "talker@1.1.stdout").read_text() == "said on stdout\n"
    assert (logs / "talker@1.1.stderr").read_text() == "said on stderr\n"


def test_records_are_read_from_a_work_folder(tmp_path: Path) -> None:
    """Prompts and logs, by their path in the run's folder; a long one keeps its end, where
    a failure shows; other folders and a folder that is not there are left alone."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "w@1.1.md").write_text("the prompt")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "c@1.2.stderr").write_bytes(b"x" * RECORD_LIMIT + b"\xff the end")
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "a.md").write_text("an input")
    found = _records(tmp_path)
    assert set(found) == {"prompts/w@1.1.md", "logs/c@1.2.stderr"}
    assert found["prompts/w@1.1.md"] == "the prompt"
    tail = found["logs/c@1.2.stderr"]
    assert tail.startswith("[the first 9 bytes are left out]\n") and tail.endswith(" the end")
    assert _records(tmp_path / "nothing here") == {}


def test_only_records_are_kept_from_a_result(tmp_path: Path) -> None:
    """A result is data from another machine: a path out of the record folders, a name that
    climbs out, or a body that is not text is refused (and said), the rest written."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    problems = keep_records(
        run_dir,
        {
            "prompts/w@1.1.md": "the prompt",
            "prompts/../../escaped": "no",
            "prompts/..": "no",
            "logs/": "no",
            "status.json/x": "no",
            "logs/c@1.1.stdout": 42,
        },
    )
    assert (run_dir / "prompts" / "w@1.1.md").read_text() == "the prompt"
    assert len(problems) == 5 and all("not a record" in p for p in problems)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["w@1.1.md"]
    assert keep_records(run_dir, ["prompts/x"]) == ["records that are not a mapping"]
