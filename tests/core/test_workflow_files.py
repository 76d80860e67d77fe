"""A loaded workflow names every file it was read from, with the SHA-256 of the bytes read,
so that a long-lived process can tell whether loading it again would give the same
definitions without parsing it again (`unchanged`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from interlock.core.loader import load_workflow, parse_workflow, unchanged
from interlock.errors import WorkflowError

MAIN = """
parent:
  phases:
    - id: one
      workers:
        - {role: scorer, model: m, task: "Score {{ topic }}", schema: score.json}
    - id: two
      workers:
        - {role: kid, pipeline: "child.yaml#child", final: true}
"""
CHILD = """
child:
  phases:
    - id: only
      workers:
        - {role: writer, model: m, task: "Write", final: true}
"""
SCHEMA = '{"type": "object", "properties": {"score": {"type": "number"}}}'


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "main.yaml").write_text(MAIN)
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "score.json").write_text(SCHEMA)
    return tmp_path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_loaded_workflow_names_each_file_it_read(folder: Path) -> None:
    """The workflow file, the schema file it names and the sub-pipeline's file, each with
    the SHA-256 of its bytes."""
    workflow = load_workflow(folder / "main.yaml")
    names = {Path(name).name: digest for name, digest in workflow.files}
    assert names == {
        "main.yaml": sha(folder / "main.yaml"),
        "score.json": sha(folder / "score.json"),
        "child.yaml": sha(folder / "child.yaml"),
    }
    assert unchanged(workflow)


@pytest.mark.parametrize("name", ["main.yaml", "score.json", "child.yaml"])
def test_any_edit_of_any_file_read_counts_even_with_the_same_size_and_time(
    folder: Path, name: str
) -> None:
    """A one-character edit that keeps the size and the modification time (what two quick
    saves can look like) is seen; so is a file removed."""
    workflow = load_workflow(folder / "main.yaml")
    path = folder / name
    before = path.stat()
    text = path.read_text()
    edited = text.replace("m", "n", 1) if name != "score.json" else text.replace("number", "string")
    if name == "score.json":  # keep the size: "number" and "string" are both 6 letters
        assert len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert not unchanged(workflow)
    path.write_text(text)
    assert unchanged(workflow)
    path.unlink()
    assert not unchanged(workflow)


def test_a_workflow_given_as_text_is_never_taken_as_unchanged() -> None:
    """Nothing on disk says what it was read from: it is loaded again each time."""
    workflow = parse_workflow(CHILD)
    assert workflow.files == () and not unchanged(workflow)


def test_a_file_that_fails_to_load_records_nothing(folder: Path) -> None:
    """A broken schema file is the load's error, as before."""
    (folder / "score.json").write_text("{not json")
    with pytest.raises(WorkflowError, match=r"score\.json is not JSON"):
        load_workflow(folder / "main.yaml")
