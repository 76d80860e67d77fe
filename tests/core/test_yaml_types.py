"""Values YAML 1.1 reads as booleans or numbers from words and versions are named, and a
key it reads as a boolean is refused at its line."""

from __future__ import annotations

import pytest

from interlock.core.loader import parse_workflow
from interlock.errors import WorkflowError

TEXT = """\
p:
  inputs:
    country: {default: NO}
    flag: {default: off}
    version: {default: 1.10}
    rounds: {default: 3}
    ratio: {default: 0.5}
    strict: {default: true}
    quoted: {default: "no"}
"""


def test_each_value_typed_from_a_word_or_a_version_is_named_at_its_line() -> None:
    """NO, off and 1.10 are warned about at their lines; 3, 0.5, true and "no" are not."""
    from interlock.core.yaml_types import implicit_typing

    said = implicit_typing(TEXT)
    assert [w.split(":")[0] for w in said] == ["line 3", "line 4", "line 5"]
    assert "NO is read by YAML as the boolean false: quote it ('NO')" in said[0]
    assert "off is read by YAML as the boolean false" in said[1]
    assert "1.10 is read by YAML as the number 1.1: quote it ('1.10')" in said[2]


def test_a_key_read_as_a_boolean_is_refused_naming_it_and_its_line() -> None:
    """An input named `on` is refused at its own line, saying YAML read it as a boolean."""
    text = "p:\n  inputs:\n    topic2: {}\n    on: {default: x}\n  phases: []\n"
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(text, source="flow.yaml")
    message = str(caught.value)
    assert "line 4: key 'on' is read by YAML as a boolean" in message
    assert "quote it ('on':)" in message
