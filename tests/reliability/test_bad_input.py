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


def _check(runner: CliRunner, text: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "flow.yaml"
        path.write_text(text)
        result = runner.invoke(cli, ["check", str(path)], catch_exceptions=True)
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code in (0, 2), f"exit {result.exit_code}: {output}\n{text[:500]}"
    assert "Traceback" not in output, output
    if result.exit_code == 2:
        assert "flow.yaml" in output and output.strip(), "an error must name the file"
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
