"""Fixtures: servers on free loopback ports, each on its own state directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.server.helpers import Server, write_workflow

from interlock.server.config import ServerConfig

ServerFactory = Callable[..., Server]


@pytest.fixture
def make_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerFactory]:
    """Start servers (stopped at the end); keyword arguments override `ServerConfig` fields."""
    monkeypatch.chdir(tmp_path)  # no interlock.toml around: model workers use the offline provider
    started: list[Server] = []
    workflow = write_workflow(tmp_path)

    def make(**overrides: Any) -> Server:
        settings: dict[str, Any] = {
            "home": tmp_path / "home",
            "host": "127.0.0.1",
            "port": 0,
            "workflows": [workflow],
            "heartbeat": 0.1,
        }
        settings.update(overrides)
        server = Server(ServerConfig(**settings))
        started.append(server)
        return server

    yield make
    for server in started:
        if server.thread.is_alive():
            server.stop()


@pytest.fixture
def server(make_server: ServerFactory) -> Server:
    """One server without auth on loopback."""
    return make_server()
