"""Who may do what: bearer tokens (JWT, HS256) with `read`, `operate` and `export` scopes, the
Origin and Host checks that keep web pages from driving a local server, and per-token rate
limits.

Scopes are independent: none implies another. `read` sees runs as the API shows them (capped,
credentials masked); `operate` acts on runs; `export` downloads a run's whole bundle (its
history, outputs, prompts and logs, as `interlock export` writes it), which is more than any
read shows, so a token for dashboards never carries it unless asked.

Without a configured secret (allowed on loopback only) every caller has both scopes; the Host
and Origin checks still apply, since any web page can reach a loopback port.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt

from interlock.server.config import ServerConfig, is_loopback
from interlock.server.errors import ApiError

SCOPES = ("read", "operate", "export")
WS_PROTOCOL = "interlock"  # the subprotocol the server answers with
WS_TOKEN_PREFIX = "bearer."  # `Sec-WebSocket-Protocol: interlock, bearer.<token>`


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    subject: str
    scopes: frozenset[str]
    key: str  # what rate limits count against


def issue_token(secret: str, scopes: list[str], subject: str = "cli", ttl: float = 86400) -> str:
    """A signed token for `subject` with `scopes`, valid for `ttl` seconds."""
    unknown = set(scopes) - set(SCOPES)
    if unknown:
        raise ValueError(f"unknown scope {sorted(unknown)[0]!r}; scopes are: {', '.join(SCOPES)}")
    now = int(time.time())
    claims = {"sub": subject, "scope": " ".join(scopes), "iat": now, "exp": now + int(ttl)}
    return jwt.encode(claims, secret, algorithm="HS256")


class Authenticator:
    """Checks tokens, scopes, Host and Origin for one server."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.allowed_origins = {o.rstrip("/") for o in config.allowed_origins}

    def principal(self, token: str | None, client: str) -> Principal:
        """The caller a token names (everyone, when auth is off)."""
        secret = self.config.auth_secret
        if secret is None:
            return Principal("anonymous", frozenset(SCOPES), f"addr:{client}")
        if not token:
            raise ApiError(
                401,
                "unauthorized",
                "a bearer token is required (Authorization: Bearer TOKEN)",
                {"WWW-Authenticate": "Bearer"},
            )
        try:
            claims = jwt.decode(
                token, secret, algorithms=["HS256"], options={"require": ["exp", "sub"]}
            )
        except jwt.ExpiredSignatureError:
            raise ApiError(401, "token_expired", "the token has expired") from None
        except jwt.InvalidSignatureError:
            raise ApiError(401, "invalid_token", "the token's signature does not match") from None
        except (jwt.DecodeError, ValueError, TypeError):
            # The library's text quotes the bytes it could not decode: not for a caller.
            raise ApiError(401, "invalid_token", "the token is not a valid JWT") from None
        except jwt.InvalidTokenError as exc:  # a missing or malformed claim, named
            raise ApiError(401, "invalid_token", f"the token is not valid: {exc}") from None
        digest = hashlib.sha256(token.encode()).hexdigest()[:16]
        return Principal(_subject(claims), _scopes(claims), f"token:{digest}")

    @staticmethod
    def require(principal: Principal, scope: str) -> None:
        """Refuse a caller without `scope`."""
        if scope not in principal.scopes:
            raise ApiError(403, "forbidden", f"this needs the {scope!r} scope")

    def check_host(self, host_header: str | None) -> None:
        """On loopback, refuse requests addressed to another name (DNS rebinding)."""
        if not is_loopback(self.config.host):
            return
        host = urlsplit(f"//{host_header or ''}").hostname or ""
        if not is_loopback(host):
            raise ApiError(403, "bad_host", f"host {host_header!r} is not served here")

    def check_origin(self, origin: str | None, host_header: str | None) -> None:
        """Browsers send Origin; only the dashboard's own origin and allowed ones may act."""
        if origin is None:
            return  # not a browser: tokens (or loopback) are the protection
        origin = origin.rstrip("/")
        if origin in self.allowed_origins:
            return
        parts = urlsplit(origin)
        if parts.scheme in ("http", "https") and parts.netloc == (host_header or ""):
            return
        raise ApiError(403, "bad_origin", f"origin {origin!r} is not allowed")


def _malformed(claim: str, expected: str) -> ApiError:
    return ApiError(
        401, "invalid_token", f"the token is not valid: its {claim!r} claim must be {expected}"
    )


def _subject(claims: dict[str, Any]) -> str:
    """The `sub` claim, which must be a non-empty string."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise _malformed("sub", "a non-empty string")
    return subject


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    """The `scope` claim: space-separated names (RFC 8693), or a list of names."""
    scope = claims.get("scope", "")
    if isinstance(scope, str):
        return frozenset(scope.split())
    if isinstance(scope, list) and all(isinstance(s, str) for s in scope):
        return frozenset(scope)
    raise _malformed("scope", "a string of space-separated scopes")


def token_from_protocols(header: str | None) -> tuple[str | None, bool]:
    """(token, whether the client offered our subprotocol) from Sec-WebSocket-Protocol."""
    token, offered = None, False
    for item in (header or "").split(","):
        item = item.strip()
        if item == WS_PROTOCOL:
            offered = True
        elif item.startswith(WS_TOKEN_PREFIX):
            token = item[len(WS_TOKEN_PREFIX) :]
    return token, offered


class RateLimiter:
    """A token bucket per caller: `per_minute` sustained, bursts of `burst`."""

    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, now: float | None = None) -> None:
        """Spend one request, or refuse with 429 and when to retry."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                wait = (1 - tokens) / self.rate if self.rate > 0 else 60.0
                self._buckets[key] = (tokens, now)
                raise ApiError(
                    429,
                    "rate_limited",
                    f"too many requests; retry in {wait:.1f}s",
                    {"Retry-After": str(max(1, round(wait)))},
                )
            self._buckets[key] = (tokens - 1, now)
