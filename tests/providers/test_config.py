"""Loading interlock.toml, resolving aliases, offline fallback and key lookup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interlock.providers import ConfigError, MissingKeyError, ModelConfig, UnknownModelError

FULL = """
secrets_file = "secrets.toml"

[providers.openai]
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
max_concurrency = 8
requests_per_minute = 500
tokens_per_minute = 200000

[providers.local]
kind = "openai"
base_url = "http://localhost:11434/v1"

[providers.claude-code]
kind = "cli"
command = ["claude", "-p", "{prompt}"]

[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
context_tokens = 200000

[models.fast]
provider = "local"
model = "llama3.2:3b"

[models.agent]
provider = "claude-code"
"""


def write(directory: Path, text: str, name: str = "interlock.toml") -> Path:
    """Write a config file and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_resolves_aliases_with_prices_and_limits(tmp_path: Path) -> None:
    """An alias resolves to its provider, kind, model id, prices and context limit."""
    write(tmp_path, FULL)
    config = ModelConfig.load([tmp_path], env={})
    sonnet = config.resolve("sonnet")
    assert (sonnet.provider, sonnet.kind, sonnet.model) == (
        "anthropic",
        "anthropic",
        "claude-sonnet-4-5",
    )
    assert (sonnet.input_price_per_mtok, sonnet.output_price_per_mtok) == (3.0, 15.0)
    assert sonnet.context_tokens == 200000 and sonnet.api_key_env == "ANTHROPIC_API_KEY"
    assert not sonnet.offline_fallback
    assert sonnet.cost_usd(1_000_000, 100_000) == pytest.approx(4.5)
    fast = config.resolve("fast")
    assert (fast.kind, fast.model, fast.api_key_env) == ("openai", "llama3.2:3b", None)
    agent = config.resolve("agent")
    assert (agent.kind, agent.model) == ("cli", "agent")
    assert config.provider("claude-code").command == ("claude", "-p", "{prompt}")
    assert config.provider("openai").requests_per_minute == 500


def test_no_configuration_falls_back_to_offline(tmp_path: Path) -> None:
    """With no file and no env configuration every alias is offline and flagged as fallback."""
    config = ModelConfig.load([tmp_path, tmp_path / "state"], env={})
    resolved = config.resolve("anything")
    assert resolved.kind == "offline" and resolved.offline_fallback
    assert config.missing_models(["anything"]) == []


def test_existing_configuration_never_falls_back_silently(tmp_path: Path) -> None:
    """Once a config exists an unknown alias is an error naming the alias, files and fix."""
    write(tmp_path / "wf", FULL)
    config = ModelConfig.load([tmp_path / "wf", tmp_path / "state"], env={})
    with pytest.raises(UnknownModelError) as caught:
        config.resolve("opus")
    message = str(caught.value)
    assert caught.value.alias == "opus"
    assert "unknown model alias 'opus'" in message
    assert f"{tmp_path / 'wf' / 'interlock.toml'} (found)" in message
    assert f"{tmp_path / 'state' / 'interlock.toml'} (not found)" in message
    assert "[models.opus]" in message and "Known aliases: agent, fast, sonnet" in message


def test_missing_models_lists_unresolved_aliases_once(tmp_path: Path) -> None:
    """missing_models returns the unknown aliases in order without duplicates."""
    write(tmp_path, FULL)
    config = ModelConfig.load([tmp_path], env={})
    assert config.missing_models(["sonnet", "opus", "fast", "opus", "haiku"]) == ["opus", "haiku"]


def test_earlier_candidate_wins(tmp_path: Path) -> None:
    """When two files define the same alias, the one beside the workflow wins."""
    write(tmp_path / "wf", '[models.m]\nprovider = "openai"\nmodel = "first"\n')
    write(
        tmp_path / "state",
        '[models.m]\nprovider = "openai"\nmodel = "second"\n[models.n]\nprovider = "ollama"\n',
    )
    config = ModelConfig.load([tmp_path / "wf", tmp_path / "state"], env={})
    assert config.resolve("m").model == "first"
    assert config.resolve("n").model == "n"


def test_env_models_define_aliases_without_a_file(tmp_path: Path) -> None:
    """INTERLOCK_MODELS defines aliases, model ids may contain colons, and it counts as config."""
    env = {"INTERLOCK_MODELS": "fast=ollama:llama3.2:3b, big=openai:gpt-4o"}
    config = ModelConfig.load([tmp_path], env=env)
    assert config.resolve("fast").model == "llama3.2:3b"
    assert config.resolve("big").provider == "openai"
    with pytest.raises(UnknownModelError, match="INTERLOCK_MODELS"):
        config.resolve("other")


def test_env_config_file_is_read_first(tmp_path: Path) -> None:
    """INTERLOCK_CONFIG names a file read before the candidates."""
    explicit = write(tmp_path / "etc", '[models.m]\nprovider = "openai"\nmodel = "explicit"\n')
    write(tmp_path / "wf", '[models.m]\nprovider = "openai"\nmodel = "beside"\n')
    config = ModelConfig.load([tmp_path / "wf"], env={"INTERLOCK_CONFIG": str(explicit)})
    assert config.resolve("m").model == "explicit"


def test_invalid_entries_name_the_file_and_table(tmp_path: Path) -> None:
    """A wrong field type or unknown field is reported with the file and table names."""
    path = write(
        tmp_path, '[providers.x]\nkind = "openai"\nbase_url = "http://h"\nmax_concurency = 3\n'
    )
    with pytest.raises(ConfigError, match=r"\[providers\.x\] is invalid: max_concurency") as caught:
        ModelConfig.load([tmp_path], env={})
    assert str(path) in str(caught.value)
    assert "max_concurency: unknown key (did you mean 'max_concurrency'?)" in str(caught.value)
    assert "Extra inputs" not in str(caught.value)


@pytest.mark.parametrize(
    ("table", "meant"),
    [("modles", "[models]"), ("provider", "[providers]"), ("retension", "[retention]")],
)
def test_a_table_no_command_reads_is_refused(tmp_path: Path, table: str, meant: str) -> None:
    """`[modles.fast]` would be ignored, leaving `fast` to the offline stand-in: refused,
    naming the closest table and every one interlock reads."""
    path = write(tmp_path, f'[{table}.fast]\nprovider = "openai"\nmodel = "m"\n')
    with pytest.raises(ConfigError) as caught:
        ModelConfig.load([tmp_path], env={})
    message = str(caught.value)
    assert message.startswith(f"{path}: [{table}] is not a table interlock reads")
    assert f"(did you mean {meant}?)" in message and "[hooks.NAME]" in message


def test_unknown_kind_and_missing_command_are_rejected(tmp_path: Path) -> None:
    """A provider needs a valid kind, and a cli provider needs a command."""
    write(tmp_path / "a", '[providers.x]\nkind = "gemini"\n')
    with pytest.raises(ConfigError, match="kind"):
        ModelConfig.load([tmp_path / "a"], env={})
    write(tmp_path / "b", '[providers.x]\nkind = "cli"\n')
    with pytest.raises(ConfigError, match="needs command"):
        ModelConfig.load([tmp_path / "b"], env={})


def test_model_with_undefined_provider_is_rejected(tmp_path: Path) -> None:
    """An alias pointing at an undefined provider is an error that says how to fix it."""
    write(tmp_path, '[models.m]\nprovider = "mistral"\nmodel = "large"\n')
    with pytest.raises(
        ConfigError, match=r"provider 'mistral', which is not defined.*\[providers\.mistral\]"
    ):
        ModelConfig.load([tmp_path], env={})


def test_api_key_in_the_config_file_is_refused_without_echo(tmp_path: Path) -> None:
    """A key written into interlock.toml is rejected and its value is not repeated."""
    write(tmp_path, '[providers.openai]\napi_key = "sk-written-in-the-file-123"\n')
    with pytest.raises(ConfigError, match="api_key_env") as caught:
        ModelConfig.load([tmp_path], env={})
    assert "sk-written-in-the-file-123" not in str(caught.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    """A syntax error reports the file and the position."""
    path = write(tmp_path, "[models.m\n")
    with pytest.raises(ConfigError, match="invalid TOML") as caught:
        ModelConfig.load([tmp_path], env={})
    assert str(path) in str(caught.value)


def test_key_comes_from_the_environment_first(tmp_path: Path) -> None:
    """The environment variable named by api_key_env wins over the secrets file."""
    write(tmp_path, FULL)
    write(tmp_path, 'OPENAI_API_KEY = "from-file-abcdefgh"\n', "secrets.toml")
    config = ModelConfig.load([tmp_path], env={"ANTHROPIC_API_KEY": "from-env-abcdefgh"})
    key = config.api_key(config.resolve("sonnet"))
    assert key is not None and key.reveal() == "from-env-abcdefgh"


def test_key_from_a_toml_secrets_file(tmp_path: Path) -> None:
    """A key missing from the environment is read from the TOML secrets file."""
    write(tmp_path, FULL + '[models.gpt]\nprovider = "openai"\nmodel = "gpt-4o"\n')
    write(tmp_path, 'OPENAI_API_KEY = "from-file-abcdefgh"\n', "secrets.toml")
    config = ModelConfig.load([tmp_path], env={})
    key = config.api_key(config.resolve("gpt"))
    assert key is not None and key.reveal() == "from-file-abcdefgh"


def test_key_from_an_env_style_secrets_file(tmp_path: Path) -> None:
    """INTERLOCK_SECRETS_FILE may point at KEY=value lines, with export and quotes."""
    secrets = write(
        tmp_path, "# keys\nexport ANTHROPIC_API_KEY='sk-ant-abcdefgh'\nOTHER=1\n", ".env"
    )
    env = {"INTERLOCK_MODELS": "s=anthropic:claude-x", "INTERLOCK_SECRETS_FILE": str(secrets)}
    config = ModelConfig.load([], env=env)
    key = config.api_key(config.resolve("s"))
    assert key is not None and key.reveal() == "sk-ant-abcdefgh"


def test_missing_key_says_where_to_put_it(tmp_path: Path) -> None:
    """A provider whose key is set nowhere raises MissingKeyError naming the variable."""
    write(tmp_path, FULL)
    config = ModelConfig.load([tmp_path], env={})
    with pytest.raises(
        MissingKeyError, match="set the environment variable ANTHROPIC_API_KEY or add it to"
    ):
        config.api_key(config.resolve("sonnet"))
    assert config.api_key(config.resolve("fast")) is None  # a keyless local server


def test_documented_example_is_a_valid_configuration(tmp_path: Path) -> None:
    """The example in the config module's docstring loads and resolves as documented."""
    from interlock.providers import config as config_module

    doc = config_module.__doc__ or ""
    block = doc.split("File format::\n", 1)[1].split("\nProviders named", 1)[0]
    example = "\n".join(line.removeprefix("    ") for line in block.splitlines())
    write(tmp_path, example)
    config = ModelConfig.load([tmp_path], env={})
    assert config.resolve("sonnet").model == "claude-sonnet-4-5"
    assert config.provider("claude-code").kill_grace_s == 2.0
    assert config.secrets_file == tmp_path / "secrets.toml"


@pytest.mark.parametrize(
    "pasted",
    ["sk-proj-Abc123def456ghi789", "AIzaSyD4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9"],
)
def test_a_key_pasted_as_api_key_env_is_refused_without_echo(tmp_path: Path, pasted: str) -> None:
    """A key where the variable's name belongs is refused, saying what api_key_env must be,
    and the value is not repeated (it would land in logs and the ledger)."""
    write(tmp_path, f'[providers.openai]\napi_key_env = "{pasted}"\n')
    with pytest.raises(ConfigError) as caught:
        ModelConfig.load([tmp_path], env={})
    message = str(caught.value)
    assert "api_key_env must name an environment variable" in message
    assert "[providers.openai]" in message
    assert pasted not in message and pasted[:12] not in message


def test_ordinary_variable_names_are_accepted(tmp_path: Path) -> None:
    """Names such as MY_LLM_KEY or lower-case ones stay valid."""
    table = '[providers.{}]\nkind = "openai"\nbase_url = "http://x"\napi_key_env = "{}"\n'
    write(tmp_path, table.format("a", "MY_LLM_KEY") + table.format("b", "local_key_2"))
    config = ModelConfig.load([tmp_path], env={})
    assert config.provider("a").api_key_env == "MY_LLM_KEY"
    assert config.provider("b").api_key_env == "local_key_2"


def test_secrets_are_read_once_per_version_of_the_secrets_file(tmp_path: Path) -> None:
    """`secrets()` reads the secrets file again only when it changed (its mtime or size), so
    a rotated key is masked from then on, and a removed file's key is no longer listed."""
    write(tmp_path, FULL + '[models.gpt]\nprovider = "openai"\nmodel = "gpt-4o"\n')
    path = write(tmp_path, 'OPENAI_API_KEY = "from-file-aaaaaaaa"\n', "secrets.toml")
    config = ModelConfig.load([tmp_path], env={})
    assert [s.reveal() for s in config.secrets()] == ["from-file-aaaaaaaa"]
    stamp = path.stat()
    path.write_text('OPENAI_API_KEY = "from-file-bbbbbbbb"\n')  # same size, same mtime
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert [s.reveal() for s in config.secrets()] == ["from-file-aaaaaaaa"]  # the cached read
    path.write_text('OPENAI_API_KEY = "from-file-rotated-cccc"\n')
    assert [s.reveal() for s in config.secrets()] == ["from-file-rotated-cccc"]
    path.unlink()
    assert config.secrets() == []
