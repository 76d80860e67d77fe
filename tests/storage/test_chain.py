"""The hash chain over every run's events, on every backend (`interlock.storage.chain`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.storage.test_conformance import T0, TTL, batch, make_run

from interlock.core import events as ev
from interlock.storage import chain
from interlock.storage.base import AppendBatch, NewEvent, RunSummary, Store


def test_every_appended_event_carries_a_link_that_verifies(store: Store) -> None:
    """Events appended in several batches are chained across the batches and verify."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "me", TTL, T0)
    store.append(batch(lease, "a", "b"), T0)
    store.append(batch(lease, "c"), T0)
    store.append(batch(lease), T0)  # an append of no events leaves the chain as it was
    store.append(batch(lease, "d"), T0)
    events = store.events("r1")
    assert all(e.hash for e in events) and len({e.hash for e in events}) == 4
    report = chain.verify_events(events)
    assert report.ok and report.events == 4 and report.unchained == 0


def test_runs_have_chains_of_their_own(store: Store) -> None:
    """Two runs appended in one group commit each chain from their own start."""
    make_run(store, "r1")
    make_run(store, "r2")
    one = store.acquire_lease("r1", "me", TTL, T0)
    two = store.acquire_lease("r2", "me", TTL, T0)
    store.append_many([batch(one, "x"), batch(two, "x"), batch(one, "y")], T0)
    assert chain.verify_events(store.events("r1")).ok
    assert chain.verify_events(store.events("r2")).ok
    assert store.events("r1")[0].hash == store.events("r2")[0].hash  # same content, same seq


