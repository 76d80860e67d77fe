"""Transport-level retry rules for one model call.

Only failures that say nothing about the prompt are retried here: rate limiting (429),
server errors (5xx), request timeouts from the server (408), conflicts (409) and dropped
connections before any output arrived. Anything else goes straight back to the engine,
which owns attempts, fallbacks and budgets.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from interlock.core.timebounds import MAX_WAIT_S

SleepFn = Callable[[float], Awaitable[None]]
"""An awaitable sleep; tests inject one that records delays instead of waiting."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status means the same request may succeed later."""
    return status in RETRYABLE_STATUSES or status >= 500


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how long to wait between transport retries inside one call.

    Attributes:
        max_attempts: Total HTTP requests per call, including the first.
        base_delay_s: Backoff before the second request; doubles on each further retry.
        max_delay_s: Cap of the exponential backoff.
        max_retry_after_s: A server asking to wait longer than this ends the call with a
            retryable error instead, so the engine (not a sleeping task) decides what next.
        sleep: The sleep used between requests.
        rng: Source of jitter.
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_after_s: float = 60.0
    sleep: SleepFn = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def backoff(self, retry_number: int) -> float:
        """Delay before retry number `retry_number` (1 for the first retry), with jitter.

        Half of the capped exponential delay is fixed and half is random, so concurrent
        callers that failed together spread out without ever retrying immediately.
        """
        ceiling = min(self.max_delay_s, self.base_delay_s * 2.0 ** (retry_number - 1))
        jitter: float = self.rng.uniform(0, ceiling / 2)
        return ceiling / 2 + jitter

    def delay(self, retry_number: int, retry_after: float | None) -> float:
        """The wait before the next request: the server's Retry-After when given."""
        if retry_after is not None:
            return max(0.0, retry_after)
        return self.backoff(retry_number)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date).

    Args:
        value: The header value, or None when absent.
        now: The current time, for tests; defaults to the wall clock.

    Returns:
        Seconds to wait (never negative), or None when the header is absent or unreadable.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def retry_after_of(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait that an error response asks for, from whichever header says it.

    OpenAI sends ``retry-after-ms`` beside ``retry-after``; LiteLLM passes the upstream
    provider's wait on as ``llm_provider-retry-after``. The longest wait named wins: calling
    earlier than any of them would be refused again.
    """
    waits: list[float] = []
    for name in ("retry-after-ms", "llm_provider-retry-after-ms"):
        value = headers.get(name)
        if value is not None:
            with contextlib.suppress(ValueError):
                waits.append(max(0.0, float(value.strip()) / 1000.0))
    for name in ("retry-after", "llm_provider-retry-after"):
        seconds = parse_retry_after(headers.get(name), now=now)
        if seconds is not None:
            waits.append(seconds)
    # A server's word is bounded: not finite or past ten years is not a wait anyone means,
    # and it would be recorded as the time the next attempt may start.
    kept = [min(wait, MAX_WAIT_S) for wait in waits if math.isfinite(wait)]
    return max(kept) if kept else None


def describe_wait(seconds: float, *, now: datetime | None = None) -> str:
    """``"120s (until 11:45:02 UTC)"``: how long, and when calls are taken again."""
    current = now or datetime.now(UTC)
    until = current.timestamp() + seconds
    stamp = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{seconds:g}s (until {stamp})"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _reset_seconds(value: str, now: datetime) -> float | None:
    """Seconds until a rate-limit window resets: OpenAI's ``"1m30.5s"`` / ``"20ms"``, plain
    seconds, or Anthropic's RFC 3339 time."""
    text = value.strip()
    with contextlib.suppress(ValueError):
        return max(0.0, float(text))
    parts = _DURATION.findall(text)
    if parts and "".join(n + u for n, u in parts) == text.replace(" ", ""):
        return sum(float(n) * _UNIT_S[u] for n, u in parts)
    with contextlib.suppress(ValueError):
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    return None


def hold_of(
    status: int, headers: Mapping[str, str], *, now: datetime | None = None
) -> float | None:
    """How long every call to this provider should wait, from one response: what a 429
    asks (Retry-After), else the reset of whichever limit its headers say is used up
    (OpenAI's ``x-ratelimit-remaining-*`` / ``x-ratelimit-reset-*``, Anthropic's
    ``anthropic-ratelimit-*-remaining`` / ``-reset``). None: no wait.

    Only a refusal holds: both providers' reset is when the limit is whole again, not when
    the next request fits, so a success with nothing left says less than the bucket knows.
    """
    if status != 429:
        return None
    current = now or datetime.now(UTC)
    exhausted: list[float] = []
    lowered = {name.lower(): value for name, value in headers.items()}
    for name, value in lowered.items():
        if name.startswith("x-ratelimit-remaining-"):
            reset = lowered.get("x-ratelimit-reset-" + name.removeprefix("x-ratelimit-remaining-"))
        elif name.startswith("anthropic-ratelimit-") and name.endswith("-remaining"):
            reset = lowered.get(name.removesuffix("-remaining") + "-reset")
        else:
            continue
        with contextlib.suppress(ValueError):
            if float(value.strip()) <= 0 and reset is not None:
                seconds = _reset_seconds(reset, current)
                if seconds is not None and math.isfinite(seconds):
                    exhausted.append(min(seconds, MAX_WAIT_S))
    asked = retry_after_of(lowered, now=current)
    if asked is not None:
        return asked
    return max(exhausted) if exhausted else None
