"""Inbound webhooks: another system signals a run by POSTing JSON to `/api/hooks/{name}`.

Each hook is a table of `interlock.toml`:

    [hooks.payments]
    signal = "payment"                  # the signal it sends
    run_id = "metadata.run_id"          # where the run id is in the JSON body (a dotted path)
    data = "data"                       # the signal's data (a dotted path; unset: the body)
    key = "id"                          # an idempotency key (a dotted path; unset: the webhook-id)
    secret_env = "PAYMENTS_HOOK_SECRET" # the variable holding the hook's HMAC secret

A sender signs each delivery the Standard Webhooks way (standardwebhooks.com; Svix and others
send it as is): `webhook-id` names the delivery (the same on each retry of it),
`webhook-timestamp` is when it was sent (Unix seconds), and `webhook-signature` is `v1,` and
the base64 HMAC-SHA256, with the hook's secret, of `{id}.{timestamp}.{body}` (several
space-separated signatures are allowed, while a secret is rotated). A secret written
`whsec_<base64>` is those decoded bytes, as Standard Webhooks libraries read it; any other is
its own UTF-8 bytes. The signature is the hook's only credential (senders hold no API token),
so it is checked, in constant time, before anything else: a request that fails it spends
only the bucket of refused requests (`hook:NAME:refused`), never the hook's own, so a flood of
forged requests cannot starve the genuine sender. A timestamp more than `TOLERANCE` seconds
from this server's clock is refused, so a captured delivery cannot be replayed later, and the
signed id is the delivery's idempotency key (unless `key` names one in the body): within the
tolerance a replay is the same delivery, answered `"duplicate": true` without being a second
signal (and without spending the hook's bucket). Keys are kept for the run's life.

The earlier scheme, `X-Interlock-Signature: sha256=<hex HMAC of the body>`, signed no time
and no id, so any delivery could be replayed for ever with a new delivery-id header; it is
refused with a 401 that names the headers to send instead. Secrets are never read from the
file itself, as for model API keys.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import hmac
import os
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from interlock.core.workflow import SIGNAL_NAME
from interlock.errors import UsageError
from interlock.server import bodies
from interlock.server.auth import RateLimiter
from interlock.server.deps import resolve, service
from interlock.server.errors import ApiError
from interlock.server.service import Service

_PATH = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"


class HookTable(BaseModel):
    """One `[hooks.NAME]` table as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str = Field(pattern=SIGNAL_NAME.pattern)
    run_id: str = Field(pattern=_PATH)
    data: str | None = Field(default=None, pattern=_PATH)
    key: str | None = Field(default=None, pattern=_PATH)
    dedupe: Literal["auto"] = "auto"
    secret_env: str = Field(min_length=1)


