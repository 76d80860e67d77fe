"""Waking on PostgreSQL notifications, with a slow poll as the safety net.

A `Listener` keeps one dedicated connection in `LISTEN` on a few channels, in a thread, and
hands each notification to a callback. Notifications are an optimisation only: they are lost
while the connection is down (it reconnects with backoff), so every user also polls, slowly.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg import sql

from interlock.storage.outage import Outage, one_line
from interlock.storage.postgres import outage_name

log = logging.getLogger("interlock.distributed")

Callback = Callable[[str, str], None]  # channel, payload


class Listener:
    """A background thread delivering notifications of `channels` to `callback`."""

    def __init__(self, url: str, channels: Sequence[str], callback: Callback) -> None:
        self.url = url
        self.channels = list(channels)
        self.callback = callback
        self.connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="interlock-listen", daemon=True)
        self._outage = Outage.of(outage_name(url), log)  # shared with the process's store

    def start(self) -> Listener:
        """Begin listening (returns at once)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (within about a second)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as db:
                    for channel in self.channels:
                        db.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.connected.set()
                    self._outage.answered(began)
                    # Whatever happened while we were away was not heard: let users re-check.
                    self.callback("", "reconnected")
                    delay = 0.1
                    while not self._stop.is_set():
                        for note in db.notifies(timeout=1.0):
                            self.callback(note.channel, note.payload)
            except psycopg.OperationalError as exc:  # the server or the network
                self.connected.clear()
                if self._stop.is_set():
                    return
                self._outage.failed(exc)
                self._stop.wait(delay)
                delay = min(5.0, delay * 2)
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                log.warning("notification connection lost (%s); reconnecting", one_line(exc))
                self._stop.wait(delay)
                delay = min(5.0, delay * 2)
            except Exception:  # a failing callback must not end the listening
                log.exception("notification callback failed")
                time.sleep(delay)


def wait_connected(listener: Listener, timeout: float = 10.0) -> None:
    """Block until the listener is in LISTEN (so notifications sent after this are heard)."""
    with contextlib.suppress(Exception):
        listener.connected.wait(timeout)
