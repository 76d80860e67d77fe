"""Each dialect's migrations have distinct version numbers: two files of one version would
be applied together on a new ledger, and one of them never on a ledger already at it."""

from __future__ import annotations

import pytest

from interlock.storage.queries import migrations


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_migration_versions_are_distinct_and_gapless(dialect: str) -> None:
    """Versions run 1, 2, 3... with no number used twice."""
    versions = [version for version, _ in migrations(dialect)]
    assert versions == list(range(1, len(versions) + 1))
