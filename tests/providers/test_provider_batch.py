"""Batch mode (`batch = true` on an alias) against a local server speaking OpenAI's Batch
API and Anthropic's Message Batches: gathered, sent once, answered by custom_id, at the
batch price, and failures, expiry, partial results and outages handled."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import anthropic.types.messages as anthropic_batches
import openai.types as openai_types
import pytest

from interlock.core.provider_batches import BatchState, RequestState
from interlock.providers.base import ModelRequest, ModelResult, ProviderError
from interlock.providers.batch_provider import withdraw_run
from interlock.providers.batch_store import MemoryBatches, use_batch_store
from interlock.providers.config import ModelConfig
from interlock.providers.factory import ProviderRegistry
from interlock.storage.provider_batches_sqlite import SQLiteBatches

from .batch_server import BatchServer, BatchServerState


@pytest.fixture
def batch_server() -> Iterator[BatchServer]:
    """The batch server on a free port."""
    server = BatchServer(BatchServerState()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Poll every 50 ms instead of every 30 s; the process's batch store put back after."""
    monkeypatch.setenv("INTERLOCK_BATCH_POLL_S", "0.05")
    before = use_batch_store(MemoryBatches())
    yield
    use_batch_store(before).close()


def write_config(tmp_path: Path, url: str, *, window: str = "0.2", size: int = 1000) -> Path:
    """An interlock.toml with a batch alias and a direct alias of the same model per kind."""
    path = tmp_path / "interlock.toml"
    path.write_text(f"""
[providers.oa]
kind = "openai"
base_url = "{url}/v1"
api_key_env = "TEST_KEY"
[providers.an]
kind = "anthropic"
base_url = "{url}"
api_key_env = "TEST_KEY"

[prices."gpt-test"]
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0
[prices."gpt-test".batch]
input_price_per_mtok = 1.0
output_price_per_mtok = 4.0
[prices."claude-test"]
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
[prices."claude-test".batch]
input_price_per_mtok = 1.5
output_price_per_mtok = 7.5

[models.cheap]
provider = "oa"
model = "gpt-test"
batch = true
batch_window = {window}
batch_max = {size}
[models.direct]
provider = "oa"
model = "gpt-test"
[models.claude]
provider = "an"
model = "claude-test"
batch = true
batch_window = {window}
""")
    return path


def calls(alias: str, model: str, n: int, run_id: str = "run-1") -> list[ModelRequest]:
    """`n` requests with distinct prompts and keys."""
    return [
        ModelRequest(
            alias=alias,
            model=model,
            system="be brief",
            prompt=f"row {i}",
            timeout=5.0,
            idempotency_key=f"{run_id}-k{i:03d}",
            run_id=run_id,
            task_id=f"t{i}",
        )
        for i in range(n)
    ]


async def run_calls(config_path: Path, alias: str, requests: list[ModelRequest]) -> list[object]:
    """Each request's result or error, through a fresh registry."""
    config = ModelConfig.load([config_path], env={"TEST_KEY": "k"})
    registry = ProviderRegistry()
    provider = registry.build(config.resolve(alias), config)
    try:
        return list(await asyncio.gather(*(provider.complete(r) for r in requests),
                                         return_exceptions=True))  # fmt: skip
    finally:
        await registry.aclose()


def test_openai_batch_delivers_every_row_at_half_the_direct_price(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """60 calls of a batch alias go out as one batch; each gets its own answer, and together
    they cost half what the same calls cost at the standard price."""
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(SQLiteBatches(tmp_path / "ledger.db"))
    results = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 60)))
    assert batch_server.state.created == 1
    assert all(isinstance(r, ModelResult) for r in results)
    texts = [r.text for r in results if isinstance(r, ModelResult)]
    assert texts == [f"answer: row {i}" for i in range(60)]
    direct = ModelConfig.load([config], env={"TEST_KEY": "k"}).resolve("direct")
    assert sum(r.cost_usd for r in results if isinstance(r, ModelResult)) == pytest.approx(
        60 * direct.cost_usd(100, 20) / 2
    )


def test_a_restarted_call_reads_its_recorded_answer_without_sending_again(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """The same calls made again (a restarted attempt, same keys) are answered from the
    record: no second batch."""
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(SQLiteBatches(tmp_path / "ledger.db"))
    first = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 5)))
    again = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 5)))
    assert batch_server.state.created == 1
    assert [r.text for r in again] == [r.text for r in first]  # type: ignore[attr-defined]


def test_batch_max_splits_the_calls_into_several_batches(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """With batch_max = 10, 25 calls go out as 3 batches."""
    config = write_config(tmp_path, batch_server.url, window="2", size=10)
    use_batch_store(MemoryBatches())
    results = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 25)))
    assert all(isinstance(r, ModelResult) for r in results)
    assert batch_server.state.created == 3


