"""The order interlock.toml files are looked for, and an alias defined in a file not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock.providers import ModelConfig, UnknownModelError
from interlock.providers.config_paths import config_candidates, found_line


def write(folder: Path, model: str, alias: str = "m") -> Path:
    """An interlock.toml in `folder` whose `alias` names `model` (offline provider)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "interlock.toml"
    path.write_text(f'[models.{alias}]\nprovider = "offline"\nmodel = "{model}"\n')
    return path


def env_of(tmp_path: Path) -> dict[str, str]:
    """An environment whose user config folder is under `tmp_path`."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def test_the_current_directory_is_read_when_the_workflow_is_in_a_subfolder(
    tmp_path: Path,
) -> None:
    """A workflow in `flows/` run from the project folder gets the project's interlock.toml
    (before, only the workflow's folder and the state directory were read: offline)."""
    project = tmp_path / "project"
    write(project, "from-project")
    (project / "flows").mkdir()
    config = ModelConfig.for_workflow(
        project / "flows", tmp_path / "home", cwd=project, env=env_of(tmp_path)
    )
    assert config.resolve("m").model == "from-project"
    assert config.used_line == f"config: {project / 'interlock.toml'}"


def test_order_workflow_folder_then_project_then_state_then_user(tmp_path: Path) -> None:
    """The workflow's folder wins over the current directory's parents up to the project
    root (`.git`), which win over the state directory, which wins over the user's file."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    flows = tmp_path / "flows"
    home = tmp_path / "home"
    write(tmp_path / "xdg" / "interlock", "user", alias="u")
    write(home, "state", alias="s")
    write(project, "project", alias="p")
    write(flows, "beside", alias="p")
    config = ModelConfig.for_workflow(flows, home, cwd=deep, env=env_of(tmp_path))
    assert config.resolve("p").model == "beside"
    assert config.resolve("s").model == "state"
    assert config.resolve("u").model == "user"
    assert config_candidates(flows, home, cwd=deep, env=env_of(tmp_path)) == [
        flows / "interlock.toml",
        deep / "interlock.toml",
        project / "a" / "interlock.toml",
        project / "interlock.toml",
        home / "interlock.toml",
        tmp_path / "xdg" / "interlock" / "interlock.toml",
    ]


def test_no_parent_is_read_outside_a_project(tmp_path: Path) -> None:
    """Without a `.git` above it, the current directory alone is read, not its parents."""
    (tmp_path / "here").mkdir()
    candidates = config_candidates(None, None, cwd=tmp_path / "here", env=env_of(tmp_path))
    assert tmp_path / "interlock.toml" not in candidates


def test_an_alias_defined_only_in_a_file_not_read_is_an_error_naming_it(tmp_path: Path) -> None:
    """No configuration is read, but an interlock.toml above the workflow defines the alias:
    resolving it names that file and the fix instead of answering with the stand-in."""
    above = write(tmp_path / "project", "x", alias="fast")
    flows = tmp_path / "project" / "flows"
    flows.mkdir()
    config = ModelConfig.for_workflow(flows, None, cwd=flows, env=env_of(tmp_path))
    with pytest.raises(UnknownModelError) as caught:
        config.resolve("fast")
    assert str(above) in str(caught.value) and "--config" in str(caught.value)
    assert config.missing_models(["fast", "other"]) == ["fast"]
    assert config.resolve("other").offline_fallback  # defined nowhere: the stand-in
    assert found_line(flows, None).startswith("config: none found")


def test_config_and_the_workflows_file_are_both_read_the_first_winning(tmp_path: Path) -> None:
    """`--config FILE` and the workflow folder's interlock.toml are both read: an alias
    only the second defines resolves, one both define is the first's, and the `config:`
    line names both files and says so."""
    import os
    import subprocess
    import sys

    explicit = tmp_path / "explicit.toml"
    explicit.write_text(
        '[models.m]\nprovider = "openai"\nmodel = "gpt-4.1"\nmax_output_tokens = 10\n'
    )
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "interlock.toml").write_text(
        '[models.m]\nprovider = "openai"\nmodel = "gpt-5"\nmax_output_tokens = 10\n'
        '[models.n]\nprovider = "openai"\nmodel = "gpt-5"\nmax_output_tokens = 10\n'
    )
    flow = flows / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: v, model: n}\n"
        "    - {role: w, model: m, final: true}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "--config",
         str(explicit), "check", str(flow), "--cost"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, **env_of(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = " ".join((done.stdout + done.stderr).split())
    assert "price: m (gpt-4.1)" in text and "price: n (gpt-5)" in text
    assert (
        f"config: {explicit}, {flows / 'interlock.toml'} (all read; a table two files define "
        "is the first's)"
    ) in text
