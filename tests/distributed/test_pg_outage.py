"""PostgreSQL away mid-run for longer than every lease, with real orchestrator and worker
processes that reach it through a relay the test cuts (every connection dropped, new ones
refused, as when a server or its network goes away) and restores on the same port."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from tests.distributed.helpers import Processes, check_histories, submit_runs, wait_until
from tests.distributed.test_redis_outage import all_delivered

pytestmark = pytest.mark.slow


class Relay:
    """Forwards 127.0.0.1:`port` to `target`, until cut; restored on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        """Accept connections again."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and drop every open one."""
        with self._lock:
            listener, self._listener = self._listener, None
            doomed, self._open = self._open, set()
        if listener is not None:
            listener.close()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile: this one goes too
                    client.close()
                    server.close()
                    return
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def relay(pg_url: str) -> Iterator[Relay]:
    """A relay to the test's PostgreSQL server."""
    parts = urlsplit(pg_url)
    relay = Relay((parts.hostname or "127.0.0.1", parts.port or 5432))
    yield relay
    relay.cut()


def through(url: str, relay: Relay) -> str:
    """`url` with the relay's address instead of the server's."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{relay.port}"))


def test_an_outage_longer_than_the_leases_costs_no_attempt_and_says_so_once(
    pg_url: str, relay: Relay, tmp_path: Path
) -> None:
    """The database goes away for 12 s while tasks run (leases of 2 s): every run delivers
    once it is back, no task runs twice (a worker's result outlives its lease while nobody
    else took the entry), and each process says once that the database is not answering and
    once that it answers again: no traceback, no line per failed attempt."""
    procs = Processes(through(pg_url, relay), tmp_path)
    try:
        run_ids = submit_runs(pg_url, 3, tmp_path)
        procs.orchestrator("orch", ttl=2.0)
        procs.worker("w0", ttl=2.0, DIST_TASKS_DELAY="1.5")
        wait_until(lambda: len(procs.executions()) >= 2, 60, "tasks running")
        relay.cut()
        time.sleep(12)
        relay.restore()
        wait_until(lambda: all_delivered(procs, run_ids), 90, "every run delivered")
    finally:
        procs.stop_all()
    check_histories(pg_url, run_ids)
    runs = Counter((run, task) for run, task, _ in procs.executions())
    assert [key for key, count in runs.items() if count > 1] == []
    for name in ("orch", "w0"):
        log = procs.log(name)
        assert "Traceback" not in log, log
        assert "error connecting" not in log, log  # the pool's own line per attempt
        assert log.count("is not answering") == 1, log
        assert log.count("answers again") == 1, log
