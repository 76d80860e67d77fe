"""Commands that move a run between stores and check its history: export, import, verify,
and the keys that sign bundles (keygen) and the trust an imported run needs (trust)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from interlock.cli.base import Ctx, err, handle_errors, out, pass_ctx, when
from interlock.errors import RunNotFound, VerificationFailed

if TYPE_CHECKING:
    from interlock.runtime.bundle import Bundle
    from interlock.runtime.bundle_read import Limits


def _reading(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of commands that read a bundle: the signer's key and the size limits."""
    options = [
        click.option(
            "--public-key",
            type=click.Path(dir_okay=False),
            help="Check the bundle's signature against this public key (exit 8 if it fails).",
        ),
        click.option(
            "--max-size",
            default="1GiB",
            show_default=True,
            help="Refuse a bundle whose members hold more than this in all.",
        ),
        click.option(
            "--max-member-size",
            default="256MiB",
            show_default=True,
            help="Refuse a bundle with a member larger than this.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _limits(max_size: str, max_member_size: str) -> Limits:
    from interlock.runtime.bundle_read import Limits, parse_size

    return Limits(total=parse_size(max_size), member=parse_size(max_member_size))


def _key(public_key: str | None) -> bytes | None:
    from interlock.runtime import signing

    return None if public_key is None else signing.public_key(Path(public_key))


def _describe(found: Bundle) -> None:
    """What a bundle's definition would run, and how far it is vouched for."""
    out.print(f"  {found.trust}", highlight=False, soft_wrap=True)
    if found.runs:
        out.print(
            f"  its definition runs {len(found.runs)} program(s) or function(s) on the "
            "machine that drives it:",
            highlight=False,
        )
        for line in found.runs:
            out.print(f"    {line}", highlight=False, markup=False, soft_wrap=True)
    else:
        out.print("  its definition runs no command, call: or tool server", highlight=False)
    withheld = found.manifest.get("withheld") or {}
    if withheld:
        out.print(f"  {len(withheld)} file(s) of the run's folder were left out at export:")
        for name, why in sorted(withheld.items()):
            out.print(f"    {name}: {why}", highlight=False, markup=False)


@click.command("export")
@click.argument("run_id")
@click.option(
    "--output", "-o", "target", required=True, type=click.Path(dir_okay=False), help="The file."
)
@click.option(
    "--sign-key",
    type=click.Path(dir_okay=False),
    help="Sign the bundle with this ed25519 private key (see 'interlock keygen').",
)
@pass_ctx
@handle_errors
def export(ctx: Ctx, run_id: str, target: str, sign_key: str | None) -> None:
    """Write a run (definition, events, outputs, prompts, hashes) to one .tar.gz file.

    Prompts and logs are masked as every view of them is; files the run's history does not
    bind (and a record holding a key configured since it was kept) are left out, named.
    """
    from interlock.runtime import bundle

    app = ctx.app
    run_id = app.resolve(run_id)
    done = bundle.export_run(
        app.store,
        app.home,
        run_id,
        Path(target),
        sign_key=None if sign_key is None else Path(sign_key),
    )
    manifest = done.manifest
    head = (manifest["chain_head"] or "none")[:16]
    folder = sum(1 for name in manifest["files"] if name.startswith("run/"))
    signed = "unsigned" if done.signer is None else f"signed by {done.signer}"
    out.print(
        f"exported {run_id} to {target}: {manifest['events']} events, "
        f"{len(manifest['files'])} files ({folder} of the run's folder), chain head {head}, "
        f"{signed}",
        highlight=False,
    )
    for name, why in sorted(done.withheld.items()):
        err.print(f"left out {name}: {why}", highlight=False, markup=False, soft_wrap=True)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--run-id", help="Import under this id instead of the exported one.")
@click.option(
    "--trust-bundle",
    is_flag=True,
    help="Trust its definition: the run may be driven (its commands and calls run).",
)
@_reading
@pass_ctx
@handle_errors
def import_(
    ctx: Ctx,
    file: str,
    run_id: str | None,
    trust_bundle: bool,
    public_key: str | None,
    max_size: str,
    max_member_size: str,
) -> None:
    """Verify a bundle from 'interlock export' and add its run to this store.

    The run is inert: no orchestrator takes it up and nothing of its definition runs until
    you trust it ('interlock trust RUN', or --trust-bundle here); 'interlock rerun RUN
    --workflow FILE' runs your own workflow on its outputs.
    """
    from interlock.runtime import bundle

    limits = _limits(max_size, max_member_size)
    key = _key(public_key)
    app = ctx.app
    done = bundle.import_run(
        app.store, app.home, Path(file), run_id=run_id, limits=limits, public_key=key,
        trust=trust_bundle,
    )  # fmt: skip
    chain = "the same chain" if done.same_chain else "a new chain (new run id)"
    state = "trusted" if done.trusted else "inert"
    out.print(
        f"imported {done.run_id} ({done.status}, {done.events} events, {chain}); {state}",
        highlight=False,
    )
    _describe(done.bundle)
    from interlock.runtime.orchestrator import imported_next

    step = imported_next(done.run_id, done.status, trusted=done.trusted)
    if not done.trusted:
        step = f"nothing of it runs until you say so. {step}"
    out.print(step, highlight=False, soft_wrap=True)


@click.command()
@click.argument("target")
@_reading
@pass_ctx
@handle_errors
def verify(
    ctx: Ctx, target: str, public_key: str | None, max_size: str, max_member_size: str
) -> None:
    """Check a bundle FILE or a stored RUN against its hashes (exit 6 if it fails, 8 if its
    signature does not match --public-key)."""
    from interlock.runtime import bundle

    path = Path(target)
    found: Bundle | None = None
    if path.is_file():
        with tempfile.TemporaryDirectory(prefix="interlock-verify-") as folder:
            found = bundle.read_bundle(
                path,
                Path(folder),
                limits=_limits(max_size, max_member_size),
                public_key=_key(public_key),
            )
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
        if check.imported_head is not None:
            what += f", imported from a bundle ending in {check.imported_head}"
    unchained = f", {report.unchained} recorded before the chain" if report.unchained else ""
    out.print(
        f"verified {what}: {report.events} events{unchained}; chain head {head or 'none'}",
        highlight=False,
    )
    if found is not None:
        _describe(found)


@click.command()
@click.argument("path", type=click.Path(dir_okay=False))
@handle_errors
def keygen(path: str) -> None:
    """Make an ed25519 key pair to sign bundles: PATH (private, mode 0600) and PATH.pub."""
    from interlock.runtime import signing

    public, fingerprint = signing.keygen(Path(path))
    out.print(
        f"wrote {path} (keep it private) and {public} ({fingerprint}); sign with: interlock "
        f"export RUN -o FILE --sign-key {path}; check with: interlock verify FILE "
        f"--public-key {public}",
        highlight=False,
        soft_wrap=True,
    )


@click.command()
@click.argument("run_id")
@pass_ctx
@handle_errors
def trust(ctx: Ctx, run_id: str) -> None:
    """Trust an imported run's definition: it may then be driven (resume, approve, signal,
    serve), and its commands and calls run."""
    from interlock.core.loader import Definition
    from interlock.runtime import bundle

    app = ctx.app
    run_id = app.resolve(run_id)
    record = app.store.get_run(run_id)
    pipeline = Definition.from_canonical(
        record.pipeline, app.store.definition(record.definition_hash)
    ).pipeline
    bundle.trust_run(app.store, run_id)
    runs = bundle.runs_what(pipeline)
    out.print(f"trusted {run_id}: its definition may run {len(runs)} program(s) or function(s)")
    for line in runs:
        out.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    from interlock.runtime.orchestrator import imported_next

    status = app.store.get_run(run_id).summary.status
    out.print(imported_next(run_id, status, trusted=True), highlight=False, soft_wrap=True)


COMMANDS = [export, import_, verify, keygen, trust]
