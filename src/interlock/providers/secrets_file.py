"""Reading the secrets file that holds API keys outside the environment.

The file is TOML (``OPENAI_API_KEY = "sk-..."``) or dotenv-style ``KEY=value`` lines.
Error messages name the file and a line number, never a line's content.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from interlock.providers.failures import ProviderError


def read_secrets_file(path: Path) -> dict[str, str]:
    """The string entries of a secrets file.

    Args:
        path: A TOML file or a file of ``KEY=value`` lines (``export`` prefix and quotes
            are accepted, ``#`` starts a comment line).

    Returns:
        Variable names mapped to their values; non-string TOML values are ignored.

    Raises:
        ProviderError: The file cannot be read or parsed (not retryable).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(
            f"secrets file {path}: cannot read: {exc.strerror}", retryable=False
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return _read_env_lines(path, text)
    return {k: v for k, v in document.items() if isinstance(v, str)}


def _read_env_lines(path: Path, text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        stripped = stripped.removeprefix("export ").strip()
        name, sep, value = stripped.partition("=")
        if not sep or not name.strip():
            raise ProviderError(
                f"secrets file {path}: line {number} is neither TOML nor KEY=value",
                retryable=False,
            )
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values
