"""`explain --prompt` finds the prompts of a role or a task id exactly, in the order sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock.errors import UsageError
from interlock.runtime.explain import prompts


def folder_with(tmp_path: Path, *names: str) -> Path:
    (tmp_path / "prompts").mkdir()
    for name in names:
        (tmp_path / "prompts" / name).write_text(name)
    return tmp_path


def test_a_role_shows_every_visit_in_order_and_no_other_role(tmp_path: Path) -> None:
    """`--prompt polisher` lists visits 1, 2 and 10 in that order (not as text sorts them),
    a retry after its first attempt, the tool calls after their prompt, and neither
    `polisher-b`'s prompts nor files that are not prompts."""
    run_dir = folder_with(
        tmp_path,
        "polisher@10.1.md",
        "polisher@2.1.md",
        "polisher@1.2.md",
        "polisher@1.1.md",
        "polisher@1.1.tools.md",
        "polisher-b@1.1.md",
        "polisher@1.1.md.tmp",
        "notes.md",
    )
    shown = [name for name, _ in prompts(run_dir, "polisher")]
    assert shown == [
        "polisher@1.1",
        "polisher@1.1.tools",
        "polisher@1.2",
        "polisher@2.1",
        "polisher@10.1",
    ]


def test_a_task_id_shows_its_attempts_only(tmp_path: Path) -> None:
    """`--prompt w@1` is visit 1 (not 10), `--prompt w@1.3` the third item of a fan-out."""
    run_dir = folder_with(tmp_path, "w@1.1.md", "w@1.2.md", "w@10.1.md", "w@1.3.1.md")
    assert [name for name, _ in prompts(run_dir, "w@1")] == ["w@1.1", "w@1.2"]
    assert [name for name, _ in prompts(run_dir, "w@1.3")] == ["w@1.3.1"]
    assert prompts(run_dir, "w@1")[0][1] == "w@1.1.md"


def test_nothing_recorded_is_said_in_words(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no prompt was recorded for .w@1. in this run"):
        prompts(tmp_path, "w@1")
    run_dir = folder_with(tmp_path, "w@1.1.md")
    with pytest.raises(UsageError, match="no prompt was recorded for 'w@2'"):
        prompts(run_dir, "w@2")


def test_a_task_with_no_prompt_names_those_that_have_one(tmp_path: Path) -> None:
    """`--prompt writer@9` of a run of three visits, or a role that is not there, lists the
    tasks whose prompts were recorded, in order."""
    run_dir = folder_with(tmp_path, "writer@1.1.md", "writer@2.1.md", "writer@10.1.md")
    with pytest.raises(UsageError) as raised:
        prompts(run_dir, "writer@9")
    assert "prompts were recorded for writer@1, writer@2, writer@10 (give a role" in str(
        raised.value
    )


def test_a_heading_says_the_task_and_its_attempt() -> None:
    from interlock.runtime.explain import prompt_heading

    assert prompt_heading("writer@2.1") == "writer@2, attempt 1"
    assert prompt_heading("w@1.3.2") == "w@1.3, attempt 2"
    assert prompt_heading("w@1.1.tools") == "w@1, attempt 1: tool calls"
