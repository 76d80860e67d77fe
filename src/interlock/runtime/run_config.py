"""Which model configuration a run was created with, and what `status` says of it since.

A run records, in its `run_created`, the interlock.toml files its models were resolved from
(in the order of `providers.config_paths`, first winning) with each file's SHA-256, so that
`status` names the file the run used, not the one a command finds now; and says when that
file changed or is gone since.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interlock.core.loader import Definition
    from interlock.runtime.models import ModelRunner
    from interlock.storage.base import Store


def config_origin(models: ModelRunner | None, definition: Definition) -> dict[str, Any]:
    """The `config` field of a new run's `run_created` (empty when there is no model runner
    or the pipeline calls no model, or when its configuration cannot be read: that refuses
    the run, or fails its calls, with its own message)."""
    if models is None or not any(w.model for p in definition.pipeline.phases for w in p.workers):
        return {}
    source = definition.source
    folder = Path(source).parent.absolute() if source and not source.startswith("<") else None
    try:
        config = models.config(folder)
    except Exception:
        return {}
    files = [
        {"path": str(path.absolute()), "sha256": digest}
        for path, digest in zip(config.loaded, config.digests, strict=True)
    ]
    return {
        "config": {
            "files": files,
            "explicit": "INTERLOCK_CONFIG" in config.env_sources,
            "env": [s for s in config.env_sources if s != "INTERLOCK_CONFIG"],
        }
    }


def config_report(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded configuration with each file's state now: `unchanged`, `changed` or
    `gone` (what `status --json` gives as `config`)."""
    from interlock.providers.config_paths import file_sha256

    files = []
    for entry in recorded.get("files") or []:
        now = file_sha256(Path(str(entry.get("path"))))
        state = "gone" if now is None else "unchanged" if now == entry.get("sha256") else "changed"
        files.append({**entry, "state": state})
    return {**recorded, "files": files}


def config_view(recorded: dict[str, Any] | None) -> dict[str, Any] | None:
    """The recorded configuration as the API and the dashboard show it: each file's path
    and SHA-256, and whether the first was named by --config or INTERLOCK_CONFIG (None: a
    run recorded none). Only those: the environment variables that defined models are left
    out, so that a reader of the API learns nothing of where a deployment keeps its
    settings but the files' names."""
    if recorded is None:
        return None
    files = [
        {"path": str(entry.get("path")), "sha256": str(entry.get("sha256"))}
        for entry in recorded.get("files") or []
    ]
    return {"files": files, "explicit": bool(recorded.get("explicit"))}


def with_states(view: dict[str, Any]) -> dict[str, Any]:
    """`config_view`'s files, each with its state now (`config_report`'s `state`)."""
    return {**view, "files": config_report(view)["files"]}


def config_line(report: dict[str, Any], *, elsewhere: bool = False) -> str:
    """`config: FILE`: the files of `config_report`, each said changed or gone when it is,
    and the environment variables that defined models (`elsewhere`: a command here finds
    other files now, so the line says these are the run's own)."""
    shown = []
    for index, entry in enumerate(report["files"]):
        name = str(entry["path"])
        if index == 0 and report.get("explicit"):
            name += " (named by --config or INTERLOCK_CONFIG)"
        if entry["state"] == "changed":
            name += " (changed since the run started)"
        elif entry["state"] == "gone":
            name += " (gone since the run started)"
        shown.append(name)
    shown += list(report.get("env") or [])
    if not shown:
        return (
            "config: none found when the run started "
            "(every model alias answered with the offline stand-in)"
        )
    return f"config: {', '.join(shown)}" + " (as the run was started)" * elsewhere


def recorded_config(store: Store, run_id: str) -> dict[str, Any] | None:
    """The `config` its `run_created` recorded (None: a run recorded before runs kept it, or
    one whose pipeline calls no model)."""
    first = store.events(run_id, 0, 1)
    if not first or first[0].kind != "run_created":
        return None
    config = first[0].data.get("config")
    return config if isinstance(config, dict) else None
