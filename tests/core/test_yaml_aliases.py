"""YAML aliases may not make a workflow stand for more than a file of the limit can write."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import pytest

from interlock.core.loader import load_workflow, parse_workflow
from interlock.errors import WorkflowError

LEVELS = "abcdefghi"


def laughs(levels: int, indent: str = "") -> str:
    """Nested aliases, each level nine times the one before ("billion laughs")."""
    lines = [f'{indent}a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for before, name in itertools.pairwise(LEVELS[:levels]):
        lines.append(f"{indent}{name}: &{name} [" + ",".join([f"*{before}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def only_problem(path: Path) -> str:
    """The single problem loading `path` is refused with, checking the file is named."""
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert str(path) in str(info.value)
    (problem,) = info.value.problems
    return problem


def test_billion_laughs_is_refused_naming_the_alias_line(tmp_path: Path) -> None:
    """A 500-byte file of nested aliases is refused at the alias that passes the limit,
    without building the values (memory stays small)."""
    path = tmp_path / "flow.yaml"
    path.write_text(laughs(9))
    tracemalloc.start()
    try:
        problem = only_problem(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert problem.startswith("line 7: the alias *f makes the document stand for more than")
    assert "10,000,000" in problem
    assert peak < 50 * 1024 * 1024


def test_aliases_inside_a_schema_are_counted(tmp_path: Path) -> None:
    """The same aliases nested inside a worker's `schema:` are refused the same way."""
    head = (
        "p:\n  phases:\n    - id: one\n      workers:\n"
        "        - {role: w, model: m, final: true, schema: {type: object, x: &x 1}}\n"
        "        - role: v\n          model: m\n          schema:\n"
    )
    path = tmp_path / "flow.yaml"
    path.write_text(head + laughs(9, indent=" " * 12))
    problem = only_problem(path)
    assert problem.startswith("line 15: the alias *f makes the document stand for more than")


def test_an_alias_inside_the_node_it_names_is_refused(tmp_path: Path) -> None:
    """A node that contains an alias to itself would be endless: refused with its line."""
    path = tmp_path / "flow.yaml"
    path.write_text("p:\n  phases: &p\n    - id: one\n      workers: *p\n")
    problem = only_problem(path)
    assert problem == (
        "line 4: the alias *p is inside the node it names, which makes the document endless: "
        "write the value out instead"
    )


def test_ordinary_aliases_still_load() -> None:
    """Aliases of small parts (a shared worker, merged and overridden) load as before."""
    text = (
        "p:\n  phases:\n    - id: a\n      workers:\n"
        "        - &d {role: v, model: m, timeout: 5}\n"
        "        - {<<: *d, role: w, timeout: 9, final: true}\n"
    )
    pipeline = parse_workflow(text, "flow.yaml").get("p").pipeline
    assert pipeline.worker("w").timeout == 9 and pipeline.worker("v").timeout == 5


def test_a_large_expansion_under_the_limit_is_not_refused_for_its_aliases(
    tmp_path: Path,
) -> None:
    """Six levels (about 2.4 million values and characters) pass the alias count: the file is
    refused only for what it is (not a pipeline), not for its size."""
    path = tmp_path / "flow.yaml"
    path.write_text(laughs(6))
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert all("alias" not in problem for problem in info.value.problems)
    assert "expected a mapping, not a list" in info.value.problems[0]
    assert len(info.value.problems[-1]) < 400  # the value is quoted by its start only
