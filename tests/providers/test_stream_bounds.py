"""What one model call may bring back is bounded: the longest line of its stream, the size of
its answer (streamed, as one JSON document, or printed by an agent), and of an error body; the
stream is parsed in linear time; passing a limit fails the call without a retry, naming the
limit and the interlock.toml key that raises it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from interlock.core.params import RequestSettings
from interlock.providers import (
    AnthropicProvider,
    CliAgentProvider,
    ConfigError,
    ModelConfig,
    OpenAIChatProvider,
    ProviderError,
    ProviderLimiter,
    ProviderRegistry,
    ProviderTimeout,
    Secret,
)
from interlock.providers.bounds import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    AnswerLimits,
    AnswerTooLarge,
)
from interlock.providers.sse import EventDecoder, EventTooLarge

from .conftest import API_KEY, RecordingSleep
from .fake_llm_server import FakeServer, Fault
from .helpers import endpoint, request, resolved, run

MIB = 1 << 20
SCRIPT = str(Path(__file__).with_name("agent_script.py"))
SMALL = AnswerLimits(max_line_bytes=64 * 1024, max_answer_bytes=256 * 1024, table="[models.main]")


def test_a_long_line_is_scanned_once_however_it_is_cut() -> None:
    """An 8 MiB line arriving 4 KiB at a time, then its end, is split into lines once: the
    decoder's work stays within twice the body's size (it was one copy and scan of the line so
    far per chunk: 2048 chunks, 8 GiB), and the event is whole."""
    decoder = EventDecoder()
    body = b"data: " + b"a" * (8 * MIB)
    found = []
    for start in range(0, len(body), 4096):
        found += decoder.feed(body[start : start + 4096])
    found += decoder.feed(b"\n\n")
    assert [len(e.data) for e in found] == [8 * MIB]
    assert decoder.scanned <= 2 * (len(body) + 2)


def test_a_line_or_an_event_past_max_line_bytes_is_refused() -> None:
    """A line that grows past `max_line_bytes` raises as soon as it does, without waiting for
    its end; so does one event made of many short data lines, and one line in a single chunk."""
    decoder = EventDecoder(max_line_bytes=MIB)
    with pytest.raises(EventTooLarge):
        for _ in range(1000):
            decoder.feed(b"a" * 65536)
    assert len(decoder._pending) <= MIB + 65536  # never kept much past the limit
    lines = EventDecoder(max_line_bytes=MIB)
    with pytest.raises(EventTooLarge):
        for _ in range(1000):
            lines.feed(b"data: " + b"b" * 4096 + b"\n")
    with pytest.raises(EventTooLarge):
        EventDecoder(max_line_bytes=MIB).feed(b"data: " + b"c" * (2 * MIB) + b"\n\n")
    fits = EventDecoder(max_line_bytes=MIB)
    assert [len(e.data) for e in fits.feed(b"data: " + b"d" * (MIB - 100) + b"\n\n")] == [MIB - 100]


def test_an_endless_line_fails_the_call_naming_max_line_bytes(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A stream whose one line never ends (8 MiB here, past the 1 MiB default) fails the call
    at once, not retried, saying which limit it passed and which key raises it."""
    server.fail_next(Fault(long_line=8 * MIB))
    provider = OpenAIChatProvider(
        endpoint=endpoint(server, sleep), resolved=resolved(), api_key=Secret(API_KEY)
    )
    with pytest.raises(AnswerTooLarge) as failure:
        run(provider, lambda: provider.complete(request()))
    assert failure.value.retryable is False
    message = str(failure.value)
    assert "max_line_bytes (1 MiB)" in message and "[models.main] of interlock.toml" in message
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_endless_stream_fails_at_max_answer_bytes_with_its_cost(
    server: FakeServer, sleep: RecordingSleep, kind: str
) -> None:
    """A server that streams valid text without end fails the call once the answer passes
    `max_answer_bytes` (long before the call's timeout), not retried, and the failure carries
    the cost of what was generated."""
    server.fail_next(Fault(endless=True))
    if kind == "openai":
        provider: OpenAIChatProvider | AnthropicProvider = OpenAIChatProvider(
            endpoint=endpoint(server, sleep),
            resolved=resolved(limits=SMALL),
            api_key=Secret(API_KEY),
        )
        call = request(timeout=60)
    else:
        provider = AnthropicProvider(
            endpoint=endpoint(server, sleep, base=""),
            resolved=resolved("anthropic", "claude-test", limits=SMALL),
            api_key=Secret(API_KEY),
        )
        call = request(model="claude-test", timeout=60)
    streamed: list[str] = []
    with pytest.raises(AnswerTooLarge) as failure:
        run(provider, lambda: provider.complete(call, streamed.append))
    assert failure.value.retryable is False
    assert "max_answer_bytes (256 KiB)" in str(failure.value)
    assert sum(map(len, streamed)) <= 256 * 1024
    spent = failure.value.answered
    assert spent is not None and spent.output_tokens > 0 and spent.cost_usd > 0


