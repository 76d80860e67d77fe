"""Fuzzed workflow files: every one gets `ok` or a clear error with exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["phases", "workers", "id", "role", "model", "command", "call", "task", "timeout",
        "retries", "next", "goto", "if", "max_visits", "for_each", "items", "final", "reads",
        "mode", "pause_after", "extract", "json", "regex", "type", "inputs", "budget", "grace",
        "fallback_models", "output", "backoff", "concurrency", "junk"]  # fmt: skip
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=20), st.sampled_from(["parallel", "sequential", "a.md", "x < 1", "../x"]),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)
BASE = yaml.safe_load((ROOT / "examples" / "translate.yaml").read_text())


def _check(runner: CliRunner, text: str, suffix: str = ".yaml") -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / f"flow{suffix}"
        path.write_text(text)
        result = runner.invoke(cli, ["check", str(path)], catch_exceptions=True)
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code in (0, 2), f"exit {result.exit_code}: {output}\n{text[:500]}"
    assert "Traceback" not in output, output
    if result.exit_code == 2:
        assert f"flow{suffix}" in output and output.strip(), "an error must name the file"
    else:
        assert "ok" in output
    return result.exit_code, output


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=10), VALUES, max_size=3) | VALUES)
def test_random_structures_get_a_clear_error(data: Any) -> None:
    """Any YAML structure at all is either valid or refused with exit 2 and a message."""
    _check(CliRunner(), yaml.safe_dump(data))


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


PATHS = _paths(BASE)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
def test_mutated_valid_files_pass_or_explain(edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    """A valid file with one to three values replaced passes `check` or says what is wrong."""
    data = json.loads(json.dumps(BASE))
    for path, value in edits:
        node = data
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed this place
    _check(CliRunner(), yaml.safe_dump(data))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_is_never_a_traceback(text: str) -> None:
    """Bytes that are not YAML at all, or YAML of the wrong shape, get a clear error."""
    _check(CliRunner(), text)


def test_a_handful_through_the_real_cli(tmp_path: Path) -> None:
    """The same promises hold through a real process: exit 2 with a message, or 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    cases = {
        "tabs.yaml": "p:\n\tphases: []\n",
        "list.yaml": "- a\n- b\n",
        "loop.yaml": yaml.safe_dump({"p": {"phases": [
            {"id": "a", "workers": [{"role": "x", "model": "m"}], "next": [{"goto": "a"}]},
            {"id": "b", "workers": [{"role": "y", "model": "m", "final": True}]}]}}),
        "huge.yaml": "p: " + "[" * 200 + "]" * 200 + "\n",
        "ok.yaml": (ROOT / "examples" / "translate.yaml").read_text(),
    }  # fmt: skip
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "interlock", "check", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == (0 if name == "ok.yaml" else 2), (name, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, (name, done.stderr)


def test_an_input_default_that_is_a_list_is_explained() -> None:
    """`inputs: {phases: []}` names the input and says a default is text, a number or a bool."""
    data = json.loads(json.dumps(BASE))
    data["translate"]["inputs"] = {"phases": []}
    code, output = _check(CliRunner(), yaml.safe_dump(data))
    assert code == 2
    assert "input 'phases', key 'default': an input's default must be text" in output


def _interlock(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    return subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_non_ascii_pipeline_name_runs(tmp_path: Path) -> None:
    """A pipeline named 'Café Ünïcode 研究' passes check and runs: its run id is made valid."""
    text = (ROOT / "examples" / "research.json").read_text()
    data = json.loads(text)
    (tmp_path / "flow.json").write_text(json.dumps({"Café Ünïcode 研究": data["research"]}))
    assert _interlock(tmp_path, "check", "flow.json").returncode == 0
    done = _interlock(tmp_path, "run", "flow.json", "Café Ünïcode 研究", "--topic", "x")
    assert done.returncode == 0, done.stderr
    assert "/archive/cafe-unicode-" in done.stdout


def test_reusing_a_run_id_says_so_and_exits_2(tmp_path: Path) -> None:
    """A second run with `--run-id same` is refused by name, with the commands that apply."""
    flow = str(ROOT / "examples" / "research.json")
    first = _interlock(tmp_path, "run", flow, "research", "--topic", "x", "--run-id", "same")
    assert first.returncode == 0, first.stderr
    again = _interlock(tmp_path, "run", flow, "research", "--topic", "x", "--run-id", "same")
    assert again.returncode == 2
    assert "run 'same' already exists (delivered)" in again.stderr
    assert "'interlock status same'" in again.stderr and "UNIQUE" not in again.stderr
    assert "Traceback" not in again.stderr


def test_call_targets_that_cannot_resolve_are_reported_by_check() -> None:
    """`call:` targets that do not import, lack the function or are unregistered fail check."""
    workers = [
        {"role": "a", "call": "no_such_module_xyz:run"},
        {"role": "b", "call": "json:no_such_function"},
        {"role": "c", "call": "unregistered_name"},
        {"role": "d", "call": "json:dumps"},
        {"role": "e", "call": "json:__doc__"},
    ]
    last = {"id": "y", "workers": [{"role": "f", "model": "m", "final": True}]}
    flow = {"p": {"phases": [{"id": "x", "workers": workers}, last]}}
    code, output = _check(CliRunner(), yaml.safe_dump(flow))
    assert code == 2
    assert "'a': call 'no_such_module_xyz:run': module 'no_such_module_xyz' does not" in output
    assert "'b': call 'json:no_such_function': module 'json' has no 'no_such_function'" in output
    assert "worker 'c': call 'unregistered_name' is not a registered name" in output
    assert "worker 'd'" not in output
    assert "worker 'e': call 'json:__doc__' is not a function" in output


JSON_PIECES = st.sampled_from(['{', '}', '[', ']', ',', ':', '"p"', '"phases"', '"id"', '"a"',
                               '"workers"', '"role"', '"model"', '"final"', 'true', '1e3', 'NaN',
                               ' ', '\n', '"\\u00e9"', '"\\"', '-0', 'null'])  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON_PIECES, max_size=60).map("".join) | st.text(max_size=200))
def test_arbitrary_json_text_is_never_a_traceback(text: str) -> None:
    """Any text in a `.json` file, near-JSON included, gets `ok` or a clear error."""
    _check(CliRunner(), text, ".json")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
def test_mutated_valid_json_files_pass_or_explain(edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    """The translation example as JSON, with values replaced, passes or says what is wrong."""
    data = json.loads(json.dumps(BASE))
    for path, value in edits:
        node = data
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    try:
        text = json.dumps(data, indent=1)
    except ValueError:
        return  # NaN and friends are not JSON: json.dumps already refuses them strictly
    _check(CliRunner(), text, ".json")
