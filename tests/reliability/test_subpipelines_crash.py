"""Crash points inside a child run, armed in the real CLI: killed there, resumed, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from .subpipeline_crash import POINTS, one_iteration, write_flow


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_while_a_child_runs_loses_nothing(point: str, tmp_path: Path) -> None:
    """Killed at `point` (in the run that pauses in the child, or in the approval that goes
    on), then resumed and approved: parent and child deliver once, the child is approved
    once, only one child exists, and the parent's task holds the child's final output."""
    flow = write_flow(tmp_path)
    killed, _, problems = one_iteration(flow, tmp_path, point, 1)
    assert problems == []
    assert killed, f"{point} was never reached"
