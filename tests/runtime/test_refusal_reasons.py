"""Refusals give the real reason: a run id that is only too long, an extracted list that is
only too long."""

from __future__ import annotations

import json

import pytest

from interlock.core.extract import MAX_LIST, ExtractionError, extract_values
from interlock.core.workflow import Extract
from interlock.errors import UsageError
from interlock.runtime.home import check_run_id


def test_a_run_id_that_is_only_too_long_says_so_and_is_cut() -> None:
    """A well-formed id of 500 characters is "too long (500 characters; at most 81)", and
    the message echoes its start, not all of it."""
    run_id = "a" * 500
    with pytest.raises(UsageError) as caught:
        check_run_id(run_id)
    message = str(caught.value)
    assert "is too long (500 characters; at most 81)" in message
    assert run_id not in message and "(cut)" in message
    assert len(message) < 150
    check_run_id("a" * 81)  # the limit itself is fine


def test_a_run_id_with_other_characters_is_still_not_valid() -> None:
    """Upper case is the old reason, unchanged."""
    with pytest.raises(UsageError, match="'ABC' is not valid: lowercase letters, digits"):
        check_run_id("ABC")


def test_an_extracted_list_over_the_limit_says_the_limit_not_that_it_is_no_list() -> None:
    """A JSON list of MAX_LIST + 1 items names its length and the limit."""
    rule = Extract.model_validate({"json": "items", "type": "list"})
    text = json.dumps({"items": list(range(MAX_LIST + 1))})
    with pytest.raises(ExtractionError) as caught:
        extract_values({"items": rule}, text)
    message = str(caught.value)
    assert "not a list" not in message
    assert f"the list has {MAX_LIST + 1:,} items, more than the {MAX_LIST:,}" in message
