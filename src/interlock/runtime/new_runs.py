"""A new run, before it is recorded: what refuses it (an id taken, inputs, a broken model
configuration), what it is recorded with (its id, its workflow's absolute path, the warnings of
its models), and its folder."""

from __future__ import annotations

import contextlib
import os
import re
import time
import unicodedata
import uuid
from pathlib import Path
from typing import Any

from interlock.core.inputs import resolve_inputs as resolve_declared
from interlock.core.loader import Definition, model_aliases
from interlock.errors import RunExists, RunNotFound, UsageError
from interlock.providers.config import UnknownModelError
from interlock.providers.config_files import ConfigError
from interlock.runtime.models import ModelRunner, unpriced
from interlock.storage.base import Store


def make_dir(path: Path) -> None:
    """`mkdir -p` that costs one system call when the parent exists (the usual case)."""
    try:
        os.mkdir(path)
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass


def refuse_broken_config(models: ModelRunner, definition: Definition) -> None:
    """Raise UsageError when the interlock.toml a pipeline's model workers read does not
    load (it does not parse, or a table is invalid): every call to a model would fail,
    so a run, or a rerun that calls even one model, is refused before it is recorded.
    Callable before any ledger is open."""
    if not model_aliases(definition):
        return
    try:
        models.config(driver_dir(definition.source))
    except ConfigError as exc:
        raise UsageError(
            f"{definition.source or definition.name}: nothing was recorded: {exc}"
        ) from None


def driver_dir(source: str) -> Path | None:
    """The directory of a workflow file, where its `interlock.toml` may sit."""
    return Path(source).parent.absolute() if source and not source.startswith("<") else None


def refuse_existing(store: Store, run_id: str) -> None:
    """Raise RunExists, with the commands that apply to that run, when the id is taken."""
    try:
        record = store.get_run(run_id)
    except RunNotFound:
        return
    status = record.summary.status
    commands = [f"'interlock status {run_id}'"]
    if status == "paused":
        commands.append(f"'interlock approve {run_id}'")
    if status in ("running", "waiting", "paused"):
        commands.append(f"'interlock resume {run_id}'")
    raise RunExists(
        f"run {run_id!r} already exists ({status}); to look at it or go on with it: "
        f"{', '.join(commands)}; for a new run give another --run-id (or none, for a fresh id)"
    )


def new_run_id(pipeline: str, now: float) -> str:
    """A sortable, readable id: pipeline, UTC time, and randomness against collisions.

    Any pipeline name gives a valid id: accents are dropped ("Café" -> "cafe"), other
    non-ASCII letters and punctuation become dashes, and a name with nothing left is "run".
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    plain = unicodedata.normalize("NFKD", pipeline).encode("ascii", "ignore").decode().lower()
    slug = "".join(c if c.isalnum() else "-" for c in plain)
    slug = re.sub("-+", "-", slug).strip("-")[:24].strip("-") or "run"
    return f"{slug}-{stamp}-{uuid.uuid4().hex[:12]}"  # 48 random bits: no clash at scale


def refuse_start_times(definition: Definition, topic: str, given: dict[str, Any]) -> None:
    """Refuse (UsageError) a run whose inputs make a `not_before` a time past 9999."""
    from interlock.core.waits import start_time_problems

    problems = start_time_problems(definition.pipeline, topic, given)
    if problems:
        raise UsageError(f"pipeline {definition.name!r}: {problems[0]}; nothing was recorded")


def resolve_inputs(definition: Definition, given: dict[str, Any]) -> dict[str, Any]:
    """Declared inputs, given ones converted to their type, defaults applied; see
    `interlock.core.inputs.resolve_inputs`."""
    return resolve_declared(definition.name, definition.pipeline.inputs, given)


def drop_empty(folders: list[Path]) -> None:
    """Remove the folders made for runs that were not recorded (only while still empty)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def recorded_source(source: str) -> str:
    """The workflow file a run records: absolute, so that `{workflow_dir}`, its config and a
    rerun find the same folder whichever folder the run is resumed or rerun from. A source
    that is no file path (a bundle's `<bundle NAME>`) is kept as it is."""
    if not source or source.startswith("<"):
        return source
    return os.path.abspath(source)


def model_warnings(
    models: ModelRunner,
    definition: Definition,
    *,
    local: bool,
    refuse_missing_keys: bool,
    known: dict[str, list[str]],
) -> list[str]:
    """A warning for each model alias only the offline stand-in answers (once per hash:
    `known` holds those said so far). `local`: this process runs the tasks itself.

    Raises:
        UsageError: an alias the configuration does not define, or whose provider's key
            is not set, when this process runs the tasks itself: the run would be
            recorded only to fail at its first call to it.
            A fleet's workers read their own configuration, so there it is left to them.
    """
    if refuse_missing_keys and local:
        # The first call to such a model would fail after the phases before it were paid
        # for. A fallback's key is needed only if its model fails: not refused.
        called = {w.model for p in definition.pipeline.phases for w in p.workers if w.model}
        # An interlock.toml that does not parse, or whose table for the alias is invalid,
        # fails every call the same way: refused too.
        missing: dict[str, None] = {}  # each message once (one bad file, many aliases)
        for alias in sorted(called):
            try:
                models.resolve(alias, driver_dir(definition.source))
            except ConfigError as exc:
                missing[str(exc)] = None
            except Exception:  # said below, or when the task runs
                continue
        if missing:
            raise UsageError(
                f"{definition.source or definition.name}: nothing was recorded: "
                + "\n".join(missing)
            )
    if definition.hash not in known:
        messages = []
        unknown: list[str] = []
        budget = definition.pipeline.budget
        capped = budget is not None and budget.max_cost_usd is not None
        for alias in sorted(model_aliases(definition)):
            try:
                resolved = models.resolve(alias, driver_dir(definition.source))
            except UnknownModelError as exc:
                unknown.append(str(exc))
                continue
            except Exception:  # other problems (a fallback's missing key) fail its task
                continue
            if resolved.offline_fallback:
                messages.append(
                    f"model {alias!r} has no provider configured: using the offline "
                    "provider (placeholder text). Configure it in interlock.toml."
                )
            elif capped and unpriced(resolved.model):
                messages.append(
                    f"the budget's max_cost_usd cannot see the calls to model {alias!r}: "
                    "no price is known for it, so they count $0; set "
                    f"input_price_per_mtok and output_price_per_mtok in [models.{alias}] "
                    "of interlock.toml"
                )
        if unknown and local:
            raise UsageError(
                f"{definition.source or definition.name}: nothing was recorded: "
                + "\n".join(unknown)
            )
        known[definition.hash] = messages
    return known[definition.hash]
