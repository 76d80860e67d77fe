"""Where a model call meets the spend caps: reserve its worst case, wait, settle.

`CappedProvider` wraps an HTTP provider (`interlock.providers.factory`). Before the call,
its worst case (`spend.worst_case_usd`) is held against every cap that applies, in the
process's `SpendStore` (the ledger's, `use_spend_store`; this process's memory otherwise).
A call that does not fit waits, saying so through its task's progress (the `on_token`
callback the runtime relays) and to the listener in `cap_waits` (the runtime's: it shows the
wait as its task's and run's state in status.json), and goes on once the window resets,
others settle below their holds, or a person raises the cap in `interlock.toml`, which is
read again when its modification time changes. When the call ends the hold becomes the real
cost, or nothing when it failed before spending. A hold of a process that died expires once
the call could no longer be running (its timeout and a margin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.providers.base import (
    CallStopped,
    ModelRequest,
    ModelResult,
    Provider,
    ProviderError,
    TokenCallback,
)
from interlock.providers.config_files import ConfigError, read_toml
from interlock.providers.prompt import estimate_tokens
from interlock.providers.redaction import Secret, held_back
from interlock.providers.retry import SleepFn
from interlock.providers.settings import ResolvedModel
from interlock.providers.spend import (
    CallScope,
    Cap,
    CapKey,
    CapUsage,
    OnCap,
    SpendLimits,
    SpendStore,
    keys_at,
    parse_limits,
    too_dear,
    waiting_text,
    window_bounds,
    worst_case_usd,
)

logger = logging.getLogger("interlock.providers")

POLL_S = 5.0
"""A waiting call asks again this often (a cap raised, a hold settled, the window reset)."""
LEASE_MARGIN_S = 60.0
"""A hold outlives its call's timeout by this much before it counts no more."""


@dataclass(frozen=True, kw_only=True)
class CapWait:
    """A call waiting on a spend cap (or on the caps' store), as its run shows it.

    Attributes:
        text: What the call says: ``waiting: spend cap 'daily' (USD 50.00) until 00:00 UTC``.
        since: When the call began to wait (epoch seconds).
        cap: The cap's name (None: the caps' store is unreachable).
        amount_usd: The cap's amount (None with no cap).
        until: When the cap's window resets (None with no cap).
    """

    text: str
    since: float
    cap: str | None = None
    amount_usd: float | None = None
    until: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The wait as status.json and the API carry it (times as epoch seconds)."""
        return {
            "cap": self.cap,
            "amount_usd": self.amount_usd,
            "until": self.until,
            "since": self.since,
            "text": self.text,
        }


CapWaitListener = Callable[[CapWait | None], None]
cap_waits: ContextVar[CapWaitListener | None] = ContextVar("interlock_cap_waits", default=None)
"""Told when the call of this context begins to wait on a cap (a `CapWait`, again when what
it waits on changes) and when it waits no more (None). The runtime sets it around a task's
call; unset, a wait is said only through the call's progress."""


class MemorySpend:
    """Counts of this process only: for a process with no ledger (tests, `memory://`)."""

    where = "this process"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[tuple[str, float], float] = {}
        self._holds: dict[tuple[str, str], tuple[float, float, float]] = {}

    def reserve(
        self, *, hold: str, keys: Sequence[CapKey], amount_usd: float, now: float, expires: float
    ) -> str | None:
        """See `SpendStore.reserve`."""
        with self._lock:
            self._holds = {k: v for k, v in self._holds.items() if v[2] > now}
            for key in sorted(keys, key=lambda k: k.cap):
                held = sum(
                    a
                    for (_, c), (w, a, _) in self._holds.items()
                    if c == key.cap and w == key.window_start
                )
                spent = self._spent.get((key.cap, key.window_start), 0.0)
                if spent + held + amount_usd > key.amount_usd + 1e-9:
                    return key.cap
            for key in keys:
                self._holds[(hold, key.cap)] = (key.window_start, amount_usd, expires)
        return None

    def settle(self, *, hold: str, keys: Sequence[CapKey], spent_usd: float) -> None:
        """See `SpendStore.settle`."""
        with self._lock:
            for key in keys:
                self._holds.pop((hold, key.cap), None)
                total = (key.cap, key.window_start)
                self._spent[total] = self._spent.get(total, 0.0) + max(0.0, spent_usd)

    def usage(self, *, now: float) -> list[CapUsage]:
        """See `SpendStore.usage`."""
        with self._lock:
            rows = []
            for cap, start in sorted(
                self._spent.keys() | {(c, v[0]) for (_, c), v in self._holds.items()}
            ):
                live = [
                    a
                    for (_, c), (w, a, e) in self._holds.items()
                    if c == cap and w == start and e > now
                ]
                rows.append(
                    CapUsage(
                        cap=cap,
                        window_start=start,
                        spent_usd=self._spent.get((cap, start), 0.0),
                        held_usd=sum(live),
                        holds=len(live),
                    )
                )
            return rows

    def close(self) -> None:
        """Nothing to release."""


