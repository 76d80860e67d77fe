"""Where `interlock.toml` is looked for, in order; kept apart from `config` so a command
that only names the files (`status`) does not import what reads them.

The order, first file winning where two define the same provider or alias:

1. ``--config FILE`` or ``INTERLOCK_CONFIG`` (read by `config.ModelConfig.load`);
2. the workflow file's folder;
3. the current directory and its parents up to the project root: the nearest folder holding
   ``.git``; outside a repository, the current directory alone (a parent such as ``/tmp`` is
   nobody's project, and a file planted there is never read);
4. the state directory (``--home``, default ``./.interlock``);
5. the user's file, ``$XDG_CONFIG_HOME/interlock/interlock.toml`` (default
   ``~/.config/interlock/interlock.toml``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

CONFIG_NAME = "interlock.toml"
PROJECT_MARKERS = (".git",)


def user_config(env: Mapping[str, str]) -> Path:
    """The user's own interlock.toml (it need not exist)."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "interlock" / CONFIG_NAME


def project_dirs(start: Path) -> list[Path]:
    """`start` and its parents up to the nearest one holding a project marker (included);
    `start` alone when no parent holds one."""
    chain = [start, *start.parents]
    for index, folder in enumerate(chain):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return chain[: index + 1]
    return [start]


def config_candidates(
    workflow_dir: Path | None,
    home: Path | None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Path]:
    """The files looked at for a workflow in `workflow_dir`, in order, without repeats (the
    explicit file of INTERLOCK_CONFIG comes before them all and is not listed here)."""
    environ = os.environ if env is None else env
    here = (cwd or Path.cwd()).absolute()
    folders = [workflow_dir.absolute()] if workflow_dir is not None else []
    folders += project_dirs(here)
    if home is not None:
        folders.append(home.absolute())
    files = [folder / CONFIG_NAME for folder in folders] + [user_config(environ)]
    return list(dict.fromkeys(files))


def unread_configs(
    workflow_dir: Path | None, searched: Sequence[Path], *, cwd: Path | None = None
) -> list[Path]:
    """The interlock.toml files above the workflow's folder or the current directory that
    the order above does not read: a user who keeps one there means it for this workflow,
    so an alias it defines is never left to the offline stand-in without a word."""
    here = (cwd or Path.cwd()).absolute()
    starts = [workflow_dir.absolute()] if workflow_dir is not None else []
    found: dict[Path, None] = {}
    for start in [*starts, here]:
        for folder in [start, *start.parents]:
            path = folder / CONFIG_NAME
            if path not in searched and path.is_file():
                found[path] = None
    return list(found)


def file_sha256(path: Path) -> str | None:
    """The SHA-256 of a file's bytes; None when it is gone or cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def used_line(loaded: Sequence[Path], env_sources: Sequence[str]) -> str:
    """The line `check`, `run` and `status` print: which configuration the models use."""
    used = [str(p) for p in loaded] + [s for s in env_sources if s != "INTERLOCK_CONFIG"]
    if not used:
        return "config: none found (every model alias answers with the offline stand-in)"
    return f"config: {', '.join(used)}"


def found_line(workflow_dir: Path | None, home: Path | None) -> str:
    """`used_line` of the files that exist now, without reading them (what a command that
    drives the run from here reads)."""
    environ = os.environ
    explicit = environ.get("INTERLOCK_CONFIG")
    files = [Path(explicit)] if explicit and Path(explicit).is_file() else []
    files += [p for p in config_candidates(workflow_dir, home, env=environ) if p.is_file()]
    sources = ["INTERLOCK_MODELS"] if environ.get("INTERLOCK_MODELS") else []
    return used_line(list(dict.fromkeys(files)), sources)
