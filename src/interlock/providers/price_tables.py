"""Reading ``[prices.<model id>]`` tables of `interlock.toml` (`prices` says how they apply).

Shape::

    [prices."gpt-5.4"]                  # a model id, as the alias's `model` names it
    input_price_per_mtok = 2.5          # any of the *_price_per_mtok fields
    output_price_per_mtok = 15.0
    long_context = { above_input_tokens = 272000, input_price_per_mtok = 5.0,
                     output_price_per_mtok = 22.5 }   # or an array of such tables

    [prices."gpt-5.4".flex]             # a tier: flex, priority, batch, or another
    input_price_per_mtok = 1.25         # service_tier value; the same fields, and its
    output_price_per_mtok = 7.5         # own long_context
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from interlock.providers.config_files import ConfigError
from interlock.providers.prices import FIELDS, LongContext, PriceTable, TierTable

_KNOWN = [*FIELDS, "long_context"]


def price_tables(raw: Mapping[str, tuple[str, Mapping[str, Any]]]) -> dict[str, PriceTable]:
    """Each ``[prices.<model>]`` table by model id; `raw` maps it to (origin, table).

    Raises:
        ConfigError: A table is invalid (the message names the file and the table, never
            a value).
    """
    return {model: _table(model, origin, table) for model, (origin, table) in raw.items()}


def _table(model: str, origin: str, table: Mapping[str, Any]) -> PriceTable:
    place = f"{origin}: [prices.{model}]"
    tiers = {
        str(name).lower(): _tier(f"{origin}: [prices.{model}.{name}]", value)
        for name, value in table.items()
        if isinstance(value, dict) and name != "long_context"
    }
    for name in tiers:
        if name in ("standard", "default", "auto"):
            raise ConfigError(f"{place}: the standard prices go in the table itself, not .{name}")
    plain = {k: v for k, v in table.items() if not (isinstance(v, dict) and k != "long_context")}
    return PriceTable(standard=_tier(place, plain), tiers=tiers)


def _tier(place: str, table: Mapping[str, Any]) -> TierTable:
    prices: dict[str, float] = {}
    long_context: tuple[LongContext, ...] | None = None
    for key, value in table.items():
        if key == "long_context":
            items = value if isinstance(value, list) else [value]
            long_context = tuple(
                sorted((_long(place, item) for item in items), key=lambda t: t.above_input_tokens)
            )
        elif key in FIELDS:
            prices[key] = _price(place, key, value)
        else:
            close = difflib.get_close_matches(str(key), _KNOWN, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{place}: unknown key {key!r}{hint}; a price table holds "
                f"{', '.join(_KNOWN)} and tier tables ([...flex], [...priority], [...batch])"
            )
    return TierTable(prices=prices, long_context=long_context)


def _long(place: str, item: Any) -> LongContext:
    where = f"{place} long_context"
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table, or an array of tables")
    above = item.get("above_input_tokens")
    if not isinstance(above, int) or isinstance(above, bool) or above <= 0:
        raise ConfigError(f"{where}: above_input_tokens must be a positive whole number")
    prices: dict[str, float] = {}
    for key, value in item.items():
        if key == "above_input_tokens":
            continue
        if key not in FIELDS:
            close = difflib.get_close_matches(str(key), FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")
        prices[key] = _price(where, key, value)
    if not prices:
        raise ConfigError(f"{where}: name at least one *_price_per_mtok above the threshold")
    return LongContext(above_input_tokens=above, prices=prices)


def _price(place: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{place}: {key} must be a number of USD per million tokens, >= 0")
    return float(value)
