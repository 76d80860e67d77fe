"""A command that needs an optional extra that is not installed says which one and how to
install it (exit 69), never an internal error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli.main import cli


@pytest.mark.parametrize(
    ("missing", "args", "extra"),
    [
        ("fastapi", ["serve", "--port", "0"], "server"),
        ("uvicorn", ["serve", "--port", "0"], "server"),
    ],
)
def test_a_missing_extra_is_named_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str, args: list[str], extra: str
) -> None:
    for name in [m for m in sys.modules if m == missing or m.startswith(f"{missing}.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in [m for m in sys.modules if m.startswith("interlock.server")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # `import fastapi` fails as if absent
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), *args])
    assert result.exit_code == 69, result.output
    assert result.output.startswith("error: ") and "extra" in result.output
    assert f"pip install 'interlock[{extra}]'" in result.output
    assert f"pip install -e '.[{extra}]'" in result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
