"""`interlock.providers` hands out its names from their modules when first used: every name
it lists resolves, and importing the package alone loads no provider module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import interlock.providers as providers


def test_every_listed_name_resolves_to_its_module() -> None:
    """Each name of `__all__` is in the table, and is the object its module defines."""
    assert sorted(providers.__all__) == sorted(providers._WHERE)
    for name, module in providers._WHERE.items():
        value = getattr(providers, name)
        assert getattr(sys.modules[f"interlock.providers.{module}"], name) is value


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = providers.Nothing


def test_importing_the_configuration_loads_no_http_client(tmp_path: Path) -> None:
    """What `interlock run` needs to resolve an alias (the configuration) loads neither the
    HTTP providers nor aiohttp; building an HTTP provider does."""
    (tmp_path / "interlock.toml").write_text(
        '[providers.p]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "P_KEY"\n\n[models.m]\nprovider = "p"\nmodel = "x"\n'
    )
    probe = f"""
import sys
from interlock.providers import ModelConfig, build_provider
def loaded():
    return ["aiohttp" in sys.modules, "interlock.providers.openai_chat" in sys.modules]
before = loaded()
config = ModelConfig.load([{str(tmp_path)!r}], env={{"P_KEY": "k"}})
resolved = config.resolve("m")
configured = loaded()
build_provider(resolved, config)
print(before, configured, loaded())
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("] [") == ["[False, False", "False, False", "True, True]\n"]
