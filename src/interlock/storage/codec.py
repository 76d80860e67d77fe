"""JSON as the ledger stores it: compact, and fast on the path every event takes.

Every event, `status.json` refresh and queue payload is encoded here, a dozen times per run;
orjson does that about twenty times faster than the standard library. Values orjson refuses
(an integer beyond 64 bits from an extracted field, say) fall back to the standard encoder,
so what can be stored does not change. Definitions are hashed from their canonical text, which
`interlock.core.loader` keeps producing with the standard library: a pinned hash never moves.
A float that is not finite is written as null (PostgreSQL's jsonb has no NaN either);
extracted values never are.
"""

from __future__ import annotations

import json
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
        return _FALLBACK.encode(value).encode()


def loads(text: str | bytes) -> Any:
    """Parse stored JSON (the standard parser takes what orjson refuses, such as NaN)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
