"""JSON as the ledger stores it: compact, and fast on the path every event takes.

Every event, `status.json` refresh and queue payload is encoded here, a dozen times per run;
orjson does that about twenty times faster than the standard library. Values orjson refuses
(an integer beyond 64 bits from an extracted field, say) fall back to the standard encoder,
so what can be stored does not change. Definitions are hashed from their canonical text, which
`interlock.core.loader` keeps producing with the standard library: a pinned hash never moves.
A float that is not finite is written as null (PostgreSQL's jsonb has no NaN either);
extracted values never are. A lone UTF-16 surrogate (text decoded with `surrogateescape`, an
unpaired JSON escape) has no UTF-8 and jsonb refuses it: it is written as U+FFFD, with a
warning, so that an append never fails on it and every backend reads back the same text.
Extraction refuses such text before it gets here (`interlock.core.extract`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson

# str() for anything JSON has no type for (as the standard encoder with `default=str`); str
# and int subclasses (enums) as their plain values; dict keys that are not strings as text.
_OPTIONS = (
    orjson.OPT_NON_STR_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_PLAIN: tuple[Any, ...] = (str, int, float, dict, list, tuple)
_FALLBACK = json.JSONEncoder(separators=(",", ":"), default=str)
_log = logging.getLogger(__name__)


def plain_value(value: Any) -> Any:
    """What the standard encoder writes for `value` with `default=str`: subclasses of JSON's
    types as those types, anything else as its `str()`."""
    for plain in _PLAIN:
        if isinstance(value, plain):
            return plain(value)
    return str(value)


def dumps(value: Any) -> str:
    """Compact JSON text of `value`."""
    return dumpb(value).decode()


def dumpb(value: Any) -> bytes:
    """`dumps` as UTF-8 bytes, for files."""
    try:
        return orjson.dumps(value, default=plain_value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        # Off the fast path: a lone surrogate, or an integer beyond 64 bits (which may sit
        # beside one), so the walk is paid only by values orjson refused.
        value = _valid_text(value)
        try:
            return orjson.dumps(value, default=plain_value, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return _FALLBACK.encode(value).encode()


def _valid_text(value: Any) -> Any:
    """`value` with each lone surrogate in its text (keys too) replaced by U+FFFD, as the
    standard encoder would see it (`plain_value` for types JSON does not have)."""
    if isinstance(value, str):
        # Through UTF-16: a surrogate pair left as two code points becomes its character,
        # a lone one the replacement character.
        fixed = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        if fixed != value:
            _log.warning(
                "text %r holds a lone surrogate, which cannot be stored: written as U+FFFD",
                value[:80],
            )
        return fixed
    if isinstance(value, dict):
        return {
            _valid_text(k) if isinstance(k, str) else k: _valid_text(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_valid_text(v) for v in value]
    if isinstance(value, (int, float)) or value is None:
        return value
    return _valid_text(plain_value(value))


def loads(text: str | bytes) -> Any:
    """Parse stored JSON (the standard parser takes what orjson refuses, such as NaN)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
