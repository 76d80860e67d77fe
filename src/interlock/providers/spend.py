"""Spend caps across runs: the rules, pure.

``[limits]`` in `interlock.toml` caps what model calls may spend in a UTC day or a calendar
month, across every run of every process sharing a store: two shorthands for a cap on
everything, and ``[[limits.caps]]`` entries scoped to a pipeline, an alias or a provider.

Before a call starts its worst case is reserved against every cap that applies
(`interlock.providers.spend_guard`); a store applies the reservation atomically
(`SpendStore`, kept in the ledger: `interlock.storage.spend_sqlite`, `spend_pg`). This
module decides only: which caps apply, which window a time falls in, what a call may cost
at most, and what a waiting call says. No I/O, no clock: times come in as epoch seconds.
"""

from __future__ import annotations

import datetime
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from interlock.core.spend import CapKey as CapKey
from interlock.core.spend import CapUsage as CapUsage
from interlock.providers.config_files import ConfigError


class Window(enum.StrEnum):
    """The period a cap counts over, in UTC."""

    DAY = "day"  # from 00:00 UTC to the next 00:00 UTC
    MONTH = "month"  # from the first of the month, 00:00 UTC


class OnCap(enum.StrEnum):
    """What a call that would pass a cap does."""

    WAIT = "wait"  # waits for the window to reset or the cap to be raised (the default)
    FAIL = "fail"  # fails at once, not to be retried


SCOPE_KEYS = ("pipeline", "alias", "provider")
"""What a cap may be scoped to."""


@dataclass(frozen=True, kw_only=True)
class Cap:
    """One cap: at most `amount_usd` per `window` for the calls its scope matches.

    Attributes:
        name: How messages and `interlock limits` name it; the key of its count.
        window: The period counted over.
        amount_usd: The most the calls it matches may spend in one window.
        scope: Which calls it counts (by `SCOPE_KEYS`); empty: every call.
    """

    name: str
    window: Window
    amount_usd: float
    scope: Mapping[str, str] = field(default_factory=dict)

    def applies(self, call: CallScope) -> bool:
        """Whether a call of `call` counts against this cap. A call whose pipeline is not
        known counts against a pipeline's cap: an unknown never spends past one."""
        for key, wanted in self.scope.items():
            have = getattr(call, key)
            if not (key == "pipeline" and not have) and have != wanted:
                return False
        return True


@dataclass(frozen=True, kw_only=True)
class CallScope:
    """What a call is, for the caps' scopes ("" when not known)."""

    pipeline: str = ""
    alias: str = ""
    provider: str = ""


@dataclass(frozen=True, kw_only=True)
class SpendLimits:
    """The ``[limits]`` table.

    Attributes:
        caps: Every cap, in the order given (the shorthands first).
        on_cap: What a call that would pass a cap does.
        source: The file the table came from ("" when none).
    """

    caps: tuple[Cap, ...] = ()
    on_cap: OnCap = OnCap.WAIT
    source: str = ""

    def applying(self, call: CallScope) -> tuple[Cap, ...]:
        """The caps a call counts against, sorted by name (stores lock them in that order,
        so two reservations never wait for each other's locks)."""
        return tuple(sorted((c for c in self.caps if c.applies(call)), key=lambda c: c.name))


class SpendStore(Protocol):
    """Where the caps' counts live; each operation is atomic for everyone sharing it.

    Attributes:
        where: How messages name the store (no password).
    """

    where: str

    def reserve(
        self, *, hold: str, keys: Sequence[CapKey], amount_usd: float, now: float, expires: float
    ) -> str | None:
        """Hold `amount_usd` against every key, or against none: None when held, else the
        name of a cap it would pass. Holds past their `expires` no longer count."""
        ...

    def settle(self, *, hold: str, keys: Sequence[CapKey], spent_usd: float) -> None:
        """End hold `hold`: its keys count `spent_usd` instead (0: released)."""
        ...

    def usage(self, *, now: float) -> list[CapUsage]:
        """Every cap's count in every window still recorded (holds not expired)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def window_bounds(window: Window, now: float) -> tuple[float, float]:
    """The epoch seconds of the start and the end of the window `now` falls in."""
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    if window is Window.DAY:
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + datetime.timedelta(days=1)
    else:
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + datetime.timedelta(days=32)).replace(day=1)
    return start.timestamp(), end.timestamp()


def keys_at(caps: Sequence[Cap], now: float) -> tuple[CapKey, ...]:
    """The keys of `caps` in the windows `now` falls in."""
    return tuple(
        CapKey(cap=c.name, window_start=window_bounds(c.window, now)[0], amount_usd=c.amount_usd)
        for c in caps
    )


def reset_text(window: Window, now: float) -> str:
    """When the window of `now` ends, as a person reads it."""
    end = datetime.datetime.fromtimestamp(window_bounds(window, now)[1], datetime.UTC)
    if window is Window.DAY:
        return "00:00 UTC"
    return f"{end:%Y-%m-%d} 00:00 UTC"


def waiting_text(cap: Cap, now: float) -> str:
    """What a call waiting on `cap` says through its task's progress."""
    return (
        f"waiting: spend cap {cap.name!r} (USD {cap.amount_usd:.2f}) until "
        f"{reset_text(cap.window, now)}"
    )


