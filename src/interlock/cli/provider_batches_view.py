"""`interlock batches --provider`: the batches sent to providers' batch APIs."""

from __future__ import annotations

from interlock.cli.base import Ctx, out


def show_provider_batches(ctx: Ctx, limit: int) -> None:
    """Print the ledger's provider batches, newest first."""
    from rich.table import Table

    from interlock.cli.base import when
    from interlock.core.provider_batches import RequestState
    from interlock.runtime.shared_limits import ledger_of, open_batches

    if ctx.missing_ledger() is not None:
        out.print("no provider batches")
        return
    store = open_batches(ledger_of(ctx.store))
    try:
        found = list(reversed(store.batches()))[:limit]
        if not found:
            out.print("no provider batches")
            return
        table = Table(box=None, pad_edge=False)
        for column in ("tag", "provider", "alias", "batch id", "state", "provider status",
                       "submitted", "requests", "answered", "failed"):  # fmt: skip
            table.add_column(column)
        for batch in found:
            states = [r.state for r in store.requests_in(batch.tag)]
            table.add_row(
                batch.tag,
                batch.provider,
                batch.alias,
                batch.provider_batch_id or "-",
                str(batch.state),
                batch.provider_status or "-",
                when(batch.submitted_at) if batch.submitted_at else "-",
                str(batch.requests),
                str(states.count(RequestState.DONE)),
                str(states.count(RequestState.FAILED)),
            )
        out.print(table)
    finally:
        store.close()
