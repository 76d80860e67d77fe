"""What a model call costs: the price of the tier the request is sent at, with long-context
rates above their threshold, from the `genai-prices` package (data bundled with it, so no
network is used) and from `interlock.toml`.

A model is looked up in `genai-prices` by its provider's base URL and its model id, so a
model served by a local or private server (Ollama, a LiteLLM proxy) is never charged a
public price by name alone.

The tier is the request's ``service_tier`` (`extra_body`, on the alias or a worker's
`params`): ``flex``, ``priority`` or any other value the provider takes; ``default``,
``auto`` or none is the standard tier. ``batch`` is the price of the providers' batch APIs.
Each tier's prices are laid over the standard ones, field by field, lowest first:

1. `genai-prices`' standard prices;
2. ``[prices.<model id>]`` in `interlock.toml`;
3. `genai-prices`' prices of the tier (its price variants), when it knows the tier;
4. ``[prices.<model id>.<tier>]``;
5. the alias's own ``*_price_per_mtok`` fields: they are what calls at the alias's own
   tier cost (a call at another tier, through a worker's `params`, uses them only for
   fields nothing above prices).

A field's long-context rates come from the same table as its rate below the threshold (or
from a higher one that gives ``long_context``): an alias that sets its own input price and
says nothing of long prompts has that price at every length.

A tier that no source prices is charged at the standard rates, and says so
(`Priced.note`): `interlock check --cost` prints it.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PRICE_SOURCE = "genai-prices"
TOML_SOURCE = "interlock.toml"
STANDARD = "standard"
BATCH = "batch"  # the tier of the providers' batch APIs

FIELDS = (
    "input_price_per_mtok",
    "output_price_per_mtok",
    "cache_read_price_per_mtok",
    "cache_write_price_per_mtok",
    "reasoning_price_per_mtok",
)
_GENAI_FIELDS = {
    "input_price_per_mtok": "input_mtok",
    "output_price_per_mtok": "output_mtok",
    "cache_read_price_per_mtok": "cache_read_mtok",
    "cache_write_price_per_mtok": "cache_write_mtok",
}
# Values of service_tier that mean the standard price.
_STANDARD_NAMES = frozenset({"", "default", "auto", "standard", "standard_only"})
# What `genai-prices` calls each tier in its price variants.
_GENAI_CONTEXT = {"batch": {"processing": "batch"}}


@dataclass(frozen=True, kw_only=True)
class LongContext:
    """Rates that apply to a whole call once its prompt passes a size.

    Attributes:
        above_input_tokens: The rates apply when the call's input tokens (cached ones
            included) are more than this: to all its tokens, as the providers bill.
        prices: USD per million tokens, by price field; fields not named keep the rate
            below the threshold.
    """

    above_input_tokens: int
    prices: Mapping[str, float]


@dataclass(frozen=True, kw_only=True)
class Priced:
    """The prices of one tier of one model, and where they came from.

    Attributes:
        tier: The tier priced (``standard``, ``flex``, ``priority``, ``batch``, ...).
        prices: USD per million tokens below any long-context threshold, by field.
        long_context: Higher rates above thresholds, lowest threshold first.
        sources: Which sources gave a field, highest precedence first (e.g.
            ``("interlock.toml [prices.gpt-5.4.flex]", "genai-prices flex")``).
        note: Why the tier priced is not the one asked for, or "".
    """

    tier: str = STANDARD
    prices: Mapping[str, float] = field(default_factory=dict)
    long_context: tuple[LongContext, ...] = ()
    sources: tuple[str, ...] = ()
    note: str = ""

    @property
    def source(self) -> str:
        """The kinds of source, joined by "+": "interlock.toml", "genai-prices", both, or
        "" when nothing is priced."""
        kinds = [TOML_SOURCE if s.startswith(TOML_SOURCE) else PRICE_SOURCE for s in self.sources]
        return "+".join(dict.fromkeys(kinds))


def tier_of(extra_body: Mapping[str, Any] | None) -> str:
    """The tier a request is priced at: its ``service_tier``, standard when none is set."""
    value = (extra_body or {}).get("service_tier")
    if not isinstance(value, str) or value.strip().lower() in _STANDARD_NAMES:
        return STANDARD
    return value.strip().lower()


@dataclass(frozen=True, kw_only=True)
class TierTable:
    """Prices a table of `interlock.toml` gives for one tier (or the standard one)."""

    prices: Mapping[str, float] = field(default_factory=dict)
    long_context: tuple[LongContext, ...] | None = None  # None: not given here


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    """One ``[prices.<model id>]`` table: the standard prices and those of each tier."""

    standard: TierTable = field(default_factory=TierTable)
    tiers: Mapping[str, TierTable] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class _Layer:
    source: str
    prices: Mapping[str, float]
    long_context: tuple[LongContext, ...] | None


def price(
    *,
    model: str,
    base_url: str | None,
    tier: str,
    table: PriceTable | None = None,
    alias: str = "",
    alias_prices: Mapping[str, float] | None = None,
    alias_tier: str = STANDARD,
) -> Priced:
    """The prices of a call to `model` at `tier` (see the module docstring for the order).

    Args:
        model: The provider's model id.
        base_url: The provider's base URL (`genai-prices` is asked only with one).
        tier: The request's tier (`tier_of`).
        table: The ``[prices.<model>]`` table, if any.
        alias: The alias, for naming its table in `Priced.sources`.
        alias_prices: The alias's own price fields.
        alias_tier: The tier of the alias's own settings.
    """
    table = table or PriceTable()
    layers: list[_Layer] = []
    own = _Layer(
        source=f"{TOML_SOURCE} [models.{alias}]", prices=dict(alias_prices or {}), long_context=None
    )
    if tier != alias_tier:
        layers.append(own)  # priced for another tier: only where nothing else prices
    standard = genai_prices(model, base_url, STANDARD)
    if standard is not None:
        layers.append(_Layer(source=PRICE_SOURCE, prices=standard.prices,
                             long_context=standard.long_context))  # fmt: skip
    layers.append(_toml_layer(model, table.standard, ""))
    tiered = tier == STANDARD
    if tier != STANDARD:
        variant = genai_prices(model, base_url, tier)
        if variant is not None:
            tiered = True
            layers.append(_Layer(source=f"{PRICE_SOURCE} {tier}", prices=variant.prices,
                                 long_context=variant.long_context))  # fmt: skip
        given = table.tiers.get(tier)
        if given is not None:
            tiered = True
            layers.append(_toml_layer(model, given, f".{tier}"))
    if tier == alias_tier:
        tiered = tiered or bool(own.prices)
        layers.append(own)
    prices: dict[str, float] = {}
    # A field's rates above thresholds come with its rate below them, from one table: a
    # table that prices a field and says nothing of long prompts prices them alike.
    above: dict[str, dict[int, float]] = {}
    sources: list[str] = []
    for layer in layers:
        if layer.prices or layer.long_context:
            sources.append(layer.source)
        for name, value in layer.prices.items():
            prices[name] = value
            above.pop(name, None)
        steps: dict[str, dict[int, float]] = {}
        for tier_above in layer.long_context or ():
            for name, value in tier_above.prices.items():
                steps.setdefault(name, {})[tier_above.above_input_tokens] = value
        above.update(steps)
    starts = sorted({start for levels in above.values() for start in levels})
    long_context = tuple(
        LongContext(
            above_input_tokens=start,
            prices={name: at[start] for name, at in sorted(above.items()) if start in at},
        )
        for start in starts
    )
    note = "" if tiered or not sources else f"no {tier} price is known: priced at standard rates"
    return Priced(
        tier=tier if tiered else STANDARD,
        prices=prices,
        long_context=long_context,
        sources=tuple(reversed(sources)),
        note=note,
    )


def _toml_layer(model: str, table: TierTable, suffix: str) -> _Layer:
    return _Layer(
        source=f"{TOML_SOURCE} [prices.{model}{suffix}]",
        prices=table.prices,
        long_context=table.long_context,
    )


def rates_at(
    prices: Mapping[str, float], long_context: tuple[LongContext, ...], input_tokens: int
) -> dict[str, float]:
    """The rates of a call with `input_tokens` of prompt: the long-context ones above their
    thresholds, the others below."""
    rates = dict(prices)
    for tier in long_context:
        if input_tokens > tier.above_input_tokens:
            rates.update(tier.prices)
    return rates


@functools.lru_cache(maxsize=512)
def genai_prices(model: str, base_url: str | None, tier: str = STANDARD) -> Priced | None:
    """`genai-prices`' prices of `model` at `base_url` for `tier`; None when it does not know
    the model, or (for a tier other than standard) has no price of that tier for it."""
    if not base_url or not model:
        return None
    try:
        from genai_prices import data_snapshot  # imported on first need: it loads a table
    except ImportError:  # pragma: no cover - a dependency, but a missing one is no crash
        return None
    now = datetime.datetime.now(datetime.UTC)
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, base_url)
        context = None
        if tier != STANDARD:
            context = _GENAI_CONTEXT.get(tier, {"service_tier": tier})
            if not _has_variant(info, context, now):
                return None
        found = info.get_prices(now, context)
    except Exception:  # LookupError for an unknown model or server; anything else alike
        return None
    prices: dict[str, float] = {}
    above: dict[int, dict[str, float]] = {}
    for name, attribute in _GENAI_FIELDS.items():
        value: Any = getattr(found, attribute, None)
        if value is None:
            continue
        prices[name] = float(getattr(value, "base", value))
        for step in getattr(value, "tiers", None) or ():
            above.setdefault(int(step.start), {})[name] = float(step.price)
    if not prices:
        return None
    long_context = tuple(
        LongContext(above_input_tokens=start, prices=above[start]) for start in sorted(above)
    )
    return Priced(tier=tier, prices=prices, long_context=long_context, sources=(PRICE_SOURCE,))


def _has_variant(info: Any, context: Mapping[str, str], now: datetime.datetime) -> bool:
    """Whether one of the model's price variants applies to `context` (otherwise asking with
    it silently gives the standard prices)."""
    for variant in getattr(info, "price_variants", None) or ():
        constraint = getattr(variant, "constraint", None)
        if constraint is not None and not constraint.active(now):
            continue
        when = getattr(variant, "when", {})
        if all(context.get(key) == value for key, value in when.items()):
            prices = getattr(variant, "prices", None)
            if any(getattr(prices, a, None) is not None for a in _GENAI_FIELDS.values()):
                return True
    return False


def default_prices(model: str, base_url: str | None) -> dict[str, float]:
    """USD per million tokens of `model` at `base_url` at the standard tier (below any
    long-context threshold), by price field; empty when unknown."""
    found = genai_prices(model, base_url, STANDARD)
    return dict(found.prices) if found is not None else {}


@dataclass(frozen=True, kw_only=True)
class Pricing:
    """What prices an alias's calls at whichever tier a request names (`price`'s inputs
    but the tier): kept with a resolved alias, so a worker's `params` naming another tier
    is priced at it."""

    model: str
    base_url: str | None
    table: PriceTable | None = None
    alias: str = ""
    alias_prices: Mapping[str, float] = field(default_factory=dict)
    alias_tier: str = STANDARD

    def at(self, tier: str) -> Priced:
        """The prices of a call at `tier`."""
        return price(
            model=self.model,
            base_url=self.base_url,
            tier=tier,
            table=self.table,
            alias=self.alias,
            alias_prices=self.alias_prices,
            alias_tier=self.alias_tier,
        )
