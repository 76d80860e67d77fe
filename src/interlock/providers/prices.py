"""Default prices for well-known models, from the `genai-prices` package (data bundled with
it, so no network is used).

A model is looked up by its provider's base URL and its model id, so a model served by a
local or private server (Ollama, a LiteLLM proxy) is never charged a public price by name
alone; prices given in `interlock.toml` win field by field. Base-tier prices are used
(long-context tiers are not applied).
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

PRICE_SOURCE = "genai-prices"

_FIELDS = {
    "input_price_per_mtok": "input_mtok",
    "output_price_per_mtok": "output_mtok",
    "cache_read_price_per_mtok": "cache_read_mtok",
    "cache_write_price_per_mtok": "cache_write_mtok",
}


@functools.lru_cache(maxsize=256)
def default_prices(model: str, base_url: str | None) -> dict[str, float]:
    """USD per million tokens of `model` at `base_url`, by price field; empty when unknown."""
    if not base_url or not model:
        return {}
    try:
        from genai_prices import data_snapshot  # imported on first need: it loads a table
    except ImportError:  # pragma: no cover - a dependency, but a missing one is no crash
        return {}
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, base_url)
        prices = info.get_prices(datetime.datetime.now(datetime.UTC))
    except Exception:  # LookupError for an unknown model or server; anything else alike
        return {}
    found: dict[str, float] = {}
    for field, attribute in _FIELDS.items():
        value: Any = getattr(prices, attribute, None)
        value = getattr(value, "base", value)  # tiered prices: the base tier
        if value is not None:
            found[field] = float(value)
    return found
