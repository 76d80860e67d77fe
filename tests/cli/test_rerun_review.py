"""A rerun paused where its source was sent back says how to do the same at no cost."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

FLOW = """\
announce:
  phases:
    - id: draft
      pause_after: true
      workers: [{role: writer, model: m, task: "Draft a note about {{ topic }}."}]
    - id: publish
      workers: [{role: publisher, model: m, final: true, reads: [writer.md], task: "Polish."}]
"""


def test_a_rerun_at_a_review_its_source_rejected_gives_the_free_rejection(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """After a rejection and an edit of a later task, the rerun pauses at the first draft and
    prints the `reject` its source got; running it reuses the revised draft, calling nothing."""
    (tmp_path / "flow.yaml").write_text(FLOW)

    def interlock(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr, result.stderr
        return result

    first = interlock("run", "flow.yaml", "announce", "-t", "a ferry")
    source = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("run "))
    feedback = "Mention the 'opening' date"
    assert interlock("reject", source, "--to", "draft", "-m", feedback).returncode == 3
    assert interlock("approve", source).returncode == 0
    (tmp_path / "flow.yaml").write_text(FLOW.replace("Polish.", "Polish; 100 words."))
    rerun = interlock("rerun", source, "--workflow", "flow.yaml")
    assert rerun.returncode == 3, rerun.stderr
    note = next(line for line in rerun.stderr.splitlines() if line.startswith("note: at this"))
    assert f"was sent back to 'draft' with {feedback!r}" in note
    command = shlex.split(note.split("at no cost: ", 1)[1])
    assert command[:2] == ["interlock", "reject"] and command[-1] == feedback
    again = interlock(*command[1:])
    assert again.returncode == 3, again.stderr
    assert "0 task(s) completed, 2 reused" in again.stderr
    assert "note: at this review" not in again.stderr  # the source approved the second draft
