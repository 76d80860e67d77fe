"""Values a worker produces never make an append raise: each is recorded exactly and reads
back identically with a chain that verifies, or extraction refuses it with a readable reason."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.storage.test_conformance import T0, TTL, make_run

from interlock.core import events as ev
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.workflow import Extract
from interlock.storage import chain, codec
from interlock.storage.base import AppendBatch, NewEvent, RunSummary, Store

# The values of each class the ledger must survive: integers at and past both 64-bit edges
# and past any float, signed zero, JSON-invalid floats, lone surrogates, long digit strings.
HOSTILE: list[Any] = [
    -(2**63) - 1,
    -(2**63),
    2**64 - 1,
    2**64,
    2**70,
    10**400,
    -(10**400),
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    "\ud800",
    "a\udfffb",
    {"k\ud800": 1},
    "9" * 5000,
    1.8446744073709552e19,
    -9.223372036854776e18,
]


def shown(value: Any) -> str:
    """A case's id: its repr, cut to 60 characters (some values are 10,000 digits long)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} chars)"


@pytest.mark.parametrize("value", HOSTILE, ids=shown)
def test_digesting_what_the_codec_wrote_never_raises_and_matches_verification(
    value: Any,
) -> None:
    """For every value the codec can write, the append path's digest (from the values, or
    from the stored text) is defined and equals the digest verification computes."""
    data = {"at": T0, "values": {"x": value, "n": [value, {"y": value}]}}
    text = codec.dumps(data)
    read_back = codec.loads(text)
    expected = chain.digest(T0, "k", read_back, "r", None)
    assert chain.digest_text(T0, "k", text, "r", None) == expected
    assert chain.digest_record(T0, "k", data, text, "r", None) == expected


def _completion(values: dict[str, Any]) -> ev.TaskCompleted:
    return ev.TaskCompleted(
        at=T0 + 0.125,
        task_id="t@1",
        attempt=1,
        artifact="t.md",
        sha256="0" * 64,
        size=1,
        values=values,
    )


def _append(store: Store, run_id: str, event: ev.Event) -> None:
    make_run(store, run_id)
    lease = store.acquire_lease(run_id, "me", TTL, T0)
    summary = RunSummary(status="running", phase="x")
    store.append(AppendBatch(lease=lease, events=[NewEvent(event=event)], summary=summary), T0)


# JSON documents as a worker may print them: every scalar JSON has (any integer, any float
# JSON can spell, text with any code point including lone surrogates), nested up to a depth.
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([-(2**63) - 1, -(2**63), 2**64 - 1, 2**64, 10**300, -0.0])
    | st.sampled_from([4.385922800143715e16, 1e16, 1e20, -1.8446744073709552e19])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8") | st.characters(categories=["Cs"]), max_size=8)
)
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
_SPEC = {
    kind: Extract.model_validate({"json": kind, "type": kind, "required": False})
    for kind in ("string", "number", "bool", "list")
}
_RUNS = itertools.count()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=_DOCUMENTS)
def test_an_extracted_value_is_recorded_exactly_or_refused(store: Store, field: Any) -> None:
    """Any value extraction yields appends, reads back equal and verifies on every backend;
    anything else is refused by extraction with a reason (never a crash at the append)."""
    for kind in _SPEC:
        text = json.dumps({kind: field})  # a surrogate is written as its JSON escape
        try:
            values = extract_values({kind: _SPEC[kind]}, text)
        except ExtractionError as exc:
            assert str(exc)  # a reason to show, not an empty failure
            continue
        run_id = f"r{next(_RUNS)}"
        _append(store, run_id, _completion(values))
        events = store.events(run_id)
        read = events[-1].data["values"]
        assert read == values and codec.dumps(read) == codec.dumps(values)  # types too
        assert chain.verify_events(events).ok


def test_text_with_a_lone_surrogate_outside_values_is_recorded_as_the_replacement(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's error text or usage holding a lone surrogate (command output decoded with
    `surrogateescape`) appends on every backend as U+FFFD, with a warning, and verifies."""
    failed = ev.TaskFailed(
        at=T0,
        task_id="t@1",
        attempt=1,
        error="bad byte \udcff here",
        usage={"model\ud800": "m", "tokens": 2**64},
    )
    _append(store, "r1", failed)
    events = store.events("r1")
    assert events[-1].data["error"] == "bad byte \ufffd here"
    assert "model\ufffd" in events[-1].data["usage"]
    assert chain.verify_events(events).ok
    assert "lone surrogate" in caplog.text


@pytest.mark.parametrize("value", HOSTILE, ids=shown)
def test_any_value_in_a_providers_usage_appends_and_verifies(store: Store, value: Any) -> None:
    """Usage fields come from a provider's answer unchecked: whatever they hold, the append
    succeeds on every backend and the run's chain verifies."""
    done = ev.TaskCompleted(
        at=T0, task_id="t@1", attempt=1, artifact="t.md", sha256="0" * 64, size=1,
        usage={"tokens": value, "nested": [value, {"deep": value}]},
    )  # fmt: skip
    _append(store, "r1", done)
    assert chain.verify_events(store.events("r1")).ok
