"""The environment an agent command-line tool runs with.

An agent is a program that reads prompts written by others and may run tools; it gets what
it needs to run (where programs and its home are, the locale, proxies and certificates) and
nothing else, so that the keys of other providers, database passwords and tokens of the
process that runs interlock stay out of its reach. Its own provider table names what it
needs beyond that (``env`` and ``api_key_env``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ALLOWED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "TMP",
        "TEMP",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    }
)
"""Variables every agent gets when they are set."""

ALLOWED_PREFIXES = ("LC_", "XDG_")
"""Families of variables every agent gets (locale categories, the XDG base directories)."""


def allowed_env(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `environ` an agent may see: the allow-list plus `extra` names."""
    wanted = set(extra)
    return {
        name: value
        for name, value in environ.items()
        if name in ALLOWED or name in wanted or name.startswith(ALLOWED_PREFIXES)
    }
