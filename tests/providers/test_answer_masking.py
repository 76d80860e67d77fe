"""A gateway that echoes the key into a model's answer: the answer is kept, recorded and
streamed with the key masked, in each of its common encodings."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from interlock.core.state import RunStatus

from .conftest import API_KEY
from .fake_llm_server import FakeServer
from .project import app_for, make_project, one_worker

ENCODED = {
    "plain": API_KEY,
    "upper": API_KEY.upper(),
    "base64": base64.b64encode(API_KEY.encode()).decode(),
    "base64url": base64.urlsafe_b64encode(API_KEY.encode()).decode().rstrip("="),
    "hex": API_KEY.encode().hex(),
    "HEX": API_KEY.encode().hex().upper(),
    "basic": base64.b64encode(f"user:{API_KEY}".encode()).decode(),
}


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_a_key_echoed_into_the_answer_is_stored_and_streamed_masked(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """An answer that quotes the configured key (split across streamed fragments, and
    encoded as base64, URL-safe base64, hex and upper-case) leaves no form of the key in the
    output, the ledger, status.json or the live token stream, and keeps the rest of its text."""
    # The key split in two fragments: a fragment-by-fragment mask would miss it.
    parts = [f"{name}={value};" for name, value in ENCODED.items() if name != "plain"]
    server.state.reply = ["Echo: key=", API_KEY[:7], API_KEY[7:], "; ", *parts, " end."]
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, f"      model: {model}\n      task: say it\n")
    app = app_for(project)
    tokens: list[str] = []
    app.orchestrator.progress_listeners.append(lambda run, task, text: tokens.append(text))
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    run_dir = app.run_dir(state.run_id)
    answer = (run_dir / "w.md").read_text()
    assert answer.startswith("Echo: key=[redacted]; ") and answer.endswith(" end.")
    streamed = "".join(tokens)
    assert streamed == answer  # held back only until it could be shown, then all of it
    recorded = [
        answer,
        streamed,
        json.dumps([e.data for e in app.events(state.run_id)]),
        *(p.read_text() for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".db"),
    ]
    for name, value in ENCODED.items():
        for text in recorded:
            assert value not in text, f"the {name} form of the key is in {text[:80]!r}"
    app.close()
