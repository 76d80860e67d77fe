"""The README's batch and experiment, run with its exact commands against a local model server
that counts calls: the experiment pays for the variant's translations alone, its base rows
reusing the first batch's, as the README says."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.providers.fake_llm_server import FakeServer, FakeState

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-readme-experiment-0123456789"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server that keeps every request it answers."""
    state = FakeState(api_key=KEY, models={"model-s"}, reply=["Bon", "jour."])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()


def readme_commands() -> list[list[str]]:
    """The `interlock batch` and `interlock experiment` lines of the README's section on
    datasets and experiments, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Datasets and experiments", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    wanted = ("interlock batch examples/", "interlock experiment ")
    return [shlex.split(line, comments=True) for line in lines if line.startswith(wanted)]


def test_the_readme_experiment_pays_only_for_the_variants_translations(
    tmp_path: Path, server: FakeServer, cli_env: dict[str, str]
) -> None:
    """After `batch ... --batch-id articles` (4 calls), `experiment ... --batch-id cmp` makes
    4 calls, not 8: its base rows reuse the batch's translations, and `status cmp-r1` says
    the translator was reused."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "examples" / "interlock.toml").write_text(f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_API_KEY"

[models.sonnet]
provider = "local"
model = "model-s"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
""")
    env = {**cli_env, "FAKE_API_KEY": KEY}
    batch, experiment = readme_commands()
    assert batch[-1] == "articles" and experiment[-1] == "cmp"

    def interlock(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        return result

    interlock(*batch[1:])
    assert len(server.requests) == 4
    planned = interlock(*experiment[1:])
    assert len(server.requests) == 8, "the experiment paid again for the batch's rows"
    assert "what workers with 'cache:' made before" in planned.stdout + planned.stderr
    status = interlock("status", "cmp-r1").stdout
    assert re.search(r"translator\s+reused", status), status
