"""Helpers for runtime tests: write a workflow file, open an app on a fresh state directory."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interlock import Interlock
from interlock.runtime.orchestrator import Settings

WriteWorkflow = Callable[[str], Path]


@pytest.fixture
def write_workflow(tmp_path: Path) -> WriteWorkflow:
    """Write YAML text to a workflow file in the test's directory."""

    def write(text: str) -> Path:
        path = tmp_path / "workflow.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    return write


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Interlock]:
    """An API object on a fresh state directory, with a fast heartbeat."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_HOME", "INTERLOCK_STORE"):
        monkeypatch.delenv(name, raising=False)
    instance = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05, lease_ttl=5))
    yield instance
    instance.close()