_store: SpendStore = MemorySpend()


def use_spend_store(store: SpendStore) -> SpendStore:
    """Count this process's calls against the caps in `store` from now on; returns the store
    used until now (the caller closes it or puts it back)."""
    global _store
    previous, _store = _store, store
    return previous


def spend_store() -> SpendStore:
    """The store this process's calls are counted in."""
    return _store


class LiveLimits:
    """The ``[limits]`` of a configuration, read again when its file changes.

    One `stat` per call: a person raising a cap reaches every waiting call within a poll,
    without a restart. A file that no longer parses keeps the caps read last (and says so).
    """

    def __init__(self, limits: SpendLimits) -> None:
        self._limits = limits
        self._path = Path(limits.source) if limits.source else None
        self._mtime = self._stat()

    def _stat(self) -> int:
        if self._path is None:
            return 0
        try:
            return os.stat(self._path).st_mtime_ns
        except OSError:
            return 0

    def current(self) -> SpendLimits:
        """The caps as the file says now."""
        mtime = self._stat()
        if self._path is not None and mtime != self._mtime:
            self._mtime = mtime
            try:
                document = read_toml(self._path)
                self._limits = parse_limits(document.get("limits"), str(self._path))
            except (ConfigError, OSError) as exc:
                logger.warning("spend caps: %s; the caps read before stay in force", exc)
        return self._limits


def worst_case(
    resolved: ResolvedModel, request: ModelRequest, default_output: int | None
) -> tuple[float, int, int | None]:
    """(USD, prompt tokens, output tokens) of the most `request` can cost."""
    texts = [request.system, request.prompt]
    for turn in request.turns:
        texts += [turn.text, *(c.arguments for c in turn.calls), *(r.content for r in turn.results)]
    prompt = sum(estimate_tokens(t) for t in texts)
    output = request.max_output_tokens or resolved.max_output_tokens or default_output
    # Priced at the tier the request is sent at: a worker's params may name another one.
    sent = resolved.sent_with(request.settings, batch=resolved.batch is not None)
    usd = worst_case_usd(input_tokens=prompt, output_tokens=output, rates=sent.rates(prompt))
    return usd, prompt, output