def test_a_failed_request_fails_its_call_and_the_others_are_answered(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """A request the batch answered with a 400 fails (not retryable); the rest succeed."""
    batch_server.state.fail = "k003"
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(MemoryBatches())
    results = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 5)))
    failed = results[3]
    assert isinstance(failed, ProviderError) and not failed.retryable
    assert "bad request" in str(failed)
    assert all(isinstance(r, ModelResult) for n, r in enumerate(results) if n != 3)


def test_an_expired_batch_fails_the_unanswered_calls_saying_so(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """An expired batch answers what it finished; the others fail, retryable, naming expiry."""
    batch_server.state.expire = True
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(MemoryBatches())
    results = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 3)))
    assert isinstance(results[0], ModelResult)
    for error in results[1:]:
        assert isinstance(error, ProviderError) and error.retryable
        assert "expired" in str(error)


def test_a_partial_results_file_fails_only_the_cut_request(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """A results file cut inside its last line: that call fails (retryable), others succeed."""
    batch_server.state.partial = True
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(MemoryBatches())
    results = asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 4)))
    assert all(isinstance(r, ModelResult) for r in results[:3])
    assert isinstance(results[3], ProviderError) and results[3].retryable
    assert "without a result" in str(results[3])


def test_polling_survives_the_server_going_down(tmp_path: Path, batch_server: BatchServer) -> None:
    """The server answering 503 while a batch is polled: polling goes on once it is back,
    and the batch is not sent again."""
    batch_server.state.polls_to_end = 3
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(MemoryBatches())

    async def scenario() -> list[object]:
        task = asyncio.ensure_future(run_calls(config, "cheap", calls("cheap", "gpt-test", 3)))
        while batch_server.state.created == 0:
            await asyncio.sleep(0.02)
        batch_server.state.down = True
        await asyncio.sleep(0.5)
        batch_server.state.down = False
        return await task

    results = asyncio.run(scenario())
    assert all(isinstance(r, ModelResult) for r in results)
    assert batch_server.state.created == 1


def test_cancelling_a_run_withdraws_its_calls_and_cancels_the_batch(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """A batch that never ends: withdrawing the run's calls fails them and cancels the
    provider's batch once none of it is left."""
    batch_server.state.never_end = True
    config = write_config(tmp_path, batch_server.url)
    store = MemoryBatches()
    use_batch_store(store)

    async def scenario() -> list[object]:
        task = asyncio.ensure_future(run_calls(config, "cheap", calls("cheap", "gpt-test", 3)))
        while not store.batches() or store.batches()[0].state != BatchState.SUBMITTED:
            await asyncio.sleep(0.02)
        assert withdraw_run(store, "run-1") == 3
        return await task

    results = asyncio.run(scenario())
    assert all(isinstance(r, ProviderError) and "withdrawn" in str(r) for r in results)
    assert batch_server.state.cancelled == 1
    assert store.batches()[0].state == BatchState.CANCELLED


def test_anthropic_batch_delivers_every_row_at_the_batch_price(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """Anthropic's Message Batches: one batch, each answer by custom_id, half price."""
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(SQLiteBatches(tmp_path / "ledger.db"))
    results = asyncio.run(run_calls(config, "claude", calls("claude", "claude-test", 50)))
    assert batch_server.state.created == 1
    assert [r.text for r in results] == [f"answer: row {i}" for i in range(50)]  # type: ignore[attr-defined]
    assert sum(r.cost_usd for r in results) == pytest.approx(  # type: ignore[attr-defined]
        50 * (100 * 1.5 + 20 * 7.5) / 1e6
    )


def test_the_servers_batches_match_the_official_sdk_types(
    tmp_path: Path, batch_server: BatchServer
) -> None:
    """What the test server says of its batches is what the SDKs' types describe."""
    config = write_config(tmp_path, batch_server.url)
    use_batch_store(MemoryBatches())
    asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 2)))
    asyncio.run(run_calls(config, "claude", calls("claude", "claude-test", 2, run_id="run-2")))
    for batch_id, batch in batch_server.state.batches.items():
        if batch_id.startswith("msgbatch_"):
            anthropic_batches.MessageBatch.model_validate(batch_server._a_view(batch_id))
        else:
            openai_types.Batch.model_validate(batch)


def test_requests_record_their_states(tmp_path: Path, batch_server: BatchServer) -> None:
    """Each call's record ends done, in the batch that answered it."""
    config = write_config(tmp_path, batch_server.url)
    store = SQLiteBatches(tmp_path / "ledger.db")
    use_batch_store(store)
    asyncio.run(run_calls(config, "cheap", calls("cheap", "gpt-test", 3)))
    [batch] = store.batches()
    assert batch.state == BatchState.ENDED and batch.requests == 3
    assert batch.provider_status == "completed" and batch.provider_batch_id.startswith("batch_")
    assert {r.state for r in store.requests_in(batch.tag)} == {RequestState.DONE}
