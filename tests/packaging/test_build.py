"""The package as it is released: `python -m build` makes a wheel and an sdist from a clean
copy of the tree, each installs into a fresh virtualenv, and the README's quick start runs from
it. The wheel carries what the runtime reads (SQL migrations, the dashboard, the starter
workflows) and leaves out the simulator and the tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and the sdist, built from a copy of the tracked files."""
    tree = tmp_path_factory.mktemp("tree")
    tracked = _run("git", "ls-files", "-z", cwd=ROOT).stdout.split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, tree)
    return out


def test_the_wheel_holds_the_runtime_and_not_the_tests(dist: Path) -> None:
    (wheel,) = dist.glob("interlock-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("interlock/storage/sql/") and n.endswith(".sql") for n in names)
    assert "interlock/server/static/index.html" in names
    assert "interlock/py.typed" in names
    assert not [n for n in names if n.startswith(("interlock/sim/", "tests/", "benchmarks/"))]
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    assert "Provides-Extra: dev" not in text  # development tools are a dependency group


@pytest.mark.parametrize("kind", ["whl", "tar.gz"])
def test_each_artifact_installs_and_runs_the_quick_start(
    dist: Path, tmp_path: Path, kind: str
) -> None:
    (artifact,) = dist.glob(f"interlock-*.{kind}")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", artifact)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    version = _run(venv / "bin" / "interlock", "--version").stdout
    assert "0." in version
    done = _run(
        venv / "bin" / "interlock",
        "run",
        "examples/research.json",
        "research",
        "--topic",
        "FSA architecture",
        cwd=tmp_path,
    )
    final = Path(done.stdout.strip().splitlines()[-1].split()[-1])
    final = final if final.is_absolute() else tmp_path / final
    assert final.name == "final.md" and final.read_text().strip(), done.stdout
