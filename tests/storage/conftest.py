"""Fixtures of the storage conformance suite: one `store` per backend, fresh for every test.

PostgreSQL tests need the server named by `INTERLOCK_TEST_PG` (default: the local one); when
it is unreachable they fail rather than skip, so a missing service is never mistaken for a
pass. The schema is migrated once into a template database and each test gets a clone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from interlock.storage.base import Store
from interlock.storage.postgres import PostgresStore
from interlock.storage.sqlite import SQLiteStore
from interlock.testing import MemoryStore

PG_ADMIN = os.environ.get("INTERLOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = ["memory", "sqlite", "postgres"]


def pg_url(database: str) -> str:
    """The admin URL with another database name."""
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + database


def admin(statement: str) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE need that)."""
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as db:
        db.execute(statement)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database holding the migrated schema, to clone per test."""
    name = f"il_tmpl_{os.getpid()}"
    admin(f"DROP DATABASE IF EXISTS {name}")
    admin(f"CREATE DATABASE {name}")
    PostgresStore(pg_url(name)).close()
    yield name
    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_database(pg_template: str) -> Iterator[str]:
    """A fresh clone of the template; its URL."""
    name = f"il_t_{uuid.uuid4().hex[:12]}"
    admin(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    yield pg_url(name)
    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=BACKENDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens handles on one fresh ledger; two handles stand for two processes."""
    opened: list[Store] = []
    if request.param == "memory":
        shared = MemoryStore()

        def open_one() -> Store:
            return shared

    elif request.param == "sqlite":

        def open_one() -> Store:
            return SQLiteStore(tmp_path / "ledger.db")

    else:
        url = request.getfixturevalue("pg_database")

        def open_one() -> Store:
            return PostgresStore(url, pool_size=4)

    def tracked() -> Store:
        store = open_one()
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        store.close()


@pytest.fixture
def store(opener: Callable[[], Store]) -> Store:
    """One handle on a fresh ledger."""
    return opener()
