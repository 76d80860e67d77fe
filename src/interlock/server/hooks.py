"""Inbound webhooks: another system signals a run by POSTing JSON to `/api/hooks/{name}`.

Each hook is a table of `interlock.toml`:

    [hooks.payments]
    signal = "payment"                  # the signal it sends
    run_id = "metadata.run_id"          # where the run id is in the JSON body (a dotted path)
    data = "data"                       # the signal's data (a dotted path; unset: the body)
    key = "id"                          # an idempotency key (a dotted path; unset: see below)
    dedupe = "auto"                     # "auto" (the default) or "none"
    secret_env = "PAYMENTS_HOOK_SECRET" # the variable holding the hook's HMAC secret

Senders retry a delivery they think failed (a timeout, a 5xx), so the same delivery can
arrive twice; it must not become two signals. With `key` set, the value at that path is the
signal's idempotency key. Without it (`dedupe = "auto"`), the key is the sender's delivery id
when it sends one in a header (`DELIVERY_HEADERS`: GitHub's `X-GitHub-Delivery`, Standard
Webhooks' `webhook-id`, `Idempotency-Key`, ...), else the SHA-256 of the body: a retry sends
the same bytes, which the signature has already proven untouched. Keys are kept for the run's
life, so a second byte-identical body to the same run is taken as a retry; a sender whose
distinct deliveries can be byte-identical sets `key` or `dedupe = "none"`.

The sender signs the raw body with HMAC-SHA256 and sends `X-Interlock-Signature:
sha256=<hex>`. The signature is the hook's only credential (senders hold no API token), so it
is checked, in constant time, before the body is even parsed. Secrets are never read from
the file itself, as for model API keys.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from interlock.core.workflow import SIGNAL_NAME
from interlock.errors import UsageError
from interlock.server.auth import RateLimiter
from interlock.server.deps import resolve, service
from interlock.server.errors import ApiError
from interlock.server.service import Service

SIGNATURE_HEADER = "X-Interlock-Signature"
_PATH = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"


class HookTable(BaseModel):
    """One `[hooks.NAME]` table as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str = Field(pattern=SIGNAL_NAME.pattern)
    run_id: str = Field(pattern=_PATH)
    data: str | None = Field(default=None, pattern=_PATH)
    key: str | None = Field(default=None, pattern=_PATH)
    dedupe: Literal["auto", "none"] = "auto"
    secret_env: str = Field(min_length=1)


# Headers that senders use to name a delivery (the same on each retry of it), by precedence.
DELIVERY_HEADERS = (
    "Idempotency-Key",
    "X-GitHub-Delivery",
    "X-Gitlab-Event-UUID",
    "webhook-id",  # Standard Webhooks (Svix and others)
    "X-Delivery-Id",
    "X-Webhook-Id",
)
# What each key of a hook table holds, for the errors that name it.
_FIELDS = {
    "signal": 'the signal it sends: a name of letters, digits and _ (like "payment")',
    "run_id": 'the dotted path of the run id in the JSON body (like "metadata.run_id")',
    "data": 'the dotted path of the signal\'s data in the body (like "data")',
    "key": 'the dotted path of an idempotency key in the body (like "id")',
    "dedupe": '"auto" (a delivery id header, else the body\'s hash) or "none"',
    "secret_env": "the name of the environment variable that holds the hook's HMAC secret",
}


