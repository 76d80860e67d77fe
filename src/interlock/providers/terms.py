"""What each model call of a pipeline can cost, as data for the worst-case quote.

`interlock.core.quote` is pure and takes prices and limits as values; this module reads them
from the configuration (`interlock.toml` over the bundled `genai-prices` table), with each
worker's `params` applied, as the runtime would call the model.
"""

from __future__ import annotations

from typing import Any

from interlock.core.quote import ModelTerms
from interlock.core.workflow import Pipeline, Worker
from interlock.providers.config import ConfigError, ModelConfig
from interlock.providers.prices import BATCH, tier_of
from interlock.providers.settings import ResolvedModel


def model_terms(pipeline: Pipeline, config: ModelConfig) -> dict[tuple[str, str], ModelTerms]:
    """(role, alias) -> ModelTerms, for every model (fallbacks included) of every worker."""
    terms: dict[tuple[str, str], ModelTerms] = {}
    # Workers calling one alias with the same params share terms: resolve each pair once
    # (a phase of thousands of alike workers quotes in a moment).
    known: dict[tuple[str, str | None], ModelTerms] = {}
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.model is None:
                continue
            params = worker.params.model_dump_json() if worker.params is not None else None
            for alias in (worker.model, *worker.fallback_models):
                if (alias, params) not in known:
                    known[(alias, params)] = _resolved_terms(alias, worker, config)
                terms[(worker.role, alias)] = known[(alias, params)]
    return terms


def _resolved_terms(alias: str, worker: Worker, config: ModelConfig) -> ModelTerms:
    try:
        resolved = config.resolve(alias).for_worker(worker)
    except ConfigError:
        return ModelTerms(
            input_usd_per_mtok=None,
            output_usd_per_mtok=None,
            max_output_tokens=None,
            unlimited_why=f"the alias is not configured: add [models.{alias}]",
        )
    return _terms(resolved, config)


def _terms(model: ResolvedModel, config: ModelConfig) -> ModelTerms:
    priced = bool(model.price_source)
    input_rate, output_rate = _dearest(model, 0)
    long_context = tuple(
        (tier.above_input_tokens, *_dearest(model, tier.above_input_tokens + 1))
        for tier in model.long_context
    )
    limit = model.max_output_tokens
    unlimited_why = None
    if model.kind == "anthropic" and limit is None:
        # The Messages API needs max_tokens: the provider sends its default.
        limit = config.provider(model.provider).default_max_output_tokens
    if model.kind == "cli":
        limit = None  # an agent CLI makes its own calls; nothing here limits its answer
        unlimited_why = (
            "an agent CLI answers at any length: its spend cannot be bounded from the file; "
            "use an openai or anthropic provider for a bounded quote"
        )
    return ModelTerms(
        input_usd_per_mtok=input_rate if priced else None,
        output_usd_per_mtok=output_rate if priced else None,
        max_output_tokens=limit,
        context_tokens=model.context_tokens,
        free=model.kind == "offline",
        unlimited_why=unlimited_why,
        long_context=long_context if priced else (),
    )


def _dearest(model: ResolvedModel, input_tokens: int) -> tuple[float, float]:
    """The dearest input and output rates of a call with `input_tokens` of prompt: a
    prompt may be written to the cache, an answer may be all reasoning."""
    rates = model.rates(input_tokens)
    prompt = max(rates["input_price_per_mtok"] or 0.0, rates["cache_write_price_per_mtok"] or 0.0)
    answer = max(rates["output_price_per_mtok"] or 0.0, rates["reasoning_price_per_mtok"] or 0.0)
    return prompt, answer


def model_prices(pipeline: Pipeline, config: ModelConfig) -> list[dict[str, Any]]:
    """Which price each model of the pipeline is charged at: one entry per alias and tier
    (a worker's `params` may send an alias at another tier), sorted by alias."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.model is None:
                continue
            for alias in (worker.model, *worker.fallback_models):
                try:
                    model = config.resolve(alias).for_worker(worker)
                except ConfigError:
                    continue  # `check` names the alias that is not configured
                if model.kind == "offline":
                    continue
                found.setdefault((alias, model.price_tier), _price_entry(model))
    return [found[key] for key in sorted(found)]


def _price_entry(model: ResolvedModel) -> dict[str, Any]:
    rates = {k: v for k, v in model.rates(0).items() if v is not None}
    return {
        "alias": model.alias,
        "model": model.model,
        "tier": model.price_tier,
        # The tier its calls are sent at: a batch alias's are sent through the batch API.
        "asked_tier": BATCH if model.batch is not None else tier_of(model.settings.extra_body),
        "source": model.price_source or None,
        "sources": list(model.price_sources),
        "note": model.price_note or None,
        **rates,
        "long_context": [
            {"above_input_tokens": t.above_input_tokens, **t.prices} for t in model.long_context
        ],
    }


def price_line(entry: dict[str, Any]) -> str:
    """One entry of `model_prices` in words."""
    where = f"{entry['alias']} ({entry['model']})"
    if not entry["source"]:
        return f"{where}: no price known"
    rates = _rates(entry)
    longer = "".join(
        f"; above {t['above_input_tokens']:,} input tokens {_rates(t)}"
        for t in entry["long_context"]
    )
    note = f" ({entry['note']})" if entry["note"] else ""
    return (
        f"{where}: tier {entry['tier']}{note}, USD per million tokens {rates}{longer}; "
        f"from {', '.join(entry['sources'])}"
    )


_LABELS = {
    "input_price_per_mtok": "in",
    "output_price_per_mtok": "out",
    "cache_read_price_per_mtok": "cache read",
    "cache_write_price_per_mtok": "cache write",
    "reasoning_price_per_mtok": "reasoning",
}


def _rates(prices: dict[str, Any]) -> str:
    return ", ".join(f"{label} {prices[f]:g}" for f, label in _LABELS.items() if f in prices)
