"""Webhook retries without a `key`: the sender's delivery id header, else the body's hash,
keeps a retried delivery from becoming a second signal; `dedupe = "none"` turns that off.
And hook tables with a wrong key are refused with the file, the key and the fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import WORKFLOW, Server, write_workflow

from interlock.errors import UsageError
from interlock.server.hooks import SIGNATURE_HEADER, load_hooks, signature

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


def send(server: Server, body: str, **headers: str) -> dict[str, object]:
    """POST a signed body to the hook; the answer."""
    signed = {SIGNATURE_HEADER: signature(SECRET.encode(), body.encode()), **headers}
    answer = server.http.post("/api/hooks/payments", content=body, headers=signed)
    assert answer.status_code == 202, answer.text
    result: dict[str, object] = answer.json()
    return result


def received(server: Server, run_id: str) -> int:
    """How many signals the run recorded."""
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    return sum(e["kind"] == "signal_received" for e in events)


def test_a_retried_delivery_is_one_signal_by_header_or_by_body(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """The same body sent twice is one signal; two bodies with one `X-GitHub-Delivery` are
    one signal (the header names the delivery), and so are two with one `Idempotency-Key`;
    a retry that comes after the run has ended is still acknowledged as a duplicate."""
    server = hook_server(make_server, tmp_path)
    same = lambda run, n: {"metadata": {"run": run}, "payload": {"amount": 2}}  # noqa: E731
    fresh = lambda run, n: {"metadata": {"run": run}, "payload": {"amount": n}}  # noqa: E731
    cases = [({}, same), ({"X-GitHub-Delivery": "d-1"}, fresh), ({"Idempotency-Key": "k-9"}, fresh)]
    for headers, make_body in cases:
        run_id = server.start_run("signalled")
        assert send(server, json.dumps(make_body(run_id, 1)), **headers)["duplicate"] is False
        assert send(server, json.dumps(make_body(run_id, 2)), **headers)["duplicate"] is True
        server.wait_status(run_id, "delivered")
        late = send(server, json.dumps(make_body(run_id, 3)), **headers)
        assert late["duplicate"] is True, late
        assert received(server, run_id) == 1


def test_dedupe_none_makes_every_delivery_a_signal(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """With `dedupe = "none"` and no `key`, a byte-identical body sent twice is two signals
    (both kept while the run works before its wait)."""
    server = hook_server(make_server, tmp_path, 'dedupe = "none"\n')
    run_id = server.start_run("busy")
    body = json.dumps({"metadata": {"run": run_id}, "payload": {"amount": 2}})
    assert send(server, body)["duplicate"] is False
    assert send(server, body)["duplicate"] is False
    deadline = time.monotonic() + 15
    while received(server, run_id) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received(server, run_id) == 2


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('signall = "payment"', "unknown key 'signall': did you mean 'signal'? the keys are"),
        ('dedupe = "sometimes"', "dedupe = 'sometimes' is wrong: it must be \"auto\" (a delivery"),
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
