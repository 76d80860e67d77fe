"""Which interlock.toml a rerun's models resolve with: the source run's, unless told otherwise.

A run records the configuration files its models were resolved from (`run_created`'s
`config`, `run_config.config_origin`). A rerun started from another folder (an edited copy
of the workflow elsewhere, or another current directory) would find other files, or none,
and answer every alias with the offline stand-in without a word. So the rerun reads the
files its source recorded, as they are now; `--config` (INTERLOCK_CONFIG) is the way to
choose another. When the recorded files are all gone it resolves as any run would, and says
so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.errors import UsageError
from interlock.providers.config_paths import used_line

if TYPE_CHECKING:
    from interlock.core.loader import Definition
    from interlock.providers.config import ModelConfig
    from interlock.runtime.models import ModelRunner
    from interlock.storage.base import Store


@dataclass(frozen=True, kw_only=True)
class ConfigChoice:
    """The configuration a rerun uses: its `config:` line and what a plan says of it."""

    line: str | None  # None: the pipeline calls no model
    notes: tuple[str, ...] = ()


def choose_config(
    store: Store, models: ModelRunner, source: str, definition: Definition
) -> ConfigChoice:
    """Resolve the rerun's models with the files run `source` recorded (pinned in `models`
    for the rerun's workflow folder) when those differ from what that folder finds now.

    Raises:
        UsageError: a recorded file no longer loads.
    """
    from interlock.core.loader import model_aliases
    from interlock.runtime.new_runs import driver_dir
    from interlock.runtime.run_config import recorded_config

    if not model_aliases(definition):
        return ConfigChoice(line=None)
    folder = driver_dir(definition.source)
    try:
        found = models.config(folder)
    except Exception:  # refused with its own message (`refuse_broken_config`)
        return ConfigChoice(line=None)
    recorded = recorded_config(store, source)
    if recorded is None:  # recorded before runs kept it, or its pipeline called no model
        return ConfigChoice(line=found.used_line)
    paths = [str(entry.get("path")) for entry in recorded.get("files") or []]
    was = used_line([Path(p) for p in paths], recorded.get("env") or [])
    now = [str(p.absolute()) for p in found.loaded]
    if now == paths:
        return ConfigChoice(line=found.used_line)
    if "INTERLOCK_CONFIG" in found.env_sources:  # told otherwise: --config FILE
        note = f"run {source} resolved its models with {_files(was)}; this rerun uses --config"
        return ConfigChoice(line=found.used_line, notes=(note,))
    there = [p for p in paths if Path(p).is_file()]
    if not there:
        note = (
            f"run {source} resolved its models with {_files(was)}, which "
            f"{'is' if len(paths) == 1 else 'are'} gone: this rerun uses what "
            f"{definition.source or 'its folder'} finds now, {_files(found.used_line)}"
            " (give --config FILE to choose the file)"
        )
        return ConfigChoice(line=found.used_line, notes=(note,))
    finds = (
        f"{definition.source or 'its folder'} alone would find {_files(found.used_line)}"
        if found.loaded
        else f"from {definition.source or 'its folder'} no interlock.toml is found"
    )
    pinned = _load(there, source)
    models.pin(folder, pinned)
    note = (
        f"this rerun resolves its models with {_files(pinned.used_line)}, as run {source} did; "
        f"{finds} (give --config FILE to choose another)"
    )
    gone = [p for p in paths if p not in there]
    if gone:
        note += f"; {', '.join(gone)}, which run {source} read too, is gone"
    return ConfigChoice(line=pinned.used_line, notes=(note,))


def _load(paths: list[str], source: str) -> ModelConfig:
    from interlock.providers.config import ModelConfig

    try:
        return ModelConfig.load(paths)
    except Exception as exc:
        raise UsageError(
            f"the interlock.toml run {source} used no longer loads: {exc}; nothing was "
            "recorded. Fix it, or give --config FILE to use another"
        ) from None


def _files(line: str) -> str:
    """`config: A, B` as the files it names (`none` lines kept as they say)."""
    return line.removeprefix("config: ")
