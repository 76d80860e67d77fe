"""The ledger's JSON codec writes what the standard encoder wrote, only faster."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interlock.core.extract import _plain
from interlock.core.state import RunStatus
from interlock.storage import codec

STANDARD = json.JSONEncoder(separators=(",", ":"), default=str)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: those take the fallback
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_any_json_value_reads_back_as_the_standard_encoder_wrote_it(value: Any) -> None:
    assert json.loads(codec.dumps(value)) == json.loads(STANDARD.encode(value))
    assert codec.loads(codec.dumps(value)) == json.loads(STANDARD.encode(value))
    assert codec.dumpb(value) == codec.dumps(value).encode()


def test_text_is_compact_in_key_order() -> None:
    assert codec.dumps({"b": 1, "a": [1.5, None, True]}) == '{"b":1,"a":[1.5,null,true]}'


def test_integers_beyond_64_bits_are_kept() -> None:
    big = {"n": 2**70, "m": -(2**65)}
    assert codec.loads(codec.dumps(big)) == big


class Colour(enum.IntEnum):
    RED = 3


@dataclass
class Point:
    x: int


def test_other_types_are_written_as_the_standard_encoder_with_default_str_did() -> None:
    moment = dt.datetime(2026, 11, 22, 7, 30, tzinfo=dt.UTC)
    value = {
        "status": RunStatus.DELIVERED,  # a str enum: its value
        "colour": Colour.RED,  # an int enum: its number
        "when": moment,  # no JSON type: str()
        "point": Point(1),
        "path": __import__("pathlib").PurePosixPath("/a/b"),
        1: "int key",
        "tuple": (1, 2),
    }
    assert codec.dumps(value) == STANDARD.encode(value)


def test_not_finite_floats_are_null_and_extraction_never_makes_them() -> None:
    assert codec.loads(codec.dumps([math.inf, math.nan])) == [None, None]
    for value in (math.nan, -math.inf):  # refused (a task failure), not recorded as other text
        with pytest.raises(ValueError, match="not a finite number"):
            _plain(value)


def test_reads_what_older_writers_stored() -> None:
    assert codec.loads('{"a":NaN}')["a"] != codec.loads('{"a":NaN}')["a"]  # NaN, as before
    assert codec.loads(b'{"a":"\\u00e9"}') == {"a": "é"}


def test_a_lone_surrogate_is_written_as_the_replacement_character() -> None:
    """Text UTF-8 cannot carry (and jsonb refuses) is stored as U+FFFD, a pair as its char."""
    lone = "output \udcff from a command"  # a lone surrogate, as surrogateescape leaves it
    assert codec.loads(codec.dumps({"text": lone})) == {"text": "output \ufffd from a command"}
    paired = {"k\ud83d\ude00": ["\ud83d\ude00", 2**70]}  # a pair as two code points
    assert codec.loads(codec.dumps(paired)) == {"k\U0001f600": ["\U0001f600", 2**70]}


def test_text_orjson_refuses_is_written_by_the_standard_encoder() -> None:
    big = {"n": 2**70, "text": "é"}  # an integer beyond 64 bits
    assert codec.dumps(big) == STANDARD.encode(big)
