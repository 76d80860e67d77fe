"""What each model call of a pipeline can cost, as data for the worst-case quote.

`interlock.core.quote` is pure and takes prices and limits as values; this module reads them
from the configuration (`interlock.toml` over the bundled `genai-prices` table), with each
worker's `params` applied, as the runtime would call the model.
"""

from __future__ import annotations

from interlock.core.quote import ModelTerms
from interlock.core.workflow import Pipeline, Worker
from interlock.providers.config import ConfigError, ModelConfig
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
        resolved = config.resolve(alias).with_params(worker.params)
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
    # The dearest rate that can apply: a prompt may be written to the cache, an answer may
    # be all reasoning.
    input_rate = max(model.input_price_per_mtok, model.cache_write_price_per_mtok or 0.0)
    output_rate = max(model.output_price_per_mtok, model.reasoning_price_per_mtok or 0.0)
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
    )
