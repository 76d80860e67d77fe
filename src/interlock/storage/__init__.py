"""Storage adapters: the ledger contract and its backends."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from interlock.errors import MissingExtra, StorageError, UsageError
from interlock.storage.base import (
    AppendBatch,
    CommandRecord,
    Lease,
    NewEvent,
    RunRecord,
    RunSummary,
    Store,
    StoredEvent,
)

__all__ = [
    "AppendBatch",
    "CommandRecord",
    "Lease",
    "NewEvent",
    "RunRecord",
    "RunSummary",
    "Store",
    "StoredEvent",
    "open_store",
]


def open_store(url: str | None, home: Path, **options: Any) -> Store:
    """The store a URL names: `sqlite:///path`, `postgresql://...`, `memory://`.

    Without a URL the embedded default is used: `<home>/ledger.db`. A password in the URL
    is masked from then on in every text this process masks (`redaction.protect_url`).
    """
    from interlock.providers.redaction import protect_url

    protect_url(url)
    if not url or url.startswith("sqlite:"):
        from interlock.storage.sqlite import SQLiteStore

        path = Path(url.removeprefix("sqlite://")) if url else home / "ledger.db"
        if not url:
            try:
                home.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"{home}: cannot create the state directory: {exc}") from None
        return SQLiteStore(path, **options)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            module = importlib.import_module("interlock.storage.postgres")
        except ImportError as exc:
            raise MissingExtra(
                f"the PostgreSQL store needs an extra: pip install 'interlock[postgres]' ({exc})"
            ) from None
        store: Store = module.PostgresStore(url, **options)
        return store
    if url == "memory://":
        from interlock.testing import MemoryStore

        return MemoryStore()
    raise UsageError(
        f"store {url!r} is not understood; use sqlite:///path/ledger.db or postgresql://host/db"
    )
