"""Webhook retries without a `key`: the signed `webhook-id` keeps a retried delivery from
becoming a second signal, and distinct deliveries with byte-identical bodies are two. And hook
tables with a wrong key are refused with the file, the key and the fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import WORKFLOW, Server, write_workflow

from interlock.errors import UsageError
from interlock.server.hooks import Seen, load_hooks, signed_headers

SECRET = "s" * 32
HOOKS = """
[hooks.payments]
signal = "payment"
run_id = "metadata.run"
data = "payload"
secret_env = "TEST_PAYMENTS_SECRET"
"""
BUSY = """
busy:
  phases:
    - id: work
      workers:
        - {role: worker, command: ["{python}", "-c", "import time; time.sleep(2)"]}
    - id: ship
      wait_for: {signal: payment}
      workers:
        - {role: shipper, call: srv.slow, final: true}
"""


def hook_server(make_server: ServerFactory, tmp_path: Path, extra: str = "") -> Server:
    """A server with the `payments` hook (no `key`) and `extra` lines in its table."""
    config = tmp_path / "interlock.toml"
    config.write_text(HOOKS + extra)
    hooks = load_hooks(config, {"TEST_PAYMENTS_SECRET": SECRET})
    return make_server(hooks=hooks, workflows=[write_workflow(tmp_path, WORKFLOW + BUSY)])


def send(server: Server, body: str, delivery: str | None = None) -> dict[str, object]:
    """POST a body to the hook, signed now as delivery `delivery` (a new one by default)."""
    signed = signed_headers(SECRET.encode(), body.encode(), delivery)
    answer = server.http.post("/api/hooks/payments", content=body, headers=signed)
    assert answer.status_code == 202, answer.text
    result: dict[str, object] = answer.json()
    return result


def received(server: Server, run_id: str) -> int:
    """How many signals the run recorded."""
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    return sum(e["kind"] == "signal_received" for e in events)


def test_a_retried_delivery_is_one_signal_and_distinct_ones_are_two(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A delivery retried (the same `webhook-id`, signed again with a new timestamp, even with
    another body) is one signal, also once the run has ended; two deliveries with
    byte-identical bodies are two signals."""
    server = hook_server(make_server, tmp_path)
    run_id = server.start_run("signalled")
    first = json.dumps({"metadata": {"run": run_id}, "payload": {"amount": 1}})
    assert send(server, first, "d-1")["duplicate"] is False
    retry = json.dumps({"metadata": {"run": run_id}, "payload": {"amount": 2}})
    assert send(server, retry, "d-1")["duplicate"] is True
    server.wait_status(run_id, "delivered")
    assert send(server, first, "d-1")["duplicate"] is True
    server.app.state.hook_deliveries = Seen()  # as after a restart: the ledger's key answers
    assert send(server, first, "d-1")["duplicate"] is True
    assert received(server, run_id) == 1
    busy = server.start_run("busy")
    same = json.dumps({"metadata": {"run": busy}, "payload": {"amount": 2}})
    assert send(server, same)["duplicate"] is False
    assert send(server, same)["duplicate"] is False
    deadline = time.monotonic() + 15
    while received(server, busy) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received(server, busy) == 2


def test_dedupe_none_is_refused_with_why(tmp_path: Path) -> None:
    """`dedupe = "none"` is refused at load: signed ids already tell deliveries apart."""
    config = tmp_path / "interlock.toml"
    config.write_text(HOOKS + 'dedupe = "none"\n')
    with pytest.raises(UsageError, match="no longer offered: each delivery is named by its"):
        load_hooks(config, {"TEST_PAYMENTS_SECRET": SECRET})


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('signall = "payment"', "unknown key 'signall': did you mean 'signal'? the keys are"),
        ('dedupe = "sometimes"', "dedupe = 'sometimes' is wrong: it must be \"auto\" (the"),
        ('run_id = "a..b"', "run_id = 'a..b' is wrong: it must be the dotted path of the run id"),
        ('signal = "pay-ment"', "signal = 'pay-ment' is wrong: it must be the signal it sends"),
    ],
)
def test_hook_table_errors_name_the_file_the_key_and_the_fix(
    tmp_path: Path, line: str, expected: str
) -> None:
    """A misspelt key, a bad `dedupe`, a malformed path and a bad signal name each show the
    value given and say what to write, with no pydantic wording ("Extra inputs", "Input
    should be", "String should match")."""
    config = tmp_path / "interlock.toml"
    key = line.split(" ")[0]
    kept = [x for x in HOOKS.splitlines() if not x.startswith(key + " ")]  # replaced
    config.write_text("\n".join(kept) + f"\n{line}\n")
    with pytest.raises(UsageError) as raised:
        load_hooks(config, {"TEST_PAYMENTS_SECRET": SECRET})
    message = raised.value.message
    assert message.startswith(f"{config}: [hooks.payments]: "), message
    assert expected in message, message
    for pydantic in ("Extra inputs", "Input should be", "String should match", "Field required"):
        assert pydantic not in message
