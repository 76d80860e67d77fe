"""The hash chain that makes a run's history tamper-evident.

Every event a store appends carries `hash`: the SHA-256 of the previous event's hash, the
event's seq and the digest of its canonical content. Changing, removing or reordering any
recorded event therefore changes the hash of every event after it, and `verify` names the
first seq where the recorded chain and the recomputed one part.

The canonical content is defined on values, not on stored text, so that the same history
hashes the same in SQLite (JSON text as written) and PostgreSQL (jsonb, which reorders keys
and reprints numbers): keys are sorted, an integral float is written as the integer it equals
(jsonb prints `1e16` back as `10000000000000000`), and a float that is not finite is null.

Events appended before the chain existed have no hash; `verify` reports them as not chained
rather than tampered, and the chain of such a run starts at its first hashed event.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from interlock.storage import codec

if TYPE_CHECKING:
    from interlock.storage.base import StoredEvent

GENESIS = ""  # the "previous hash" of a run's first chained event


def _normal(value: Any) -> Any:
    """`value` as it reads back from either backend (see the module docstring)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer():
            # The decimal text a jsonb number prints as, read back as orjson reads it: an
            # integer within 64 bits, else the float (checked after rounding to that text:
            # -2**63 - 1 as a float prints as -9223372036854776000, beyond the range).
            number = int(Decimal(repr(value)))
            return number if -(2**63) <= number < 2**64 else value
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:  # orjson (and so psycopg) reads these as floats
            try:
                return _normal(float(value))
            except OverflowError:  # beyond any float: read back (by `json`) as the integer
                return int(value)
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return str(value)  # what the ledger's codec writes for a type JSON does not have


def canonical(
    at: float, kind: str, data: dict[str, Any], rule: str | None, why: str | None
) -> bytes:
    """The canonical bytes of one event's content."""
    body = {"at": float(at), "data": _normal(data), "kind": kind, "rule": rule, "why": why}
    try:
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return _standard_bytes(body)


