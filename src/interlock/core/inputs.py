"""A run's inputs: the values given, checked against what the pipeline declares.

Values given on a command line, in a query string or by a sub-pipeline worker's template are
text. An input declared with a number or true/false (its `type`, or else its default's kind)
takes the text as that kind, so `--input n=4` makes `inputs.n > 3` compare numbers. Text that
is not of the declared kind refuses the run before it is recorded, rather than failing a
condition after the paid work before it. Pure: no I/O.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from interlock.errors import UsageError

if TYPE_CHECKING:
    from interlock.core.workflow import InputSpec

MAX_VALUE_SIZE = 100_000  # characters of a run's topic and of each input value given

InputType = Literal["text", "integer", "number", "boolean"]
TYPES: tuple[InputType, ...] = ("text", "integer", "number", "boolean")
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_SAYS = {  # how each kind is described in a message
    "integer": "a whole number, e.g. 4",
    "number": "a number, e.g. 0.5",
    "boolean": "true or false",
}


def kind_of(value: object) -> InputType:
    """The input type a default of this value implies."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "text"


def convert(value: object, kind: InputType) -> object:
    """`value` as `kind`; raises ValueError (with no message) when it is not one."""
    if kind == "text":
        return value if isinstance(value, str) else _text(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError
    if isinstance(value, bool):  # True is an int to Python, not a number to a person
        raise ValueError
    if kind == "integer":
        if isinstance(value, int):
            return _int64(value)
        if isinstance(value, float) and value.is_integer():
            return _int64(int(value))
        text = str(value).strip()
        if "_" in text:  # Python reads "1_000"; a person may have meant something else
            raise ValueError
        return _int64(int(text))
    number = float(value) if isinstance(value, int | float) else float(str(value).strip())
    if not math.isfinite(number):
        raise ValueError
    return number


INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # what conditions (CEL) compute with


def scalar_problem(value: object) -> str | None:
    """Why a number is not one conditions can compute with (past 64 bits, or not finite)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        return f"{value} is past the integers conditions compute with (64 bits, ±9.2e18)"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


def _int64(value: int) -> int:
    if not INT_MIN <= value <= INT_MAX:
        raise OverflowError
    return value


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def resolve_inputs(
    pipeline: str, declared: Mapping[str, InputSpec], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Every declared input's value: given ones converted to their type, defaults for the
    rest. Raises UsageError for an unknown input, a missing required one, or a value that is
    not of its input's type."""
    for name, value in given.items():
        check_size(pipeline, f"input {name!r}", value)
    unknown = sorted(set(given) - set(declared))
    if unknown:
        names = ", ".join(sorted(declared)) or "none"
        close = difflib.get_close_matches(unknown[0], list(declared), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(
            f"pipeline {pipeline!r} has no input {unknown[0]!r}{hint}; declared inputs: {names}"
        )
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        # None is "not given": an optional input a run left unset, carried by a rerun.
        if given.get(name) is None:
            if spec.required and spec.default is None:
                raise UsageError(
                    f"pipeline {pipeline!r} needs input {name!r}: pass --input {name}=VALUE"
                )
            values[name] = spec.default
            continue
        kind = spec.kind
        try:
            values[name] = convert(given[name], kind)
        except OverflowError:
            raise UsageError(
                f"pipeline {pipeline!r}: input {name!r} must fit in 64 bits (at most "
                f"{INT_MAX:,} either side of 0), which conditions compute with; got "
                f"{_text(given[name])!r}"
            ) from None
        except (ValueError, TypeError):
            default = "" if spec.default is None else f", like its default {_text(spec.default)}"
            raise UsageError(
                f"pipeline {pipeline!r}: input {name!r} is {_SAYS[kind]}{default}; got "
                f"{_text(given[name])!r}"
            ) from None
    return values


def check_topic(pipeline: str, topic: str) -> None:
    """Raise UsageError for a topic that is empty (or only spaces) or past MAX_VALUE_SIZE:
    tasks that read `{{ topic }}` would send the model nothing to work on."""
    if not topic.strip():
        raise UsageError(
            f"pipeline {pipeline!r}: the topic is empty; give what the run is about, "
            'e.g. --topic "solar sails"'
        )
    check_size(pipeline, "the topic", topic)


def check_size(pipeline: str, what: str, value: object) -> None:
    """Raise UsageError when a given value (the topic, an input) is past MAX_VALUE_SIZE:
    every template that reads it would carry it, and every event that records it."""
    if isinstance(value, str):
        size = len(value)
    elif isinstance(value, int):
        size = value.bit_length() * 3 // 10 + 1  # its digits, without writing them out
    else:
        size = len(repr(value))
    if size > MAX_VALUE_SIZE:
        raise UsageError(
            f"pipeline {pipeline!r}: {what} has {size:,} characters; a topic or an input "
            f"value may have at most {MAX_VALUE_SIZE:,} (pass a large document as a file a "
            "worker reads, e.g. its path as the input)"
        )
