"""Fixtures shared by every test folder, and the two tiers of the suite.

The slow tier is every test marked `slow` in its file and every test that `tests/slow.txt`
lists, by node id or by the path of its file or folder, with the seconds it took when
measured (for a path: what one of its tests takes). Those tests get a longer timeout than
the others (`SLOW_TIMEOUT`; pyproject's `timeout` holds for the rest) and start first,
longest first, so that under `pytest -n auto --dist worksteal` no long test is left to run
alone at the end. `pytest -m "not slow"` is the fast tier.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.core.expressions import compile_expression

ROOT = Path(__file__).resolve().parent.parent
SLOW_LIST = Path(__file__).with_name("slow.txt")
SLOW_TIMEOUT = 900  # seconds; the fast tier's is pyproject's `timeout`
UNMEASURED = 30.0  # the seconds assumed of a test marked slow in its file but not listed


def pytest_configure(config: pytest.Config) -> None:
    """Build the CEL parser before any test: building it raises the recursion limit, which
    hypothesis reports as an error when it happens inside one of its tests."""
    compile_expression("true")
    config.pluginmanager.register(LongestFirst(), "interlock-longest-first")


def measured() -> dict[str, float]:
    """`tests/slow.txt`: node ids or paths (relative to the repository) and seconds."""
    table: dict[str, float] = {}
    for line in SLOW_LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            seconds, name = line.split(None, 1)
            table[name.strip()] = float(seconds)
    return table


def listed_seconds(table: dict[str, float], nodeid: str) -> float | None:
    """The seconds listed for the test, for its function (all its parameters), or for a
    test of its file or folder; None when it is not listed."""
    function = nodeid.split("[", 1)[0]
    for name in (nodeid, function):
        if name in table:
            return table[name]
    path = Path(nodeid.split("::", 1)[0])
    for folder in (path, *path.parents):
        if str(folder) in table:
            return table[str(folder)]
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the listed tests slow and give every slow test the slow tier's timeout."""
    table = measured()
    for item in items:
        seconds = listed_seconds(table, item.nodeid)
        if seconds is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is None:
            continue
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
        item.stash[SECONDS] = seconds if seconds is not None else UNMEASURED


SECONDS = pytest.StashKey[float]()


class LongestFirst:
    """Orders the selected tests so that each xdist worker starts on its share of the slow
    tier, longest first.

    `--dist worksteal` hands worker i the i-th contiguous block of the collection and later
    moves tests from the end of a busy worker's block to an idle one. So the slow tests are
    dealt out to the blocks (each to the block with the fewest slow seconds so far) and put
    at each block's head; the other tests fill the blocks in their usual order, which keeps
    a module's tests together (module fixtures are made once per block).
    """

    @pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        workerinput = getattr(config, "workerinput", None)
        workers = int(workerinput["workercount"]) if workerinput else 1
        items[:] = blocks_longest_first(items, workers)


def blocks_longest_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The order described in `LongestFirst`."""
    sizes, left = [], len(items)
    for index in range(workers):  # as xdist splits the collection among idle workers
        sizes.append(left // (workers - index))
        left -= sizes[-1]
    slow = sorted(
        (item for item in items if SECONDS in item.stash),
        key=lambda item: (-item.stash[SECONDS], item.nodeid),  # ties: a stable order
    )
    heads: list[list[pytest.Item]] = [[] for _ in sizes]
    loads = [0.0 for _ in sizes]
    for item in slow:
        room = [i for i in range(len(sizes)) if len(heads[i]) < sizes[i]]
        block = min(room, key=lambda i: (loads[i], i))
        heads[block].append(item)
        loads[block] += item.stash[SECONDS]
    rest = iter(item for item in items if SECONDS not in item.stash)
    ordered: list[pytest.Item] = []
    for head, size in zip(heads, sizes, strict=True):
        ordered += head
        ordered += [next(rest) for _ in range(size - len(head))]
    return ordered


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for running the real CLI with its own state directory and no config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # the user's own interlock.toml: none
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # CEL's parse tables: built by the test
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture
def sigint_default() -> Iterator[None]:
    """Processes the test starts react to SIGINT as a terminal's Ctrl-C makes them. A runner
    started with SIGINT ignored (a background job of a non-interactive shell, some CI
    runners) passes the ignoring on to its children, and a Python child then never sees a
    KeyboardInterrupt; a handler, unlike an ignore, is reset to the default by exec."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def exporter() -> Iterator[Any]:
    """The process's tracer set up anew for the test (`tracing.configured_tracer` with the
    OpenTelemetry SDK's in-memory exporter given), and forgotten after it."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from interlock.runtime import tracing

    tracing.reset_for_tests()
    memory = InMemorySpanExporter()
    yield memory
    tracer = tracing.configured_tracer({}, exporter=memory)
    tracer.provider.shutdown()  # type: ignore[union-attr]
    tracing.reset_for_tests()
