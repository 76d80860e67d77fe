"""Reading and validating the raw tables of `interlock.toml` (see `config` for the format).

Error messages name the file and the table and never echo a value, since a misplaced
value may be an API key.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from interlock.providers.settings import BUILTIN_PROVIDERS, ModelEntry, ProviderSettings


class ConfigError(Exception):
    """The model configuration is missing something or is invalid."""


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def tables(document: dict[str, Any], key: str, path: Path) -> dict[str, dict[str, Any]]:
    section = document.get(key, {})
    if not isinstance(section, dict) or not all(isinstance(t, dict) for t in section.values()):
        raise ConfigError(f"{path}: [{key}] must contain tables like [{key}.<name>]")
    for name, table in section.items():
        if "api_key" in table:
            # Never echo the value: it is probably a real key.
            raise ConfigError(
                f"{path}: [{key}.{name}] has api_key; keys are never read from interlock.toml. "
                "Put the key in an environment variable named by api_key_env, or in secrets_file."
            )
    return section


def env_models(spec: str) -> dict[str, dict[str, Any]]:
    models: dict[str, dict[str, Any]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        alias, _, target = item.partition("=")
        provider, _, model = target.partition(":")  # model ids may contain ':' themselves
        if not alias.strip() or not provider.strip() or not model.strip():
            raise ConfigError(
                f"INTERLOCK_MODELS: cannot read {item!r}; expected alias=provider:model"
            )
        models[alias.strip()] = {"provider": provider.strip(), "model": model.strip()}
    return models


def validation_message(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The problems of a table in words; an unknown key names the closest known one of
    `model` (`api_key_envv`: did you mean 'api_key_env'?)."""
    known = [f.alias or name for name, f in model.model_fields.items()] if model else []
    parts = []
    # include_input=False: a mistyped field may hold something secret.
    for e in exc.errors(include_input=False, include_url=False):
        place = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(e["loc"][-1]), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            parts.append(f"{place}: unknown key{hint}; remove it or check the spelling")
        else:
            parts.append(f"{place}: {_plain(e['msg'])}" if place else _plain(e["msg"]))
    return "; ".join(parts)


# The tables and keys an interlock.toml may hold at its top level, and who reads them.
TOP_LEVEL = {
    "providers": "[providers.NAME]",
    "models": "[models.ALIAS]",
    "prices": "[prices.MODEL]",
    "secrets_file": "secrets_file",
    "hooks": "[hooks.NAME] (interlock serve)",
    "retention": "[retention] (interlock prune)",
    "limits": "[limits] (spend caps)",
}


def unknown_top_level(document: Mapping[str, Any], path: Path) -> None:
    """Refuse a table or key no command reads (`[modles.fast]`): it would be ignored."""
    for key in document:
        if key not in TOP_LEVEL:
            close = difflib.get_close_matches(key, list(TOP_LEVEL), n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else ""
            raise ConfigError(
                f"{path}: [{key}] is not a table interlock reads{hint}; an interlock.toml "
                f"holds {', '.join(TOP_LEVEL.values())}"
            )


def _plain(message: str) -> str:
    # A check of our own reads as its own words, without the validator's label.
    return message.removeprefix("Value error, ")


def build_providers(
    raw: dict[str, tuple[Path, dict[str, Any]]],
) -> dict[str, ProviderSettings]:
    providers: dict[str, ProviderSettings] = {}
    for name in sorted({*BUILTIN_PROVIDERS, *raw}):
        origin, table = raw.get(name, (None, {}))
        fields = {**BUILTIN_PROVIDERS.get(name, {}), **table, "name": name}
        try:
            providers[name] = ProviderSettings.model_validate(fields)
        except ValidationError as exc:
            raise ConfigError(
                f"{origin}: [providers.{name}] is invalid: "
                f"{validation_message(exc, ProviderSettings)}"
            ) from None
    return providers


def build_models(
    raw: dict[str, tuple[str, dict[str, Any]]], providers: Mapping[str, ProviderSettings]
) -> dict[str, ModelEntry]:
    models: dict[str, ModelEntry] = {}
    for alias, (origin, table) in raw.items():
        try:
            entry = ModelEntry.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(
                f"{origin}: [models.{alias}] is invalid: {validation_message(exc, ModelEntry)}"
            ) from None
        if entry.provider not in providers:
            raise ConfigError(
                f"{origin}: [models.{alias}] uses provider {entry.provider!r}, which is not "
                f"defined. Add a [providers.{entry.provider}] table with a kind, or use one of: "
                f"{', '.join(sorted(providers))}"
            )
        models[alias] = entry
    return models
