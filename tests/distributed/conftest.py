"""Fixtures of the distributed tests (a missing service fails them, never skips)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.distributed.helpers import PG_ADMIN, Processes, admin

from interlock.storage.postgres import PostgresStore


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"il_d_{uuid.uuid4().hex[:12]}"
    admin(f"CREATE DATABASE {name}")
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    PostgresStore(url).close()
    yield url
    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def procs(pg_url: str, tmp_path: Path) -> Iterator[Processes]:
    """Process helper bound to a fresh database."""
    helper = Processes(pg_url, tmp_path)
    yield helper
    helper.stop_all()