def test_a_changed_event_is_named_by_its_seq(store: Store) -> None:
    """Changing the content of event 2 of 3 is reported at seq 2, not before."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "me", TTL, T0)
    store.append(batch(lease, "a", "b", "c"), T0)
    events = store.events("r1")
    forged = [*events[:1], replace(events[1], data={**events[1].data, "message": "B"}), events[2]]
    report = chain.verify_events(forged)
    assert report.first_bad == 2 and not report.ok
    assert chain.verify_events([events[0], events[2]]).first_bad == 2  # one removed
    assert chain.verify_events(events[:2]).ok  # a cut-off tail is a shorter valid history


def test_values_hash_the_same_whatever_the_backend_reprints() -> None:
    """Key order and number spelling (jsonb's rewrites) do not change an event's digest."""
    written = {"v": 1, "values": {"score": 1e16, "ratio": 2.0, "tiny": 1.5e-7, "n": [3, 4.5]}}
    read_back = {"values": {"ratio": 2, "n": [3, 4.5], "score": 10**16, "tiny": 1.5e-07}, "v": 1}
    same = chain.digest(T0, "k", read_back, None, None)
    assert chain.digest(T0, "k", written, None, None) == same
    huge = {"big": 1e300, "int": 2**70}
    assert chain.digest(T0, "k", huge, "r", "w") == chain.digest(
        T0, "k", {"big": 10**300, "int": 2**70}, "r", "w"
    )


@pytest.mark.parametrize("value", [1e16, 0.1, -3.0, 12345678.9, 2**63 + 1, "text é", None, True])
def test_extracted_values_of_every_kind_verify_after_a_round_trip(
    store: Store, value: object
) -> None:
    """Whatever a completion's values hold, its link verifies once read back from the store."""
    make_run(store, "r1")
    lease = store.acquire_lease("r1", "me", TTL, T0)
    done = ev.TaskCompleted(
        at=T0 + 0.125,
        task_id="t@1",
        attempt=1,
        artifact="t.md",
        sha256="0" * 64,
        size=1,
        values={"x": value, "nested": {"b": [value], "a": 1}},
    )
    summary = RunSummary(status="running", phase="x")
    store.append(AppendBatch(lease=lease, events=[NewEvent(event=done)], summary=summary), T0)
    assert chain.verify_events(store.events("r1")).ok


def test_events_recorded_before_the_chain_are_reported_as_not_chained(tmp_path: object) -> None:
    """A SQLite ledger written before the chain existed migrates; its old events verify as
    not chained, and events appended afterwards chain on from there."""
    import sqlite3
    from pathlib import Path

    from interlock.storage.queries import migrations
    from interlock.storage.sqlite import APPLICATION_ID, SQLiteStore

    path = Path(str(tmp_path)) / "ledger.db"
    db = sqlite3.connect(path, isolation_level=None)
    for version, script in migrations("sqlite"):
        if version < 4:
            for statement in script.split(";\n"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {version}")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("INSERT INTO definitions VALUES ('h', '{}')")
    db.execute(
        "INSERT INTO runs (run_id, pipeline, topic, definition_hash, created_at, last_seq, status,"
        " updated_at) VALUES ('old', 'p', 't', 'h', 1, 2, 'running', 1)"
    )
    for seq in (1, 2):
        db.execute(
            "INSERT INTO events (run_id, seq, at, kind, data) VALUES ('old', ?, 1, 'warned', ?)",
            (seq, '{"message":"m","at":1,"v":1}'),
        )
    db.close()
    store = SQLiteStore(path)
    try:
        report = chain.verify_events(store.events("old"))
        assert report.ok and report.unchained == 2
        lease = store.acquire_lease("old", "me", TTL, T0)
        store.append(batch(lease, "new"), T0)
        report = chain.verify_events(store.events("old"))
        assert report.ok and report.unchained == 2 and report.events == 3
    finally:
        store.close()


@pytest.mark.parametrize(
    "value", [1.0, 2.5, 1e16, 1e300, 0.1, -0.0, 2**70, "x.0", [1.0, {"y": 3.0}], None, True]
)
def test_the_append_path_digests_as_verification_does(value: object) -> None:
    """Digesting an event's stored text (appends) equals digesting its parsed data (verify)."""
    from interlock.storage import codec

    text = codec.dumps({"x": value, "v": 1})
    assert chain.digest_text(T0, "k", text, "r", None) == chain.digest(
        T0, "k", codec.loads(text), "r", None
    )


@pytest.mark.parametrize("at", [1795469466.3632905, 100.0, 1e16, -0.0, 0.5])
@pytest.mark.parametrize(
    "value", [1, 2**63 + 5, 2**70, 1.0, 2.5, "x:1.5,[2e3", "f9cb:3e5a", [1, "2"], {"at": 3.0}, None]
)
def test_an_events_leading_time_digests_as_verification_does(at: float, value: object) -> None:
    """Event data starts with its time (a float): the shortcut that parses such text with
    orjson normalises that time, and leaves every other number that could change to the
    standard parser, so the digest is the one verification computes."""
    from interlock.storage import codec

    text = codec.dumps({"at": at, "x": value, "v": 1})
    assert text.startswith('{"at":')
    assert chain.digest_text(T0, "k", text, "r", None) == chain.digest(
        T0, "k", codec.loads(text), "r", None
    )


class _Label(str):
    """A string subclass whose str() differs from its value."""

    def __str__(self) -> str:
        return "label"


@pytest.mark.parametrize("at", [1795469466.3632905, 100.0, 1e16, -0.0, 0.5])
@pytest.mark.parametrize(
    "value",
    [
        1,
        2**63 + 5,
        2**64 + 1,
        -(2**63),
        1.0,
        -0.0,
        2.5,
        1e15,
        1e16,
        1.5e17,
        1e-7,
        float("nan"),
        float("inf"),
        "x.0,",
        "e+",
        [1.0, {"y": 3.0}],
        {"at": 3.0},
        {1: "a", "1": "b"},
        (1, "2"),
        _Label("v"),
        {"nested": [{"deep": 7.0}]},
        None,
        True,
    ],
)
def test_digesting_an_event_as_built_equals_digesting_its_stored_text(
    at: float, value: object
) -> None:
    """The append path digests an event's values as built only when they read back from the
    stored text as themselves: for every value, the digest is the one of the stored text."""
    from interlock.storage import codec

    data = {"at": at, "x": value, "v": 1}
    text = codec.dumps(data)
    expected = chain.digest_text(T0, "k", text, "r", None)
    assert chain.digest_record(T0, "k", data, text, "r", None) == expected
    assert chain.digest(T0, "k", codec.loads(text), "r", None) == expected


def test_every_integral_float_orjson_writes_is_seen() -> None:
    """An integral float, whatever its size, is written by orjson in a form the shortcut
    recognises (so it goes through the parser that normalises it)."""
    import orjson

    values = [float(2**k) for k in range(0, 1000, 7)] + [-(10.0**k) for k in range(0, 300)]
    for value in values:
        written = orjson.dumps({"x": value})
        assert b"+" in written or chain._integral_float(written), written