def _standard_bytes(body: dict[str, Any]) -> bytes:
    """The canonical bytes of normalised content that orjson refuses: an integer beyond any
    float, a lone surrogate (no UTF-8 for it: written as its surrogatepass bytes), nesting
    past orjson's depth. Which path a body takes depends on its values alone, so the digest
    stays a function of the content, whichever way it was computed."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _parsed_float(text: str) -> Any:
    return _normal(float(text))


# Parses stored JSON text straight into the canonical values (numbers normalised as they are
# read): what `canonical` does with a walk over parsed data, at a fraction of the cost on the
# append path. The text is the ledger's own compact JSON, so its scanner is called directly:
# `decode` would only add two whitespace matches and two Python calls per event.
_CANONICAL_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    parse_float=_parsed_float, parse_constant=lambda _: None
).scan_once  # type: ignore[attr-defined]


# A number that `_normal` may change: one with a fraction or an exponent (a float), or with
# 19 digits or more (beyond what orjson reads as an integer). In the ledger's compact JSON a
# number follows ":", "," or "["; text inside a string that looks the same only costs the
# slower parse, never a wrong digest.
_NUMBER_TO_NORMALISE = re.compile(r"[:,\[]-?(?:\d+[.eE]|\d{19})")
_LEADING_AT = '{"at":'  # an event's data starts with its time, a float


def _parsed_plain(text: str) -> Any:
    """The canonical values of `text` parsed by orjson, when the only number `_normal`
    could change is the event's leading `at` (normalised here); None otherwise.

    Every event's data holds its time as a float, so the standard parser with a float hook
    (`_CANONICAL_SCAN`) would call back into Python for each event; most events hold no other
    float, and orjson parses them several times faster.
    """
    found = _NUMBER_TO_NORMALISE.search(text)
    if found is not None and found.start() == len(_LEADING_AT) - 1:
        if not text.startswith(_LEADING_AT):
            return None
        found = _NUMBER_TO_NORMALISE.search(text, found.end())
    if found is not None:
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN, or text the standard encoder wrote
        return None
    if isinstance(data, dict) and isinstance(data.get("at"), float):
        data["at"] = _normal(data["at"])
    return data


def digest_text(at: float, kind: str, text: str, rule: str | None, why: str | None) -> str:
    """`digest` of an event whose data is the JSON `text` (as the ledger stores it)."""
    data = _parsed_plain(text)
    body = {
        "at": float(at),
        "data": _CANONICAL_SCAN(text, 0)[0] if data is None else data,
        "kind": kind,
        "rule": rule,
        "why": why,
    }
    try:
        data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # an integer beyond 64 bits: read as a float
        body["data"] = _normal(body["data"])
        try:
            data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONEncodeError, TypeError):
            data = _standard_bytes(body)
    return hashlib.sha256(data).hexdigest()


# The canonical bytes of an event straight from the values it was encoded from, as the codec
# converts them (`codec.dumpb`'s `default` and passthrough options), keys sorted. Non-string
# keys are refused here (they may collide once written as text), as is all orjson refuses.
_DIRECT_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# In orjson's text a float that `_normal` changes (integral: orjson writes `1.0`, `-0.0` or
# `1e+16`) ends in ".0" before a delimiter or has a positive exponent ("+" appears nowhere
# else outside strings); a float without either is kept as it is, and an integer orjson writes
# reads back as itself. The same bytes inside a string only cost the slower path.


def digest_record(
    at: float, kind: str, data: dict[str, Any], text: str, rule: str | None, why: str | None
) -> str:
    """`digest_text(at, kind, text, rule, why)` for `text` the codec's encoding of `data`.

    What the stored text reads back as is the values the codec wrote: when orjson wrote them
    (no fallback to the standard encoder) and none of them is a number `_normal` changes,
    encoding `data` again with sorted keys gives the canonical bytes without parsing the
    text back (about half an append's digest work). Anything else takes `digest_text`.
    """
    body = {"at": float(at), "data": data, "kind": kind, "rule": rule, "why": why}
    try:
        direct = orjson.dumps(body, default=codec.plain_value, option=_DIRECT_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return digest_text(at, kind, text, rule, why)
    # `find`, not `in`: `bytes in bytes` first tries the needle as an integer, and the
    # TypeError it raises and clears costs more than the search.
    if direct.find(b"+") != -1 or _integral_float(direct):
        return digest_text(at, kind, text, rule, why)
    return hashlib.sha256(direct).hexdigest()


def _integral_float(text: bytes) -> bool:
    """Whether `text` holds ".0" before a delimiter: an integral float as orjson writes one
    below 1e16 (or those bytes in a string). A pattern with a literal start is searched for
    that literal first: a third of the instructions of splitting the text at every "."."""
    return _INTEGRAL_FLOAT(text) is not None


_INTEGRAL_FLOAT = re.compile(rb"\.0[,}\]]").search


def digest(at: float, kind: str, data: dict[str, Any], rule: str | None, why: str | None) -> str:
    """The SHA-256 (hex) of an event's canonical content."""
    return hashlib.sha256(canonical(at, kind, data, rule, why)).hexdigest()


def link(previous: str, seq: int, content: str) -> str:
    """The hash of event `seq` given the previous event's hash and its content digest.

    PostgreSQL computes the same in SQL (`append_run`): change both together.
    """
    return hashlib.sha256(f"{previous}\n{seq}\n{content}".encode()).hexdigest()


def extend(previous: str | None, first_seq: int, contents: Iterable[str]) -> list[str]:
    """The hashes of events `first_seq, first_seq + 1, ...` after a chain ending in
    `previous` (None: the run has no chained event yet)."""
    hashes, head = [], previous or GENESIS
    for offset, content in enumerate(contents):
        head = link(head, first_seq + offset, content)
        hashes.append(head)
    return hashes


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainReport:
    """What `verify_events` found."""

    events: int  # events looked at
    unchained: int  # events recorded before the chain existed (not counted as tampered)
    first_bad: int | None = None  # seq of the first event whose hash does not match
    problem: str = ""  # what is wrong there, in words

    @property
    def ok(self) -> bool:
        """True when every chained event matches and nothing is out of order."""
        return self.first_bad is None


def verify_events(events: Sequence[StoredEvent]) -> ChainReport:
    """Recompute the chain of one run's events (in seq order) and compare."""
    head: str | None = None
    unchained = 0
    expected_seq = 1
    for event in events:
        if event.seq != expected_seq:
            problem = f"expected event {expected_seq}, found {event.seq}: events are missing"
            return ChainReport(
                events=len(events), unchained=unchained, first_bad=expected_seq, problem=problem
            )
        expected_seq += 1
        if event.hash is None:
            if head is not None:
                problem = "the event has no hash although earlier events are chained"
                return ChainReport(
                    events=len(events), unchained=unchained, first_bad=event.seq, problem=problem
                )
            unchained += 1
            continue
        content = digest(event.at, event.kind, event.data, event.rule, event.why)
        head = link(head or GENESIS, event.seq, content)
        if head != event.hash:
            problem = "its content or an earlier event changed after it was recorded"
            return ChainReport(
                events=len(events), unchained=unchained, first_bad=event.seq, problem=problem
            )
    return ChainReport(events=len(events), unchained=unchained)
