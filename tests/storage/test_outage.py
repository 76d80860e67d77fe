"""One warning when a database stops answering, reminders a minute apart, one when it is back."""

from __future__ import annotations

import logging
import time

import pytest

from interlock.errors import StorageError, StorageUnavailable
from interlock.storage.outage import Outage, level_for, one_line


def test_an_outage_is_said_once_then_reminded_then_ended(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("interlock.test_outage")
    outage = Outage("PostgreSQL at db", log, remind_every=0.2)
    began = time.monotonic()
    outage.answered(began)  # up: nothing to say
    with caplog.at_level(logging.DEBUG, logger=log.name):
        outage.failed(OSError("connection refused\n\tIs the server running?"))
        for _ in range(5):
            outage.failed(OSError("connection refused"))
        outage.answered(began)  # begun before the failure: proves nothing
        time.sleep(0.25)
        outage.failed(OSError("still refused"))
        outage.answered(time.monotonic())
        outage.answered(time.monotonic())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == (
        "PostgreSQL at db is not answering (connection refused Is the server running?); "
        "retrying until it does"
    )
    assert warnings[1].startswith("PostgreSQL at db still not answering after 0 s (still refused)")
    assert warnings[2].startswith("PostgreSQL at db answers again, after 0.")
    assert len(warnings) == 3
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 5


def test_processes_parts_share_one_outage_per_database() -> None:
    log = logging.getLogger("interlock.test_outage")
    assert Outage.of("db one", log) is Outage.of("db one", log)
    assert Outage.of("db one", log) is not Outage.of("db two", log)


def test_an_outage_is_logged_where_work_stops_at_debug_only() -> None:
    assert level_for(StorageUnavailable("down")) == logging.DEBUG
    assert level_for(StorageError("locked")) == logging.WARNING
    assert level_for(StorageError("full"), logging.ERROR) == logging.ERROR
    assert one_line("a\n\tb  c") == "a b c"