def test_a_json_answer_larger_than_max_answer_bytes_is_refused(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """An answer asked for as one JSON document (``stream = false``) whose body passes
    `max_answer_bytes` fails the call, not retried, naming the key."""
    server.state.reply = ["x" * (400 * 1024)]
    provider = OpenAIChatProvider(
        endpoint=endpoint(server, sleep), resolved=resolved(limits=SMALL), api_key=Secret(API_KEY)
    )
    call = request(settings=RequestSettings(stream=False))
    with pytest.raises(AnswerTooLarge) as failure:
        run(provider, lambda: provider.complete(call))
    assert "the JSON answer passed max_answer_bytes (256 KiB)" in str(failure.value)
    server.state.reply = ["x" * (100 * 1024)]
    assert len(run(provider, lambda: provider.complete(call)).text) == 100 * 1024


def test_an_error_body_without_end_is_read_only_for_its_message(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A 400 whose body never ends is reported as the HTTP error it is, from the body's start,
    instead of being read until the call times out."""
    server.fail_next(Fault(status=400, endless_body=True))
    provider = OpenAIChatProvider(
        endpoint=endpoint(server, sleep), resolved=resolved(), api_key=Secret(API_KEY)
    )
    with pytest.raises(ProviderError) as failure:
        run(provider, lambda: provider.complete(request(timeout=30)))
    assert not isinstance(failure.value, ProviderTimeout)
    assert "HTTP 400" in str(failure.value) and len(str(failure.value)) < 1000


def test_an_agent_that_prints_without_end_is_stopped_at_max_answer_bytes() -> None:
    """A command-line agent that prints without end is stopped once its output passes the
    alias's `max_answer_bytes`, and the call fails naming the key, instead of running until
    its timeout."""
    agent = CliAgentProvider(
        name="agent",
        command=[sys.executable, SCRIPT, "flood"],
        resolved=resolved("cli", limits=SMALL),
        limiter=ProviderLimiter(max_concurrency=1),
    )
    with pytest.raises(AnswerTooLarge) as failure:
        asyncio.run(agent.complete(request(timeout=60)))
    message = str(failure.value)
    assert "what " in message and "printed passed max_answer_bytes (256 KiB)" in message
    assert "[models.main]" in message


def test_the_limits_are_set_per_model_in_interlock_toml(tmp_path: Path, server: FakeServer) -> None:
    """`max_line_bytes` and `max_answer_bytes` in a `[models.<alias>]` table reach that
    alias's calls (others keep the defaults), are checked when the file is read, and the
    failure of a call names the alias's own table."""
    (tmp_path / "interlock.toml").write_text(
        f'[providers.fake]\nkind = "openai"\nbase_url = "{server.url}/v1"\n'
        'api_key_env = "FAKE_KEY"\nmax_attempts = 1\n'
        '[models.small]\nprovider = "fake"\nmodel = "gpt-test"\n'
        "max_line_bytes = 65536\nmax_answer_bytes = 131072\n"
        '[models.plain]\nprovider = "fake"\nmodel = "gpt-test"\n'
    )
    config = ModelConfig.load([tmp_path], env={"FAKE_KEY": API_KEY})
    small = config.resolve("small")
    assert small.limits == AnswerLimits(
        max_line_bytes=65536, max_answer_bytes=131072, table="[models.small]"
    )
    plain = config.resolve("plain").limits
    assert (plain.max_line_bytes, plain.max_answer_bytes) == (
        DEFAULT_MAX_LINE_BYTES,
        DEFAULT_MAX_ANSWER_BYTES,
    )
    assert "max_line_bytes" not in str(small.identity())  # not part of the fingerprint
    server.fail_next(Fault(endless=True))
    registry = ProviderRegistry(sleep=RecordingSleep())
    provider = registry.build(small, config)

    async def call() -> None:
        try:
            await provider.complete(request(alias="small", timeout=60))
        finally:
            await registry.aclose()

    with pytest.raises(AnswerTooLarge) as failure:
        asyncio.run(call())
    assert "raise max_answer_bytes in [models.small] of interlock.toml" in str(failure.value)
    (tmp_path / "interlock.toml").write_text(
        '[models.small]\nprovider = "openai"\nmodel = "gpt-4o"\nmax_answer_bytes = 0\n'
    )
    with pytest.raises(ConfigError, match=r"\[models.small\] is invalid: max_answer_bytes"):
        ModelConfig.load([tmp_path], env={})


def test_a_tool_transcript_clips_entries_and_stops_growing(tmp_path: Path) -> None:
    """A tool loop's transcript shows a 10 MiB answer and a 10 MiB tool result by their first
    64 KiB each, and stops at 4 MiB with a note however many entries follow."""
    from interlock.runtime.tool_runs import ENTRY_CHARS, TRANSCRIPT_CHARS, Transcript

    path = tmp_path / "w.1.tools.md"
    transcript = Transcript(path, ["search"])
    huge = "y" * (10 * MIB)
    call = {"id": "c1", "name": "search", "arguments": '{"q": "z"}'}
    transcript.add({"turn": 1, "text": huge, "finish_reason": "tool_calls", "calls": [call]})
    transcript.add({"turn": 1, "call": "c1", "name": "search", "result": huge, "is_error": False})
    text = path.read_text()
    assert text.startswith("# Tool servers") and '"q": "z"' in text
    assert len(text) < 3 * ENTRY_CHARS and f"{10 * MIB - ENTRY_CHARS:,} more characters" in text
    for turn in range(2, 200):
        transcript.add({"turn": turn, "text": huge, "finish_reason": "tool_calls", "calls": []})
    text = path.read_text()
    assert len(text) <= TRANSCRIPT_CHARS + 200
    assert text.endswith("Later turns, calls and results are not shown.)\n")
