"""A payload's workflow folder, as a worker machine finds it."""

from __future__ import annotations

from pathlib import Path

from interlock.distributed.payload import local_folder


def test_a_workflow_folder_is_used_only_where_it_exists(tmp_path: Path) -> None:
    """A folder this machine has is handed to executors; one it lacks is not, and is found
    once it appears (only folders found are remembered)."""
    there, later = tmp_path / "here", tmp_path / "later"
    there.mkdir()
    assert local_folder(str(there)) == there
    assert local_folder(str(there)) is local_folder(str(there))
    assert local_folder(str(later)) is None
    later.mkdir()
    assert local_folder(str(later)) == later
    assert local_folder(None) is None and local_folder("") is None
