"""Roles that differ only in case are refused: their files would collide where case is
ignored (macOS, Windows)."""

from __future__ import annotations

import pytest

from interlock.core.loader import parse_workflow
from interlock.errors import WorkflowError


def test_roles_differing_only_in_case_are_refused_naming_both_at_the_line() -> None:
    """`writer` and `Writer` are one problem naming both, at the second one's line."""
    text = (
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: writer, command: [echo]}\n"
        "  - id: b\n    workers:\n"
        "    - {role: Writer, final: true, output: other.md, command: [echo]}\n"
    )
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(text, source="flow.yaml")
    problems = caught.value.problems
    assert problems == [
        "line 8: pipeline 'p', phase 'b', worker 'Writer': role 'Writer' differs from role "
        "'writer' (phase 'a') only in case; their files would be one file on macOS and "
        "Windows: rename one of them"
    ]
    assert str(caught.value).startswith("flow.yaml: invalid workflow")
