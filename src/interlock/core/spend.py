"""What the stores of spend caps count, as plain values: the providers decide which caps a
call reserves against (`interlock.providers.spend`), the stores below them count
(`interlock.storage.spend_sqlite`, `interlock.storage.spend_pg`), and both speak these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CapKey:
    """One cap in one window, as a store counts it."""

    cap: str
    window_start: float  # epoch seconds of the window's first instant
    amount_usd: float


@dataclass(frozen=True, kw_only=True)
class CapUsage:
    """A cap's count in one window, as a store reports it."""

    cap: str
    window_start: float
    spent_usd: float
    held_usd: float
    holds: int
