"""A server counts the spend caps of the runs it drives in its ledger, as `interlock run`
and the fleet's workers do, and hands the process's count back when it stops."""

from __future__ import annotations

from tests.server.conftest import ServerFactory

from interlock.providers import spend_guard


def test_a_serving_server_counts_spend_caps_in_its_ledger(make_server: ServerFactory) -> None:
    """While serving, calls are counted in the server's SQLite ledger (so a restart or an
    `interlock run` beside it sees the same spend); once stopped, in the process again."""
    before = spend_guard.spend_store()
    server = make_server()
    try:
        where = getattr(spend_guard.spend_store(), "where", "")
        assert where.startswith("sqlite://") and where.endswith("ledger.db"), where
    finally:
        server.stop()
    assert spend_guard.spend_store() is before
