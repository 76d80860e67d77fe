"""What a JSON body must be before any route reads it: nested at most `MAX_DEPTH` deep, with
numbers that are numbers (no `NaN` or `Infinity`, at most 4300 digits) and text that is text
(no lone UTF-16 surrogates).

Each of these used to be taken and fail later: a body nested past the interpreter's recursion
limit was a 500 (or FastAPI's reasonless "error parsing the body"); `NaN` was recorded in a
signal and then broke every view of the run that shows it (strict JSON cannot encode it); a
lone surrogate cannot be stored as UTF-8. A body is refused with 400 and the reason instead.
"""

from __future__ import annotations

import json
import re
from typing import Any

from interlock.server.errors import ApiError

MAX_DEPTH = 64  # levels of arrays and objects in a request body
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


class _Constant(ValueError):
    """`NaN`, `Infinity` or `-Infinity` in a body."""


def depth(raw: bytes) -> int:
    """How deep arrays and objects nest in the JSON text `raw` (a linear scan; brackets inside
    strings are not counted)."""
    deepest = level = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        level += 1 if match.group() in (b"[", b"{") else -1
        deepest = max(deepest, level)
    return deepest


def _constant(name: str) -> Any:
    raise _Constant(name)


def problem(raw: bytes) -> str | None:
    """Why the JSON body `raw` is refused, or None. Text that is not JSON at all is left to the
    route, which says what it expected."""
    nested = depth(raw)
    if nested > MAX_DEPTH:
        return (
            f"the request body nests arrays and objects {nested} levels deep; at most "
            f"{MAX_DEPTH} are accepted"
        )
    try:
        document = json.loads(raw, parse_constant=_constant)
    except _Constant as exc:
        return f"the request body holds {exc.args[0]}, which is not a JSON number: send a number"
    except RecursionError:  # not expected within MAX_DEPTH; never a 500 all the same
        return "the request body nests too deeply"
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            return None  # not JSON: the route's own answer says what it expected
        return f"the request body holds a number that cannot be read: {exc}"
    return _bad_text(document)


def _bad_text(value: Any) -> str | None:
    """A lone surrogate anywhere in the document (keys included): it cannot be stored."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return (
                "the request body holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff "
                "escape), which is not text: send valid Unicode"
            )
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _bad_text(key) or _bad_text(item)
            if found:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _bad_text(item)
            if found:
                return found
    return None


def parse(raw: bytes, what: str) -> Any:
    """The JSON document `raw`, or a 400 that says why not (`what`: the body's name)."""
    reason = problem(raw)
    if reason is not None:
        raise ApiError(400, "bad_request", reason)
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, "bad_request", f"{what} must be JSON") from None
