"""What `interlock check` can say about a pipeline's model calls before any is made."""

from __future__ import annotations

import shutil
from pathlib import Path

from interlock.core.workflow import Pipeline
from interlock.providers.config import ModelConfig
from interlock.providers.request import unsupported


def settings_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Request settings a worker's models cannot be sent, one line per worker and model.

    Aliases that do not resolve are reported elsewhere; without any configuration every
    alias is the offline stand-in, which accepts every setting.
    """
    problems: list[str] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.model is None:
                continue
            for alias in dict.fromkeys([worker.model, *worker.fallback_models]):
                try:
                    model = config.resolve(alias).for_worker(worker)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                refused = unsupported(model.kind, model.settings)
                if refused is not None:
                    place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
                    source = "its params" if worker.params else f"[models.{alias}]"
                    problems.append(
                        f"{place}: model {alias!r} (provider {model.provider!r}): {refused}; "
                        f"remove the setting from {source}"
                    )
    return problems


def tool_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Workers whose `tools:` cannot run here: the MCP library is missing, or one of their
    models is an agent command, which makes its own calls."""
    problems: list[str] = []
    if not any(worker.tools for phase in pipeline.phases for worker in phase.workers):
        return problems  # the MCP library takes most of a second to import: only for tools
    from interlock.providers.mcp_tools import sdk_missing

    missing = sdk_missing()
    for phase in pipeline.phases:
        for worker in phase.workers:
            if not worker.tools:
                continue
            place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
            if missing is not None:
                problems.append(f"{place}: {missing}")
            for alias in dict.fromkeys([worker.model or "", *worker.fallback_models]):
                try:
                    kind = config.resolve(alias).kind
                except Exception:  # an unknown alias: reported by the caller
                    continue
                if kind == "cli":
                    problems.append(
                        f"{place}: model {alias!r} is an agent command, which cannot call the "
                        "worker's tools: use a model served over the OpenAI or Anthropic API"
                    )
    return problems


def tool_warnings(name: str, pipeline: Pipeline, folder: Path) -> list[str]:
    """Stdio tool servers whose command is not found here (nor in `folder`, where they
    start): a warning, since the host that runs the pipeline may have it."""
    warnings: list[str] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            for server in worker.tools:
                if server.mcp is None:
                    continue
                command = server.mcp[0]
                local = folder / command if "/" in command else None
                if shutil.which(command) is None and not (local and local.is_file()):
                    place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
                    warnings.append(
                        f"{place}: tool server command {command!r} is not found on PATH; the "
                        "worker's attempts fail unless the host that runs them has it"
                    )
    return warnings


def tier_warnings(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """A model sent at a service tier that no price table knows is charged at its standard
    rates: said before the run, with the table that would price it."""
    from interlock.providers.terms import model_prices

    warnings = []
    for entry in model_prices(pipeline, config):
        if entry["note"] and entry["source"]:
            table = f'[prices."{entry["model"]}".{entry["asked_tier"]}]'
            warnings.append(
                f"pipeline {name!r}: model {entry['alias']!r}: {entry['note']}; budgets count "
                f"its calls at those rates. Add {table} to interlock.toml with the tier's prices"
            )
    return warnings
