"""The runs list's query string: dates and the opaque cursor of its keyset pages."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json

from interlock.server.errors import ApiError
from interlock.storage.base import RunRecord


def moment(value: str | None, name: str, *, end: bool = False) -> float | None:
    """An ISO 8601 date or date-time as epoch seconds (UTC unless it says otherwise); a bare
    date given as `until` means the end of that day."""
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(
            400,
            "bad_request",
            f"{name}={value!r} is not a date: give an ISO 8601 date or time, "
            "e.g. 2026-11-23 or 2026-11-23T14:00:00Z",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    if end and len(value) == 10:  # a bare date: the whole day is included
        parsed += dt.timedelta(days=1)
    return parsed.timestamp()


def encode(record: RunRecord, sort: str) -> str:
    """The cursor after `record` in a list sorted by `sort`."""
    value = record.created_at if sort == "created" else record.summary.cost_usd
    raw = json.dumps([sort, value, record.run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str, sort: str) -> tuple[float, str]:
    """(sort value, run id) from a cursor that `encode` made for the same sort."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        kind, value, run_id = json.loads(raw)
        if kind != sort or not isinstance(run_id, str):
            raise ValueError(kind)
        return float(value), run_id
    except (binascii.Error, ValueError, TypeError):
        raise ApiError(
            400,
            "bad_request",
            "the cursor is not one this list gave for this sort: start again without `cursor`",
        ) from None
