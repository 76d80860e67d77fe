"""The server looks at its workflow files again for every run it starts: an edit takes
effect at once, and an unchanged file is not parsed and validated again."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.server.test_pipeline_not_found import FLOW

from interlock.core import loader
from interlock.errors import WorkflowError
from interlock.server.workflows import Workflows


def test_an_unchanged_file_is_not_loaded_again_and_an_edited_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    loads: list[Path] = []
    real = loader.load_workflow

    def counted(path: Path) -> loader.Workflow:
        loads.append(path)
        return real(path)

    monkeypatch.setattr("interlock.server.workflows.load_workflow", counted)
    workflows = Workflows([flow])
    first = workflows.get("announce")
    assert workflows.get("announce") is first and workflows.describe()
    assert len(loads) == 1

    flow.write_text(FLOW.replace('"hi"', '"ho"'))  # the same size: only the bytes differ
    edited = workflows.get("announce")
    assert len(loads) == 2 and edited.hash != first.hash
    assert '"ho"' in edited.canonical

    flow.write_text(FLOW.replace("phases", "phase"))
    with pytest.raises(WorkflowError, match="phase"):
        workflows.get("announce")
    with pytest.raises(WorkflowError):  # still broken: never served from the last good load
        workflows.get("announce")
    flow.write_text(FLOW)
    assert workflows.get("announce").hash == first.hash