class CappedProvider:
    """`inner`, its calls held to the spend caps of `limits` (see the module docstring).

    Args:
        inner: The provider making the calls.
        resolved: The alias it serves (prices, output limit, provider name).
        limits: The caps, as configured (followed as the file changes).
        default_output: The output limit sent when the alias sets none (None: unbounded).
        clock: Wall-clock epoch seconds (windows are UTC days and months).
        sleep: Waits between polls.
        store: Where the counts live (default: the process's, `use_spend_store`).
        secrets: The keys the runtime masks in the call's progress (it holds back the end
            of what streams, as long as a key: a waiting line is padded past that).
    """

    def __init__(
        self,
        *,
        inner: Provider,
        resolved: ResolvedModel,
        limits: LiveLimits,
        default_output: int | None = None,
        clock: Callable[[], float] = time.time,
        sleep: SleepFn = asyncio.sleep,
        store: SpendStore | None = None,
        secrets: Callable[[], Sequence[Secret]] = list,
    ) -> None:
        self.name = inner.name
        self.inner = inner
        self._resolved = resolved
        self._limits = limits
        self._default_output = default_output
        self._clock = clock
        self._sleep = sleep
        self._store = store
        self._secrets = secrets

    def __repr__(self) -> str:
        return f"CappedProvider({self.inner!r})"

    def _caps(self, request: ModelRequest) -> tuple[SpendLimits, tuple[Cap, ...]]:
        limits = self._limits.current()
        scope = CallScope(
            pipeline=request.pipeline, alias=request.alias, provider=self._resolved.provider
        )
        return limits, limits.applying(scope)

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        """Reserve, call, settle; see `interlock.providers.base.Provider`."""
        caps = self._caps(request)[1]
        if not caps:
            return await self.inner.complete(request, on_token)
        store = self._store or spend_store()
        usd, prompt, output = worst_case(self._resolved, request, self._default_output)
        hold = uuid.uuid4().hex
        keys = await self._reserve(request, store, hold, usd, prompt, output, on_token)
        try:
            result = await self.inner.complete(request, on_token)
        except CallStopped as stopped:
            self._settle(store, hold, keys, stopped.answered.cost_usd)
            raise
        except ProviderError as exc:
            self._settle(store, hold, keys, exc.answered.cost_usd if exc.answered else 0.0)
            raise
        except BaseException:
            # Cancelled before the server answered, or a library's own error: nothing the
            # ledger records as spent, so nothing counts here either.
            self._settle(store, hold, keys, 0.0)
            raise
        await asyncio.to_thread(self._settle, store, hold, keys, result.cost_usd)
        return result

    async def _reserve(
        self,
        request: ModelRequest,
        store: SpendStore,
        hold: str,
        usd: float,
        prompt: int,
        output: int | None,
        on_token: TokenCallback | None,
    ) -> tuple[CapKey, ...]:
        listener = cap_waits.get()
        told: list[CapWait] = []

        def tell(wait: CapWait) -> None:
            told.append(wait)
            if listener is not None:
                listener(wait)

        try:
            return await self._wait_for_room(
                request, store, hold, usd, prompt, output, on_token, tell
            )
        finally:
            if told and listener is not None:
                listener(None)  # reserved, given up or cancelled: it waits no more

    async def _wait_for_room(
        self,
        request: ModelRequest,
        store: SpendStore,
        hold: str,
        usd: float,
        prompt: int,
        output: int | None,
        on_token: TokenCallback | None,
        tell: Callable[[CapWait], None],
    ) -> tuple[CapKey, ...]:
        said = ""
        since = self._clock()
        while True:
            limits, caps = self._caps(request)
            if not caps:
                return ()
            if output is None:
                raise ProviderError(
                    f"model {request.alias!r}: its calls have no output limit, so no spend cap "
                    f"({caps[0].name!r}, {limits.source}) can bound them: set "
                    f"max_output_tokens in [models.{request.alias}]",
                    retryable=False,
                )
            dear = too_dear(caps, usd)
            if dear is not None:
                raise ProviderError(
                    f"model {request.alias!r}: a call's worst case, USD {usd:.4f} ({prompt} "
                    f"prompt tokens + {output} output tokens), is over spend cap "
                    f"{dear.name!r} (USD {dear.amount_usd:.2f}) in {limits.source}: it could "
                    f"never start; raise the cap or lower max_output_tokens",
                    retryable=False,
                )
            now = self._clock()
            keys = keys_at(caps, now)
            try:
                blocked = await asyncio.to_thread(
                    store.reserve,
                    hold=hold,
                    keys=keys,
                    amount_usd=usd,
                    now=now,
                    expires=now + request.timeout + LEASE_MARGIN_S,
                )
            except Exception as exc:  # an unreachable store: wait, never spend uncounted
                logger.warning(
                    "spend caps at %s unreachable (%s: %s); the call waits",
                    store.where,
                    type(exc).__name__,
                    exc,
                )
                text = f"waiting: spend caps' store {store.where} unreachable"
                wait = POLL_S
                waiting = CapWait(text=text, since=since)
            else:
                if blocked is None:
                    return keys
                cap = next(c for c in caps if c.name == blocked)
                if limits.on_cap is OnCap.FAIL:
                    raise ProviderError(
                        f"model {request.alias!r}: spend cap {cap.name!r} (USD "
                        f'{cap.amount_usd:.2f}) is reached (on_cap = "fail" in '
                        f"{limits.source})",
                        retryable=False,
                    )
                text = waiting_text(cap, now)
                until = window_bounds(cap.window, now)[1]
                wait = min(POLL_S, max(0.01, until - now))
                waiting = CapWait(
                    text=text, since=since, cap=cap.name, amount_usd=cap.amount_usd, until=until
                )
            if text != said:
                tell(waiting)
                if on_token is not None:
                    on_token(f"\n{text}\n" + " " * held_back(self._secrets()))
            said = text
            await self._sleep(wait)

    @staticmethod
    def _settle(store: SpendStore, hold: str, keys: Sequence[CapKey], spent: float) -> None:
        if not keys:
            return
        try:
            store.settle(hold=hold, keys=keys, spent_usd=spent)
        except Exception as exc:  # the hold then expires; the spend is in the run's ledger
            with contextlib.suppress(Exception):
                logger.warning(
                    "spend caps at %s: could not settle a call (%s: %s)",
                    store.where,
                    type(exc).__name__,
                    exc,
                )
