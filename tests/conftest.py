"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from interlock.core.expressions import compile_expression

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Build the CEL parser before any test: building it raises the recursion limit, which
    hypothesis reports as an error when it happens inside one of its tests."""
    compile_expression("true")


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for running the real CLI with its own state directory and no config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env
