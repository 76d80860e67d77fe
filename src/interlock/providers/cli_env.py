"""The environment an agent command-line tool, an MCP tool server or a `command:` worker
runs with.

An agent is a program that reads prompts written by others and may run tools; it gets what
it needs to run (where programs and its home are, the locale, proxies and certificates) and
nothing else, so that the keys of other providers, database passwords and tokens of the
process that runs interlock stay out of its reach. Its own provider table names what it
needs beyond that (``env`` and ``api_key_env``); a worker's or a pipeline's ``env:`` does the
same for a command, which also gets its own INTERLOCK_* variables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


# A variable whose name says it holds a secret; its value, when long enough, is masked in
# what the command that was given it prints (README and docs/reliability.md say the same).
_SECRET_NAME = re.compile(
    r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASS|CREDENTIAL|AUTH|PRIVATE|_PWD?$", re.IGNORECASE
)


def secret_named(name: str) -> bool:
    """Whether the name of a variable says it holds a secret (`DEPLOY_TOKEN`, `DB_PWD`)."""
    return _SECRET_NAME.search(name) is not None


def secret_values(environ: Mapping[str, str], names: Iterable[str]) -> list[str]:
    """The values of `environ` under `names` whose names look like secrets (the masking
    keeps only those of `redaction.MIN_SECRET` characters or more)."""
    return [environ[n] for n in dict.fromkeys(names) if secret_named(n) and environ.get(n)]


TASK_VARIABLES = frozenset(
    {
        "INTERLOCK_OUTPUT",
        "INTERLOCK_TASK",
        "INTERLOCK_TOPIC",
        "INTERLOCK_RUN_ID",
        "INTERLOCK_TASK_ID",
        "INTERLOCK_ATTEMPT",
        "INTERLOCK_INPUTS",
        "INTERLOCK_ITEM",
        "INTERLOCK_IDEMPOTENCY_KEY",
        "INTERLOCK_RUN_DIR",
    }
)
"""The variables interlock sets for each attempt of a `command:` worker."""

# Variables a shell sets itself, never read from the environment it was given.
_SHELL_OWN = frozenset(
    {"PPID", "PWD", "OLDPWD", "RANDOM", "LINENO", "SECONDS", "IFS", "OPTARG", "OPTIND",
     "REPLY", "HOSTNAME", "UID", "EUID", "BASH", "BASHPID", "BASH_VERSION", "PIPESTATUS"}
)  # fmt: skip
# `$NAME` / `${NAME}` / `${NAME:-x}` in a script; `os.environ["NAME"]`, `.get("NAME"`,
# `getenv("NAME"` (Python and others); `process.env.NAME`, `process.env["NAME"]` (Node).
_READS = re.compile(
    r"\$\{?([A-Za-z_][A-Za-z0-9_]*)"
    r"""|environ(?:\.get\(|\[)\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
    r"""|getenv\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
    r"""|process\.env(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["'])"""
)
# What sets NAME inside a script: `NAME=`, `export NAME=`, `for NAME in`, `read ... NAME`.
_SETS = (
    r"(?:^|[\s;&|(])(?:export\s+|local\s+|readonly\s+)?{name}="
    r"|\bfor\s+{name}\s+in\b|\bread\b[^;\n]*\b{name}\b"
)


def unlisted_variables(argv: Iterable[str], listed: Iterable[str]) -> list[str]:
    """The environment variables a command's own text reads (a shell script's ``$NAME``, a
    Python one-liner's ``os.environ["NAME"]``) that it will not get: neither allowed for
    every program, nor its INTERLOCK_* variables, nor `listed`, nor set by the script."""
    return [read.name for read in unlisted_reads(argv, listed)]


@dataclass(frozen=True)
class Read:
    """A variable a command's text reads and will not get."""

    name: str
    argument: int  # the index in argv of the argument that reads it
    shell: bool  # read as a shell's `$NAME` (else through a language's environment API)

    def described(self) -> str:
        """How the warning says it is read: `$NAME`, or the environment variable NAME."""
        return f"${self.name}" if self.shell else f"the environment variable {self.name}"


def unlisted_reads(argv: Iterable[str], listed: Iterable[str]) -> list[Read]:
    """`unlisted_variables`, each with the argument that reads it and how."""
    given = set(listed)
    found: list[Read] = []
    seen: set[str] = set()
    for index, arg in enumerate(argv):
        for match in _READS.finditer(arg):
            name = next(group for group in match.groups() if group)
            if (
                name in ALLOWED
                or name in TASK_VARIABLES
                or name in given
                or name in _SHELL_OWN
                or name.startswith(ALLOWED_PREFIXES)
                or name in seen
                or re.search(_SETS.format(name=re.escape(name)), arg)
            ):
                continue
            seen.add(name)
            found.append(Read(name, index, match.group(1) is not None))
    return found
