"""Fixtures for provider tests: a local fake model server and a sleep that does not wait."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from .fake_llm_server import FakeServer, FakeState

API_KEY = "test-key-0123456789"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI/Anthropic server on 127.0.0.1, stopped after the test."""
    state = FakeState(
        api_key=API_KEY,
        models={"gpt-test", "claude-test"},
        reply=["Hello", ", ", "world", "."],
    )
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        state.stopping.set()
        srv.shutdown()
        srv.server_close()
        thread.join()


class RecordingSleep:
    """An injectable sleep that records the requested delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


@pytest.fixture
def sleep() -> RecordingSleep:
    """A sleep that does not wait."""
    return RecordingSleep()
