"""Rate-limit buckets in Redis: a hash per bucket, changed by one Lua script.

The script (`sql/redis/bucket.lua`) is `interlock.providers.buckets.step` on Redis's own
clock; Redis runs a script alone, so every process of the fleet sees each change whole.
A bucket that would be full again expires by itself. Needs the `redis` extra.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from interlock.core.buckets import Ask, Grant
from interlock.providers.redaction import safe_url

DEFAULT_PREFIX = "interlock:bucket:"


@cache
def _script() -> str:
    return resources.files("interlock.storage").joinpath("sql", "redis", "bucket.lua").read_text()


class RedisBuckets:
    """Buckets shared by every process using the Redis at `url`, under `prefix`."""

    shared = True

    def __init__(self, url: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        import redis  # the `redis` extra; the caller says so when it is missing

        self.where = safe_url(url)
        self.prefix = prefix
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._take = self.redis.register_script(_script())

    def take(self, name: str, ask: Ask) -> Grant:
        """Apply `ask` to the hash of `name` (raises redis errors when the server is gone)."""
        args = (ask.rate, ask.capacity, ask.need, ask.want, ask.force, ask.hold_s)
        granted, wait = self._take(keys=[self.prefix + name], args=[repr(a) for a in args])
        return Grant(granted=float(granted), wait_s=float(wait))

    def close(self) -> None:
        """Close the connections."""
        self.redis.close()