def worst_case_usd(
    *,
    input_tokens: int,
    output_tokens: int | None,
    rates: Mapping[str, float | None],
) -> float:
    """The most a call can cost: its prompt at the dearer of the input and cache-write
    rates, and its whole output limit at the dearer of the output and reasoning rates, as
    the quote charges (`interlock.core.quote`). Infinite without an output limit."""
    if output_tokens is None:
        return math.inf
    given = {k: v or 0.0 for k, v in rates.items()}
    input_rate = max(
        given.get("input_price_per_mtok", 0.0), given.get("cache_write_price_per_mtok", 0.0)
    )
    output_rate = max(
        given.get("output_price_per_mtok", 0.0), given.get("reasoning_price_per_mtok", 0.0)
    )
    return (input_tokens * input_rate + output_tokens * output_rate) / 1_000_000


def too_dear(caps: Sequence[Cap], worst_usd: float) -> Cap | None:
    """The first cap a call of `worst_usd` could never fit under, whatever was spent."""
    for cap in caps:
        if worst_usd > cap.amount_usd:
            return cap
    return None


def parse_limits(table: Any, source: str) -> SpendLimits:
    """The ``[limits]`` table of `source`, checked.

    Raises:
        ConfigError: A value is of the wrong type, negative, or names an unknown window or
            scope key; the message names the file, the key and the fix.
    """
    if table is None:
        return SpendLimits(source=source)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: [limits] must be a table")
    known = {"max_cost_usd_per_day", "max_cost_usd_per_month", "caps", "on_cap"}
    for key in table:
        if key not in known:
            raise ConfigError(
                f"{source}: [limits] has no key {key!r}; it takes {', '.join(sorted(known))}"
            )
    caps: list[Cap] = []
    for key, window, name in (
        ("max_cost_usd_per_day", Window.DAY, "daily"),
        ("max_cost_usd_per_month", Window.MONTH, "monthly"),
    ):
        if key in table:
            caps.append(
                Cap(
                    name=name,
                    window=window,
                    amount_usd=_amount(table[key], f"{source}: [limits] {key}"),
                )
            )
    entries = table.get("caps", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: [limits] caps must be [[limits.caps]] tables")
    for index, entry in enumerate(entries):
        caps.append(_cap(entry, f"{source}: [[limits.caps]] #{index + 1}"))
    seen: set[str] = set()
    for cap in caps:
        if cap.name in seen:
            raise ConfigError(f"{source}: [limits] names two caps {cap.name!r}: rename one")
        seen.add(cap.name)
    on_cap = table.get("on_cap", OnCap.WAIT.value)
    if on_cap not in {m.value for m in OnCap}:
        raise ConfigError(f'{source}: [limits] on_cap = {on_cap!r}: use "wait" or "fail"')
    return SpendLimits(caps=tuple(caps), on_cap=OnCap(on_cap), source=source)


def _cap(entry: Any, where: str) -> Cap:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be a table")
    known = {"name", "window", "max_cost_usd", "scope"}
    for key in entry:
        if key not in known:
            raise ConfigError(f"{where} has no key {key!r}; it takes {', '.join(sorted(known))}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f'{where} needs a name: name = "nightly"')
    where = f"{where} ({name!r})"
    window = entry.get("window")
    if window not in {w.value for w in Window}:
        raise ConfigError(f'{where} window = {window!r} is not a window: use "day" or "month"')
    if "max_cost_usd" not in entry:
        raise ConfigError(f"{where} needs an amount: max_cost_usd = 50")
    scope = entry.get("scope", {})
    if not isinstance(scope, Mapping):
        raise ConfigError(f'{where} scope must be a table: scope = {{ alias = "sonnet" }}')
    for key, value in scope.items():
        if key not in SCOPE_KEYS:
            raise ConfigError(
                f"{where} scope key {key!r} is unknown: use one of {', '.join(SCOPE_KEYS)}"
            )
        if not isinstance(value, str) or not value:
            raise ConfigError(f'{where} scope {key} must name one: {key} = "<name>"')
    return Cap(
        name=name,
        window=Window(window),
        amount_usd=_amount(entry["max_cost_usd"], f"{where} max_cost_usd"),
        scope=dict(sorted(scope.items())),
    )


def _amount(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where} = {value!r} must be a number of US dollars, e.g. 50")
    if value < 0:
        raise ConfigError(f"{where} = {value!r} is negative: give 0 or more US dollars")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class CapReport:
    """A cap as `interlock limits` shows it: its count in the window under way."""

    cap: Cap
    window_start: float
    resets: str
    spent_usd: float
    held_usd: float
    holds: int

    @property
    def left_usd(self) -> float:
        """What calls may still reserve in this window."""
        return max(0.0, self.cap.amount_usd - self.spent_usd - self.held_usd)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values."""
        return {
            "name": self.cap.name,
            "window": self.cap.window.value,
            "scope": dict(self.cap.scope),
            "max_cost_usd": self.cap.amount_usd,
            "window_start": self.window_start,
            "resets": self.resets,
            "spent_usd": round(self.spent_usd, 6),
            "held_usd": round(self.held_usd, 6),
            "open_reservations": self.holds,
            "left_usd": round(self.left_usd, 6),
        }


def report(limits: SpendLimits, usage: Sequence[CapUsage], now: float) -> list[CapReport]:
    """Each configured cap with its count in the window `now` falls in (a cap renamed or
    removed from the file is no longer shown: its rows count for nothing)."""
    found = {(u.cap, u.window_start): u for u in usage}
    reports = []
    for cap in limits.caps:
        start = window_bounds(cap.window, now)[0]
        row = found.get((cap.name, start))
        reports.append(
            CapReport(
                cap=cap,
                window_start=start,
                resets=reset_text(cap.window, now),
                spent_usd=row.spent_usd if row else 0.0,
                held_usd=row.held_usd if row else 0.0,
                holds=row.holds if row else 0,
            )
        )
    return reports
