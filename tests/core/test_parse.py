"""Workflow text is read strictly: JSON as JSON, no key twice, bounded size and nesting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interlock.core.loader import load_workflow, parse_workflow
from interlock.core.parse import MAX_BYTES, MAX_DEPTH
from interlock.errors import WorkflowError

from .runs import FIXTURES


def only_problem(path: Path) -> str:
    """The single problem loading `path` is refused with."""
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert str(path) in str(info.value)
    (problem,) = info.value.problems
    return problem


def research_text() -> str:
    """The research fixture as JSON text, one key a line."""
    return json.dumps(json.loads((FIXTURES / "research.json").read_text()), indent=2)


def test_json_file_with_a_trailing_comma_is_refused(tmp_path: Path) -> None:
    """A `.json` file is parsed as JSON, so a trailing comma YAML would accept is an error."""
    text = research_text().replace('"final": true', '"final": true,')
    path = tmp_path / "flow.json"
    path.write_text(text)
    problem = only_problem(path)
    assert problem.startswith("not valid JSON at line") and "column" in problem


def test_json_file_keeps_json_number_semantics(tmp_path: Path) -> None:
    """`1e3` in a `.json` file is the number 1000, not the string YAML 1.1 would make of it."""
    data = json.loads(research_text())
    data["research"]["phases"][0]["workers"][0]["timeout"] = "__T__"
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(data).replace('"__T__"', "1e3"))
    worker = load_workflow(path).get("research").pipeline.phases[0].workers[0]
    assert worker.timeout == 1000


def test_json_constants_outside_json_are_refused(tmp_path: Path) -> None:
    """NaN is not JSON, although Python's reader takes it by default."""
    path = tmp_path / "flow.json"
    path.write_text(research_text().replace('"final": true', '"final": true, "timeout": NaN'))
    assert "NaN is not a JSON value" in only_problem(path)


def test_duplicate_key_in_json_names_its_line(tmp_path: Path) -> None:
    """A worker with `timeout` twice is refused with the key and the lines of both."""
    lines = research_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"model"' in line)
    lines[at : at + 1] = ['"timeout": 5,', '"timeout": 6,', lines[at]]
    path = tmp_path / "flow.json"
    path.write_text("\n".join(lines))
    problem = only_problem(path)
    assert problem.startswith(f"line {at + 2}: key 'timeout' is given twice")
    assert f"first at line {at + 1}" in problem


def test_duplicate_pipeline_in_yaml_names_its_line(tmp_path: Path) -> None:
    """Two pipelines with one name in YAML are refused; the last no longer silently wins."""
    text = (FIXTURES / "translate.yaml").read_text()
    path = tmp_path / "flow.yaml"
    path.write_text(text + "\n" + text)
    problem = only_problem(path)
    first = text.splitlines().index("translate:") + 1
    second = len(text.splitlines()) + 1 + first
    assert problem.startswith(f"line {second}: key 'translate' is given twice")
    assert f"(first at line {first})" in problem


def test_duplicate_nested_key_in_yaml_is_refused() -> None:
    """A key twice in a worker's mapping is refused with its line."""
    text = "p:\n  phases:\n    - id: a\n      workers:\n        - role: w\n          model: m\n"
    text += "          timeout: 5\n          timeout: 6\n          final: true\n"
    with pytest.raises(WorkflowError) as info:
        parse_workflow(text, "flow.yaml")
    assert info.value.problems == [
        "line 8: key 'timeout' is given twice in one mapping (first at line 7); the second "
        "would silently replace the first: remove one"
    ]


def test_yaml_merge_keys_still_override() -> None:
    """`<<: *base` then an explicit key is an override, not a duplicate."""
    text = (
        "p:\n  phases:\n    - id: a\n      workers:\n"
        "        - &d {role: v, model: m, timeout: 5}\n"
        "        - {<<: *d, role: w, timeout: 9, final: true}\n"
    )
    pipeline = parse_workflow(text, "flow.yaml").get("p").pipeline
    assert pipeline.worker("w").timeout == 9 and pipeline.worker("v").timeout == 5


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_deep_nesting_is_a_clear_error(tmp_path: Path, suffix: str) -> None:
    """5,000 levels of `[` are refused with the nesting limit, not a RecursionError."""
    path = tmp_path / f"flow{suffix}"
    path.write_text('{"p": ' + "[" * 5000 + "]" * 5000 + "}")
    problem = only_problem(path)
    assert problem.startswith(f"nesting deeper than {MAX_DEPTH} levels at line 1")


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    """A file past the limit is refused by its size, without being parsed."""
    path = tmp_path / "flow.yaml"
    with path.open("w") as stream:
        stream.write("p: [" + "1, " * (MAX_BYTES // 3) + "1]\n")
    assert only_problem(path).startswith("the file is larger than 10 MB")


def test_dev_zero_is_refused() -> None:
    """An endless device is read only up to the limit, then refused."""
    assert only_problem(Path("/dev/zero")).startswith("the file is larger than")


def test_nul_bytes_and_other_encodings_are_refused(tmp_path: Path) -> None:
    """Binary or non-UTF-8 files are refused as not text."""
    (tmp_path / "nul.yaml").write_bytes(b"p: \0\0\n")
    assert "NUL bytes" in only_problem(tmp_path / "nul.yaml")
    (tmp_path / "latin.yaml").write_bytes("p: café\n".encode("latin-1"))
    assert "not UTF-8" in only_problem(tmp_path / "latin.yaml")


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    """A file saved with a UTF-8 byte-order mark (as some editors do) loads, JSON included."""
    path = tmp_path / "flow.json"
    path.write_bytes(b"\xef\xbb\xbf" + research_text().encode())
    assert list(load_workflow(path).definitions) == ["research"]
