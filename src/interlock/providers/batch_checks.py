"""What `interlock check` says of workers whose models are sent in batches (`batch = true`):
the settings a batch cannot honour."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from interlock.core.workflow import Pipeline, Worker
from interlock.providers.config import ModelConfig
from interlock.providers.config_files import read_toml, tables

# The most a provider batch may take to complete (OpenAI's completion window, Anthropic's
# expiry). A longer `batch_window` is not refused, since the provider never sees it, but a
# call may then wait longer than that before its batch is even sent.
PROVIDER_BATCH_S = 24 * 3600


def batch_problems(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Workers with `tools:` on a batch model: a tool loop needs an answer per turn, which
    batch mode does not send."""
    problems: list[str] = []
    for phase, worker, alias in _batched(pipeline, config):
        if worker.tools:
            problems.append(
                f"pipeline {name!r}, phase {phase}, worker {worker.role!r}: model {alias!r} is "
                f"sent in batches ({_said(worker, alias)}), which cannot run the worker's tool "
                "loop: remove tools: or send its calls one by one"
            )
    return problems


def batch_warnings(name: str, pipeline: Pipeline, config: ModelConfig) -> list[str]:
    """Batch models that ask to stream, which a batch cannot do. (A worker's timeout needs
    no room for the batch: the time a call waits in one counts in no timeout.)"""
    warnings: list[str] = []
    for phase, worker, alias in _batched(pipeline, config):
        model = config.resolve(alias).for_worker(worker)
        assert model.batch is not None
        place = f"pipeline {name!r}, phase {phase}, worker {worker.role!r}: model {alias!r}"
        if model.settings.stream:
            warnings.append(f"{place} is sent in batches: stream = true is not honoured")
    return warnings


def window_warnings(
    name: str,
    pipeline: Pipeline,
    config: ModelConfig,
    file: str,
    line_of: Callable[[Sequence[Any]], int | None] = lambda _: None,
) -> list[str]:
    """A `batch_window` longer than a provider batch may take (24 h), on a worker (at its
    line of `file`) or on the alias it batches (at its line of the interlock.toml)."""
    found: dict[str, None] = {}
    for p, phase in enumerate(pipeline.phases):
        for w, worker in enumerate(phase.workers):
            for alias in dict.fromkeys([worker.model or "", *worker.fallback_models]):
                try:
                    model = config.resolve(alias).for_worker(worker)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                if model.batch is None or model.kind not in ("openai", "anthropic"):
                    continue
                window = model.batch.window_s
                if window <= PROVIDER_BATCH_S:
                    continue
                if worker.batch_window is not None:
                    line = line_of([name, "phases", p, "workers", w, "batch_window"])
                    where = f"{file}" + (f", line {line}" if line is not None else "")
                    where += f": pipeline {name!r}, worker {worker.role!r}: batch_window"
                else:
                    where = f"{_alias_place(config, alias)}: batch_window of [models.{alias}]"
                found[
                    f"{where} is {_hours(window)}, longer than a provider batch may take to "
                    f"complete ({_hours(PROVIDER_BATCH_S)}): a call may wait that long before its "
                    f"batch is sent, then up to {_hours(PROVIDER_BATCH_S)} more for its answer; "
                    "set it to 24h or less"
                ] = None
    return list(found)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h ({seconds:g} s)" if seconds != PROVIDER_BATCH_S else "24 h"


def _alias_place(config: ModelConfig, alias: str) -> str:
    """The file (and line, when found) of the `[models.<alias>]` table in force."""
    for path in config.loaded:
        try:
            text = Path(path).read_text(encoding="utf-8")
            if alias not in tables(read_toml(Path(path)), "models", Path(path)):
                continue
        except Exception:  # read already when the configuration loaded: not expected
            continue
        return f"{path}" + (f", line {line}" if (line := _key_line(text, alias)) else "")
    return "INTERLOCK_MODELS"


def _key_line(text: str, alias: str) -> int | None:
    """The line of `batch_window` in the `[models.<alias>]` table of `text`, if written so."""
    header = re.compile(r"\s*\[\s*models\s*\.\s*(\"?)" + re.escape(alias) + r"\1\s*\]")
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("["):
            inside = header.match(line) is not None
        elif inside and re.match(r"\s*batch_window\s*=", line):
            return number
    return None


def _said(worker: Worker, alias: str) -> str:
    """Where the batch mode of the worker's calls is asked for."""
    return "the worker's batch: true" if worker.batch else f"[models.{alias}] batch = true"


def _batched(pipeline: Pipeline, config: ModelConfig) -> list[tuple[str, Worker, str]]:
    found: list[tuple[str, Worker, str]] = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            for alias in dict.fromkeys([worker.model or "", *worker.fallback_models]):
                try:
                    model = config.resolve(alias).for_worker(worker)
                except Exception:  # an unknown alias: reported by the caller
                    continue
                if model.batch is not None and model.kind in ("openai", "anthropic"):
                    found.append((repr(phase.id), worker, alias))
    return found