def _problem(error: Any) -> str:
    """One pydantic error about a hook table as the fix: which key, what it must hold."""
    loc = error["loc"]
    name = str(loc[0]) if loc else ""
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(name, list(_FIELDS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key {name!r}: {hint}the keys are {', '.join(_FIELDS)}"
    if error["type"] == "missing":
        return f"{name} is missing: set it to {_FIELDS.get(name, 'a value')}"
    # The values of a hook table are names and paths, never secrets (`secret` is refused
    # before this), so the one given is shown.
    given = error.get("input")
    return f"{name} = {given!r} is wrong: it must be {_FIELDS.get(name, 'valid')}"


@dataclass(frozen=True, kw_only=True)
class Hook:
    """A configured hook, with its secret (never shown)."""

    name: str
    table: HookTable
    secret: bytes = field(repr=False)


def load_hooks(path: Path, env: Mapping[str, str] | None = None) -> dict[str, Hook]:
    """The `[hooks.*]` tables of `path` (an interlock.toml); errors name the table and the fix."""
    import tomllib

    environ = os.environ if env is None else env
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the hooks: {exc}") from None
    section = document.get("hooks", {})
    if not isinstance(section, dict):
        raise UsageError(f"{path}: [hooks] must hold tables like [hooks.<name>]")
    hooks = {}
    for name, table in section.items():
        where = f"{path}: [hooks.{name}]"
        if not isinstance(table, dict):
            raise UsageError(f"{where} must be a table")
        if "secret" in table:  # never echo it: it is probably real
            raise UsageError(
                f"{where} has secret; secrets are never read from interlock.toml: put it in an "
                "environment variable and name it with secret_env"
            )
        try:
            parsed = HookTable.model_validate(table)
        except ValidationError as exc:
            problems = "; ".join(_problem(e) for e in exc.errors(include_url=False))
            raise UsageError(f"{where}: {problems}") from None
        secret = environ.get(parsed.secret_env, "")
        if len(secret.encode()) < 16:
            raise UsageError(
                f"{where}: the environment variable {parsed.secret_env} must hold the hook's "
                "secret (at least 16 bytes, e.g. openssl rand -hex 32)"
            )
        hooks[name] = Hook(name=name, table=parsed, secret=secret.encode())
    return hooks


def signature(secret: bytes, body: bytes) -> str:
    """The header value a sender gives: `sha256=` and the hex HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def pick(document: Any, path: str) -> Any:
    """The value at a dotted path of a JSON document (KeyError naming the path if none)."""
    value = document
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(path)
    return value


def _delivery_key(found: Hook, request: Request, raw: bytes) -> str | None:
    """Without a `key` path: the sender's delivery id, else the body's hash (see above)."""
    if found.table.key is not None or found.table.dedupe == "none":
        return None
    for header in DELIVERY_HEADERS:
        value = request.headers.get(header, "").strip()
        if value:
            return f"hook:{found.name}:{header.lower()}:{value[:200]}"
    return f"hook:{found.name}:sha256:{hashlib.sha256(raw).hexdigest()}"


router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]


@router.post("/hooks/{name}", status_code=202)
async def hook(request: Request, name: str, svc: Svc) -> dict[str, Any]:
    """Signal a run from another system: the body is signed with the hook's secret."""
    found = svc.config.hooks.get(name)
    if found is None:
        raise ApiError(404, "unknown_hook", f"no hook {name!r} is configured (see [hooks.*])")
    limiter: RateLimiter = request.app.state.limiter
    limiter.take(f"hook:{name}")
    raw = await request.body()
    given = request.headers.get(SIGNATURE_HEADER, "")
    if not hmac.compare_digest(given.encode(), signature(found.secret, raw).encode()):
        raise ApiError(
            401,
            "bad_signature",
            f"the {SIGNATURE_HEADER} header must be sha256=<hex HMAC-SHA256 of the body "
            "with the hook's secret>",
        )
    try:
        document = json.loads(raw)
    except ValueError:
        raise ApiError(400, "bad_request", "the hook's body must be JSON") from None
    table = found.table
    try:
        run_id = pick(document, table.run_id)
        data = document if table.data is None else pick(document, table.data)
        key = None if table.key is None else pick(document, table.key)
    except KeyError as missing:
        raise ApiError(
            400, "bad_request", f"the hook's body has no {missing.args[0]!r} (see [hooks.{name}])"
        ) from None
    if not isinstance(run_id, str):
        raise ApiError(400, "bad_request", f"{table.run_id!r} must be a run id (text)")
    key = _delivery_key(found, request, raw) if key is None else str(key)
    receipt = svc.api.signal(resolve(svc, run_id), table.signal, data, key=key, by=f"hook:{name}")
    svc.orchestrator.look_now()
    return {
        "run_id": receipt.run_id,
        "signal": receipt.name,
        "accepted": "ignored" if receipt.duplicate else "signal",
        "duplicate": receipt.duplicate,
        "message": receipt.note,
    }
