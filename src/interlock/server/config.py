"""What a server is told on the command line: address, workflows, auth, sinks, limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from interlock.errors import UsageError
from interlock.providers.redaction import protect, protect_url

if TYPE_CHECKING:
    from interlock.server.hooks import Hook

LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


def is_loopback(host: str) -> bool:
    """True when `host` only accepts connections from this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


SECRET_FILE_LIMIT = 64 * 1024  # bytes read of a secret file: a secret is a line


def read_secret_file(path: Path) -> str:
    """The token secret kept in `path`: its first line, without surrounding whitespace (as
    `openssl rand -hex 32 > FILE` or a container's secret mount leaves it)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(SECRET_FILE_LIMIT)
    except OSError as exc:
        raise UsageError(
            f"--auth-secret-file {path}: cannot read it ({exc.strerror or exc}); "
            "name a readable file holding the secret"
        ) from None
    text = data.decode("utf-8", "replace")
    secret = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise UsageError(
            f"--auth-secret-file {path} is empty: write the secret into it "
            f"(e.g. openssl rand -hex 32 > {path})"
        )
    return secret


@dataclass(kw_only=True)
class ServerConfig:
    """Settings of one `interlock serve` process."""

    home: Path
    store_url: str | None = field(default=None, repr=False)  # may hold a password
    dispatch: str = "local"  # "local": this process runs tasks; "queue": `interlock worker`s do
    host: str = "127.0.0.1"
    port: int = 8765
    workflows: list[Path] = field(default_factory=list)
    # HS256 secret for bearer tokens; None: no auth (loopback). Never in a repr.
    auth_secret: str | None = field(default=None, repr=False)
    insecure: bool = False  # allow serving off loopback without auth
    allowed_origins: list[str] = field(default_factory=list)  # beside the server's own
    webhooks: list[str] = field(default_factory=list, repr=False)  # a URL is often its key
    rate_limit: float = 30.0  # mutating requests per minute per token (or client address)
    rate_burst: int = 10
    read_rate_limit: float = 1200.0  # reads per minute per token (or client address)
    read_burst: int = 300
    max_body: int = 64 * 1024  # bytes of a request body
    header_timeout: float = 10.0  # seconds for a request's headers, from its first byte
    body_timeout: float = 30.0  # seconds for a request's body, after its headers
    queue_size: int = 1000  # messages a slow stream client may fall behind before it is dropped
    schedules: bool = True
    schedule_catch_up: float = 600.0  # a slot missed by at most this many seconds still runs
    heartbeat: float = 0.5
    lease_ttl: float = 15.0
    otel: bool = False
    hooks: dict[str, Hook] = field(default_factory=dict)  # inbound webhooks that send signals

    def check(self) -> None:
        """Refuse settings that would expose runs to the network without protection."""
        if not is_loopback(self.host) and not self.auth_secret and not self.insecure:
            raise UsageError(
                f"serving on {self.host} (not loopback) needs auth: set --auth-secret-file "
                "(or INTERLOCK_AUTH_SECRET_FILE, or INTERLOCK_AUTH_SECRET), or pass "
                "--insecure to accept anyone who can connect"
            )
        if self.auth_secret is not None:
            check_secret_length(self.auth_secret)
        for name in ("rate_limit", "read_rate_limit"):
            if not getattr(self, name) > 0:
                option = "--" + name.replace("_", "-")
                raise UsageError(f"{option} must be a positive number of requests per minute")
        for name in ("header_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                option = "--" + name.replace("_", "-")
                raise UsageError(f"{option} must be a positive number of seconds")
        for url in self.webhooks:
            if not url.startswith(("http://", "https://")):
                # Never repeated: a webhook's URL is often its key.
                raise UsageError("each --webhook must be an http:// or https:// URL")

    def protect_secrets(self) -> None:
        """Have every text this process masks mask the server's own secrets too: the token
        secret, each hook's secret, the store's password and each webhook's URL."""
        protect(self.auth_secret)
        for hook in self.hooks.values():
            protect(hook.written)  # as its variable holds it (the HMAC key may be decoded)
        protect_url(self.store_url)
        for url in self.webhooks:
            protect(url)

    @property
    def auth_required(self) -> bool:
        """Tokens are checked whenever a secret is configured (loopback or not)."""
        return self.auth_secret is not None


MIN_AUTH_SECRET = 32  # bytes: HS256 wants a key at least as long as its hash


def check_secret_length(secret: str) -> None:
    """Refuse a token secret too short to sign with (UsageError, exit 2)."""
    if len(secret.encode()) < MIN_AUTH_SECRET:
        raise UsageError(
            f"the auth secret is too short: use at least {MIN_AUTH_SECRET} bytes "
            "(e.g. openssl rand -hex 32)"
        )
