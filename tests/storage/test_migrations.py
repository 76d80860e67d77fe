"""Each dialect's migrations have distinct version numbers: two files of one version would
be applied together on a new ledger, and one of them never on a ledger already at it."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from interlock.storage.queries import migrations

# The migration that adds the runs' `estimated` column, by dialect (the numbers before it are
# those of other changes of the schema: a ledger migrated before it holds them).
ESTIMATED = {"sqlite": 18, "postgres": 26}


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_migration_versions_are_distinct_and_gapless(dialect: str) -> None:
    """Versions run 1, 2, 3... with no number used twice."""
    versions = [version for version, _ in migrations(dialect)]
    assert versions == list(range(1, len(versions) + 1))


# A run recorded before the runs' rows said whether a cost was estimated: one call's usage
# was estimated (the server reported none), the other run's was reported.
OLD_RUNS = [
    ("guessed", '{"task_id":"t","attempt":1,"usage":{"input_tokens":3,"estimated":true},"v":1}'),
    ("counted", '{"task_id":"t","attempt":1,"usage":{"input_tokens":3},"v":1}'),
]


def test_a_sqlite_ledger_from_before_the_estimated_mark_marks_its_estimated_runs(
    tmp_path: Path,
) -> None:
    """Migrating a SQLite ledger marks the runs that recorded an estimated usage, only those."""
    from interlock.storage.sqlite import APPLICATION_ID, SQLiteStore

    path = tmp_path / "ledger.db"
    db = sqlite3.connect(path, isolation_level=None)
    for version, script in migrations("sqlite"):
        if version < ESTIMATED["sqlite"]:
            for statement in script.split(";\n"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {version}")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("INSERT INTO definitions VALUES ('h', '{}')")
    for run_id, data in OLD_RUNS:
        db.execute(
            "INSERT INTO runs (run_id, pipeline, topic, definition_hash, created_at, last_seq,"
            " status, updated_at) VALUES (?, 'p', 't', 'h', 1, 1, 'delivered', 1)",
            (run_id,),
        )
        db.execute(
            "INSERT INTO events (run_id, seq, at, kind, data)"
            " VALUES (?, 1, 1, 'task_completed', ?)",
            (run_id, data),
        )
    db.close()
    store = SQLiteStore(path)
    try:
        marked = {r.run_id: r.summary.estimated for r in store.list_runs()}
    finally:
        store.close()
    assert marked == {"guessed": True, "counted": False}


def test_a_postgres_ledger_from_before_the_estimated_mark_marks_its_estimated_runs() -> None:
    """Migrating a PostgreSQL ledger marks the runs that recorded an estimated usage."""
    import psycopg
    from tests.storage.conftest import admin, pg_url

    from interlock.storage.postgres import PostgresStore

    name = f"il_old_{uuid.uuid4().hex[:12]}"
    admin(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(pg_url(name), autocommit=True) as db:
            db.execute(
                "CREATE TABLE interlock_schema (version INTEGER PRIMARY KEY,"
                " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            for version, script in migrations("postgres"):
                if version < ESTIMATED["postgres"]:
                    db.execute(script.encode())
                    db.execute("INSERT INTO interlock_schema (version) VALUES (%s)", (version,))
            db.execute("INSERT INTO definitions VALUES ('h', '{}')")
            for run_id, data in OLD_RUNS:
                db.execute(
                    "INSERT INTO runs (run_id, pipeline, topic, definition_hash, created_at,"
                    " last_seq, status, updated_at)"
                    " VALUES (%s, 'p', 't', 'h', 1, 1, 'delivered', 1)",
                    (run_id,),
                )
                db.execute(
                    "INSERT INTO events (run_id, seq, at, kind, data)"
                    " VALUES (%s, 1, 1, 'task_completed', %s::jsonb)",
                    (run_id, data),
                )
        store = PostgresStore(pg_url(name))
        try:
            marked = {r.run_id: r.summary.estimated for r in store.list_runs()}
        finally:
            store.close()
        assert marked == {"guessed": True, "counted": False}
    finally:
        admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
