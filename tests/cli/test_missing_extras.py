"""A command that needs an optional extra that is not installed says which one and how to
install it (exit 69), never an internal error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The command run in a process of its own whose `import NAME` fails as if NAME were absent.
WITHOUT = """
import sys
sys.modules[sys.argv[1]] = None
sys.argv = ["interlock", *sys.argv[2:]]
from interlock.cli.main import main
main()
"""


@pytest.mark.parametrize("missing", ["fastapi", "uvicorn"])
def test_a_missing_extra_is_named_with_the_install_command(
    cli_env: dict[str, str], tmp_path: Path, missing: str
) -> None:
    args = ["--home", str(tmp_path / "home"), "serve", "--port", "0"]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT, missing, *args],
        env=cli_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 69, said
    assert said.startswith("error: ") and "extra" in said
    assert "pip install 'interlock[server]'" in said
    assert "pip install -e '.[server]'" in said
    assert "internal error" not in said and "Traceback" not in said