LEGACY_HEADER = "X-Interlock-Signature"  # the earlier, replayable scheme (refused)
ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER = (
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
)
TOLERANCE = 300  # seconds a delivery's timestamp may be from this server's clock
SECRET_PREFIX = "whsec_"  # a Standard Webhooks secret: base64 after the prefix
_ID = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
# What each key of a hook table holds, for the errors that name it.
_FIELDS = {
    "signal": 'the signal it sends: a name of letters, digits and _ (like "payment")',
    "run_id": 'the dotted path of the run id in the JSON body (like "metadata.run_id")',
    "data": 'the dotted path of the signal\'s data in the body (like "data")',
    "key": 'the dotted path of an idempotency key in the body (like "id")',
    "dedupe": '"auto" (the default: the signed webhook-id, or `key`, names each delivery)',
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
    secret: bytes = field(repr=False)  # the HMAC key (a `whsec_` secret's decoded bytes)
    written: str = field(repr=False, default="")  # the secret as its variable holds it


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
        if table.get("dedupe") == "none":
            raise UsageError(
                f'{where}: dedupe = "none" is no longer offered: each delivery is named by its '
                "signed webhook-id, so distinct deliveries are never merged and a replayed one "
                "is never a second signal; remove the line"
            )
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
        key = _key(where, parsed.secret_env, secret)
        hooks[name] = Hook(name=name, table=parsed, secret=key, written=secret)
    return hooks


def _key(where: str, variable: str, secret: str) -> bytes:
    """The HMAC key a secret stands for: `whsec_<base64>` decoded, else its UTF-8 bytes."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise UsageError(
            f"{where}: {variable} starts with {SECRET_PREFIX!r} but what follows is not the "
            "base64 of at least 16 bytes (a Standard Webhooks secret); give the secret as the "
            "sender shows it, or a plain one without the prefix"
        )
    return key


def sign(secret: bytes, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` of a delivery: `v1,` and the base64 HMAC-SHA256 of
    `{id}.{timestamp}.{body}` (`secret`: the HMAC key, as `Hook.secret` holds it)."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()


def signed_headers(
    secret: bytes, body: bytes, delivery_id: str | None = None, timestamp: int | None = None
) -> dict[str, str]:
    """The headers a sender gives for `body` (a fresh id and the current time by default)."""
    delivery_id = delivery_id or f"msg_{uuid.uuid4().hex}"
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {
        ID_HEADER: delivery_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, delivery_id, timestamp, body),
    }


def verify(secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> str:
    """The signed delivery id of a request, or why it is refused (a 401): checked in constant
    time against every `v1` signature given, then the timestamp against `now`."""
    delivery_id = headers.get(ID_HEADER, "").strip()
    stamp = headers.get(TIMESTAMP_HEADER, "").strip()
    given = headers.get(SIGNATURE_HEADER, "").strip()
    if not (delivery_id and stamp and given):
        old = (
            f"; {LEGACY_HEADER} (an HMAC of the body alone, which anyone who saw one delivery "
            "could replay) is no longer accepted"
            if headers.get(LEGACY_HEADER)
            else ""
        )
        raise _refused(
            f"a delivery must be signed the Standard Webhooks way: headers {ID_HEADER}, "
            f"{TIMESTAMP_HEADER} (Unix seconds) and {SIGNATURE_HEADER}: v1,<base64 HMAC-SHA256 "
            f"of '{{id}}.{{timestamp}}.{{body}}' with the hook's secret>{old}"
        )
    if not _ID.match(delivery_id):
        raise _refused(f"{ID_HEADER} must be 1 to 200 printable ASCII characters, no spaces")
    if not _TIMESTAMP.match(stamp):
        raise _refused(f"{TIMESTAMP_HEADER} must be the time it was sent, in Unix seconds")
    expected = base64.b64decode(sign(secret, delivery_id, int(stamp), body)[3:])
    matched = False
    for item in given.split():
        version, _, value = item.partition(",")
        try:
            candidate = base64.b64decode(value, validate=True)
        except ValueError:
            continue
        # Every candidate is compared (no early exit), each in constant time.
        matched |= version == "v1" and hmac.compare_digest(candidate, expected)
    if not matched:
        raise _refused(
            f"no {SIGNATURE_HEADER} matches: it must be v1,<base64 HMAC-SHA256 of "
            f"'{{id}}.{{timestamp}}.{{body}}' with the hook's secret>"
        )
    skew = now - int(stamp)
    if abs(skew) > TOLERANCE:
        when = f"{round(skew)} s old" if skew > 0 else f"{round(-skew)} s in the future"
        raise _refused(
            f"the delivery's {TIMESTAMP_HEADER} is {when}; deliveries more than {TOLERANCE} s "
            "from this server's clock are refused (a replay, or a clock to set right)"
        )
    return delivery_id


def _refused(message: str) -> ApiError:
    return ApiError(401, "bad_signature", message)


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


class Seen:
    """Deliveries accepted in the last `TOLERANCE` seconds, by hook and signed id, with their
    answers: a replay (or the sender's retry) is answered from here, without touching the
    ledger or spending the hook's bucket. The ledger's key still catches what this process
    did not see (another server, a restart)."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._seen: OrderedDict[tuple[str, str], tuple[float, dict[str, Any]]] = OrderedDict()

    def get(self, hook: str, delivery_id: str, now: float) -> dict[str, Any] | None:
        """The answer given to this delivery, if it was accepted within the tolerance."""
        while self._seen and next(iter(self._seen.values()))[0] < now - TOLERANCE:
            self._seen.popitem(last=False)
        found = self._seen.get((hook, delivery_id))
        return None if found is None else found[1]

    def add(self, hook: str, delivery_id: str, now: float, answer: dict[str, Any]) -> None:
        """Remember an accepted delivery and its answer."""
        self._seen[hook, delivery_id] = (now, answer)
        self._seen.move_to_end((hook, delivery_id))
        while len(self._seen) > self.limit:
            self._seen.popitem(last=False)


router = APIRouter(prefix="/api")
Svc = Annotated[Service, Depends(service)]


@router.post("/hooks/{name}", status_code=202)
async def hook(request: Request, name: str, svc: Svc) -> dict[str, Any]:
    """Signal a run from another system: the delivery is signed with the hook's secret."""
    found = svc.config.hooks.get(name)
    if found is None:
        raise ApiError(404, "unknown_hook", f"no hook {name!r} is configured (see [hooks.*])")
    limiter: RateLimiter = request.app.state.limiter
    raw = await request.body()
    now = time.time()
    try:
        delivery_id = verify(found.secret, request.headers, raw, now)
    except ApiError:
        limiter.take(f"hook:{name}:refused")  # 429 once refused requests flood in
        raise
    seen: Seen = request.app.state.hook_deliveries
    answer = seen.get(name, delivery_id, now)
    if answer is not None:
        return {**answer, "accepted": "ignored", "duplicate": True}
    limiter.take(f"hook:{name}")
    document = bodies.parse(raw, "the hook's body")
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
    key = f"hook:{name}:webhook-id:{delivery_id}" if key is None else str(key)
    receipt = svc.api.signal(resolve(svc, run_id), table.signal, data, key=key, by=f"hook:{name}")
    svc.orchestrator.look_now()
    answer = {
        "run_id": receipt.run_id,
        "signal": receipt.name,
        "accepted": "ignored" if receipt.duplicate else "signal",
        "duplicate": receipt.duplicate,
        "message": receipt.note,
    }
    seen.add(name, delivery_id, now, answer)
    return answer
