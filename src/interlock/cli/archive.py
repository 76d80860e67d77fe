"""Commands that move a run between stores and check its history: export, import, verify."""

from __future__ import annotations

from pathlib import Path

import click

from interlock.cli.base import Ctx, handle_errors, out, pass_ctx, when
from interlock.errors import RunNotFound, VerificationFailed


@click.command("export")
@click.argument("run_id")
@click.option(
    "--output", "-o", "target", required=True, type=click.Path(dir_okay=False), help="The file."
)
@pass_ctx
@handle_errors
def export(ctx: Ctx, run_id: str, target: str) -> None:
    """Write a run (definition, events, outputs, prompts, hashes) to one .tar.gz file."""
    from interlock.runtime import bundle

    app = ctx.app
    run_id = app.resolve(run_id)
    manifest = bundle.export_run(app.store, app.home, run_id, Path(target))
    head = (manifest["chain_head"] or "none")[:16]
    folder = sum(1 for name in manifest["files"] if name.startswith("run/"))
    out.print(
        f"exported {run_id} to {target}: {manifest['events']} events, "
        f"{len(manifest['files'])} files ({folder} of the run's folder), chain head {head}"
    )


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--run-id", help="Import under this id instead of the exported one.")
@pass_ctx
@handle_errors
def import_(ctx: Ctx, file: str, run_id: str | None) -> None:
    """Verify a bundle from 'interlock export' and add its run to this store."""
    from interlock.runtime import bundle

    app = ctx.app
    done = bundle.import_run(app.store, app.home, Path(file), run_id=run_id)
    chain = "the same chain" if done.same_chain else "a new chain (new run id)"
    out.print(
        f"imported {done.run_id} ({done.status}, {done.events} events, {chain}); "
        f"rerun it with: interlock rerun {done.run_id}"
    )


@click.command()
@click.argument("target")
@pass_ctx
@handle_errors
def verify(ctx: Ctx, target: str) -> None:
    """Check a bundle FILE or a stored RUN against its hashes (exit 6 if it fails)."""
    from interlock.runtime import bundle

    path = Path(target)
    if path.is_file():
        found = bundle.read_bundle(path)
        report, head = found.report, found.manifest.get("chain_head")
        listed = len(found.manifest.get("files") or {})
        what = (
            f"bundle {target} (run {found.run_id}, {listed} files, {len(found.files)} of "
            "the run's folder)"
        )
        # A bundle of a run pruned here must end where the run's recorded history ended.
        known = ctx.missing_ledger() is None
        receipt = ctx.store.pruned_run(found.run_id) if known else None
        if receipt is not None and receipt.chain_head != head:
            raise VerificationFailed(
                f"{target}: run {found.run_id} was pruned from this store with chain head "
                f"{receipt.chain_head or 'none'}, but the bundle ends in {head or 'none'}: "
                "the copy differs from the history that was recorded"
            )
        if receipt is not None:
            what += ", the same history as the receipt of its prune"
    else:
        app = ctx.app
        receipt = app.store.pruned_run(target)
        if receipt is not None:
            raise RunNotFound(
                f"run {target} was pruned on {when(receipt.pruned_at)}: its history is no longer "
                f"stored; it had {receipt.last_seq} events, the last with hash "
                f"{receipt.chain_head or 'none'} (a copy exported before, checked with "
                "'interlock verify FILE', must end in the same hash)"
            )
        run_id = app.resolve(target)
        check = bundle.verify_run(app.store, run_id)
        report, head = check.report, check.head
        what = f"run {run_id} ({check.bodies} stored outputs)"
    unchained = f", {report.unchained} recorded before the chain" if report.unchained else ""
    out.print(f"verified {what}: {report.events} events{unchained}; chain head {head or 'none'}")


COMMANDS = [export, import_, verify]
