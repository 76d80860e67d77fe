"""Pull typed values out of a worker's output text (a JSON field or a regex group).

Output comes from models: it is untrusted data. Values are parsed, typed and size-limited,
never executed or rendered.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from interlock.core.patterns import as_written, compile_pattern
from interlock.core.workflow import Extract

MAX_STRING = 10_000  # characters kept per extracted string; bounds what the ledger stores
MAX_LIST = 100_000
# The integers every backend reads back as themselves: SQLite's reader (orjson) and psycopg's
# (the same codec) turn any other integer into a float, or refuse it, so it would not
# round-trip; such a value is refused here rather than recorded as a different number.
MIN_INT, MAX_INT = -(2**63), 2**64 - 1
# A lone UTF-16 surrogate (a JSON escape like "\ud800" without its pair) is no character:
# UTF-8 cannot encode it and PostgreSQL's jsonb refuses it.
_SURROGATE = re.compile("[\ud800-\udfff]")


class ExtractionError(ValueError):
    """A required value is missing from the output or has the wrong type."""


def extract_values(spec: Mapping[str, Extract], text: str) -> dict[str, Any]:
    """Apply every extraction of a worker to its output text."""
    values: dict[str, Any] = {}
    parsed: Any = _NOT_PARSED
    for name, rule in spec.items():
        if rule.json_path is not None:
            if parsed is _NOT_PARSED:
                parsed = _parse_json(text)
            raw = _walk(parsed, rule.json_path)
        else:
            assert rule.regex is not None  # one source is guaranteed by the model
            raw = _search(rule.regex, text)
        if raw is None:
            if rule.required:
                where = (
                    f"JSON field {rule.json_path!r}"
                    if rule.json_path
                    else f"regex {as_written(rule.regex or '')}"
                )
                raise ExtractionError(f"value {name!r}: the output has no {where}")
            values[name] = None
            continue
        if rule.json_path is not None and rule.type == "list" and isinstance(raw, str):
            # A regex finds text, which a list is read from line by line; a JSON document
            # that says text where a list belongs is not that list (one item of it, by
            # accident, would fan out over a single wrong item).
            raise ExtractionError(
                f"value {name!r}: JSON field {rule.json_path!r} is text ({raw[:80]!r}), not "
                "a list; the output must give a JSON array there"
            )
        values[name] = _coerce(name, raw, rule.type)
        _check_recordable(name, values[name])
    return values


def _check_recordable(name: str, value: Any) -> None:
    """Refuse a value the ledger cannot record exactly, naming where in it the problem is.

    After `_coerce` a value is a bool, number, string or a list of those: what can still be
    wrong is an integer beyond the range every backend reads back, or a lone surrogate.
    """
    items = enumerate(value) if isinstance(value, list) else [(None, value)]
    for index, item in items:
        where = f"value {name!r}" if index is None else f"value {name!r}, item {index}"
        if isinstance(item, int) and not isinstance(item, bool):
            if not MIN_INT <= item <= MAX_INT:
                digits = str(item)
                shown = digits if len(digits) <= 40 else f"{digits[:20]}...({len(digits)} digits)"
                raise ExtractionError(
                    f"{where}: the integer {shown} is outside {MIN_INT}..{MAX_INT}, the range "
                    "the ledger records exactly; the output must give it as a string"
                )
        elif isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                raise ExtractionError(
                    f"{where}: the text holds a lone surrogate (U+{ord(found.group()):04X} at "
                    f"character {found.start()}), which is not a character; the output must "
                    "be valid Unicode"
                )


_NOT_PARSED = object()


def _parse_json(text: str) -> Any:
    stripped = text.strip()
    fence = re.search(r"```(?:json)?\s*\n(.*?)```", stripped, re.DOTALL)
    candidates = [stripped] + ([fence.group(1)] if fence else [])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
        except RecursionError:
            raise _too_deep() from None
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(stripped[start : end + 1])
        except ValueError:
            pass
        except RecursionError:
            raise _too_deep() from None
    return None


def _too_deep() -> ExtractionError:
    return ExtractionError("the output's JSON is nested too deeply to be read")


def _walk(document: Any, path: str) -> Any:
    node = document
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _search(pattern: str, text: str) -> Any:
    # RE2: time linear in the output, whatever the pattern (`interlock.core.patterns`).
    compiled = compile_pattern(pattern)
    match = compiled.search(text)
    if match is None:
        return None
    return match.group(1) if compiled.groups else match.group(0)


def _coerce(name: str, raw: Any, kind: str) -> Any:
    try:
        if kind == "number":
            if isinstance(raw, bool):
                raise ValueError("a boolean is not a number")
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError("not a finite number")
            return _recordable_float(number)
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            lowered = str(raw).strip().lower()
            if lowered in ("true", "yes", "1"):
                return True
            if lowered in ("false", "no", "0"):
                return False
            raise ValueError("expected true/false")
        if kind == "list":
            if isinstance(raw, str):
                raw = [line.strip(" -*\t") for line in raw.splitlines() if line.strip(" -*\t")]
            if not isinstance(raw, list):
                raise ValueError("expected a list")
            if len(raw) > MAX_LIST:
                # A list it is, only too long: say so, not that it is no list.
                raise ExtractionError(
                    f"value {name!r}: the list has {len(raw):,} items, more than the "
                    f"{MAX_LIST:,} an extracted list may hold (and a for_each's max_items "
                    "allows); have the worker write fewer, or split the work"
                )
            return [_plain(v) for v in raw]
        return str(raw if not isinstance(raw, (dict, list)) else json.dumps(raw))[:MAX_STRING]
    except RecursionError:
        raise _too_deep() from None
    except ExtractionError:
        raise  # already in its own words
    except (TypeError, ValueError, OverflowError) as exc:
        raise ExtractionError(
            f"value {name!r}: {str(raw)[:80]!r} is not a {kind} ({exc})"
        ) from None


def _recordable_float(number: float) -> float | int:
    """`number` as every backend reads it back. PostgreSQL's numbers have no -0, and jsonb
    prints an integral float from 1e16 on (which JSON text writes with an exponent) as the
    integer of its shortest decimal, `4.385922800143715e16` as 43859228001437150: a number
    a little off the float's exact value, read back as an integer. That integer is recorded,
    so the value read back is the one recorded wherever it is stored; beyond 64 bits the
    float itself reads back (as a float) on every backend."""
    if number.is_integer() and abs(number) >= 1e16:
        digits = int(Decimal(repr(number)))
        if MIN_INT <= digits <= MAX_INT:
            return digits
    return number + 0.0  # -0.0 as 0.0 (equal to it)


def _plain(value: Any) -> Any:
    """Keep list items JSON-like and bounded."""
    if isinstance(value, float):
        if not math.isfinite(value):  # JSON has no NaN or infinity
            raise ValueError(f"item {value!r} is not a finite number")
        return _recordable_float(value)
    if isinstance(value, (int, bool)) or value is None:
        return value
    if isinstance(value, str):
        return value[:MAX_STRING]
    return json.dumps(value)[:MAX_STRING]
