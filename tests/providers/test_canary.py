"""A key echoed by a model server, in every place a server can put it, is recorded nowhere.

The fake server answers calls made with a canary key by quoting the key back: in a JSON
error body (with the Authorization header), a plain text body, the HTTP status line, the
Content-Type of an answer that is no event stream, and an error event in the middle of a
stream, on both wire formats. Runs that hit each of these are made through the HTTP API,
then the ledger file, the state directory (status.json, run folders), the logs, the
terminal and the API's answers are searched for the key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server.helpers import Server

from interlock.server.config import ServerConfig

from .fake_llm_server import FakeServer, FakeState, Fault

CANARY = "sk-CANARY-7d1f0a9e3b5c4d2e8f6a0b1c"
ECHOES = ("body", "text", "reason", "content_type", "stream")
CONFIG = """
[providers.oa]
kind = "openai"
base_url = "{url}/v1"
api_key_env = "CANARY_OPENAI_KEY"
max_attempts = 1

[providers.an]
kind = "anthropic"
base_url = "{url}"
api_key_env = "CANARY_ANTHROPIC_KEY"
max_attempts = 1

[models.gpt]
provider = "oa"
model = "gpt-test"

[models.claude]
provider = "an"
model = "claude-test"
"""
FLOW = """
via-openai:
  phases:
    - id: one
      workers:
        - {role: writer, model: gpt, task: "hello", timeout: 10, final: true}
via-anthropic:
  phases:
    - id: one
      workers:
        - {role: writer, model: claude, task: "hello", timeout: 10, final: true}
"""


@pytest.fixture
def llm() -> Iterator[FakeServer]:
    """A fake model server that accepts only the canary key."""
    state = FakeState(api_key=CANARY, models={"gpt-test", "claude-test"}, reply=["a", "b", "c"])
    srv = FakeServer(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    state.stopping.set()
    srv.shutdown()
    srv.server_close()
    thread.join()


def test_an_echoed_key_appears_in_no_record_log_terminal_or_answer(
    llm: FakeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Ten runs, each failing on a server that echoes the key in another place, leave the key
    in no ledger byte, no file of the state directory, no log line, no terminal output and
    no API answer, while their failures still say what the server answered."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CANARY_OPENAI_KEY", CANARY)
    monkeypatch.setenv("CANARY_ANTHROPIC_KEY", CANARY)
    caplog.set_level(logging.DEBUG)
    (tmp_path / "interlock.toml").write_text(CONFIG.format(url=llm.url))
    flow = tmp_path / "flows.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    server = Server(ServerConfig(home=home, host="127.0.0.1", port=0, workflows=[flow]))
    answers: list[str] = []
    failures: list[str] = []
    try:
        for pipeline in ("via-openai", "via-anthropic"):
            for echo in ECHOES:
                llm.fail_next(Fault(echo=echo))
                run_id = server.start_run(pipeline)
                run = server.wait_status(run_id, "failed")
                failures.append(str(run))
                for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/events", "/api/runs"):
                    answers.append(server.http.get(path).text)
    finally:
        server.stop()
    assert len(llm.requests) == 10
    assert all(r.headers.get("authorization", r.headers.get("x-api-key")) for r in llm.requests)
    said = "\n".join(failures)
    assert said.count("[redacted]") >= 10, said  # the failures say what was masked
    assert "Invalid credentials" in said and "upstream refused" in said
    assert "error during the stream" in said and "did not answer with an event stream" in said
    places = {"API answers": "\n".join(answers), "logs": caplog.text}
    out, err = capfd.readouterr()
    places["terminal"] = out + err
    for file in sorted(home.rglob("*")):
        if file.is_file():
            places[str(file.relative_to(home))] = file.read_bytes().decode("latin-1")
    assert "ledger.db" in places and any(p.endswith("status.json") for p in places)
    leaked = [where for where, text in places.items() if CANARY in text or "CANARY-7d1f" in text]
    assert not leaked, f"the key leaked into {leaked}"
