"""Inbound webhooks signed the Standard Webhooks way: a replay is never a second signal, old
or re-dated deliveries and the earlier unsigned-time scheme are refused, forged requests
never starve the genuine sender, and hostile bodies are a 400 with the reason."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from tests.server.conftest import ServerFactory
from tests.server.helpers import WORKFLOW, Server, write_workflow

from interlock.server.hooks import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    load_hooks,
    sign,
    signed_headers,
)

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
        - role: worker
          command:
            - "{python}"
            - "-c"
            - "import os,time;time.sleep(2);open(os.environ['INTERLOCK_OUTPUT'],'w').write('ok')"
    - id: ship
      wait_for: {signal: payment}
      workers:
        - {role: shipper, call: srv.slow, final: true}
"""
URL = "/api/hooks/payments"


def hook_server(make_server: ServerFactory, tmp_path: Path) -> Server:
    """A server with the `payments` hook, whose runs of `busy` keep every signal sent."""
    config = tmp_path / "interlock.toml"
    config.write_text(HOOKS)
    hooks = load_hooks(config, {"TEST_PAYMENTS_SECRET": SECRET})
    return make_server(hooks=hooks, workflows=[write_workflow(tmp_path, WORKFLOW + BUSY)])


def body_for(run_id: str, amount: int = 2) -> bytes:
    """A hook body that signals `run_id`."""
    return json.dumps({"metadata": {"run": run_id}, "payload": {"amount": amount}}).encode()


def received(server: Server, run_id: str) -> int:
    """How many signals the run recorded."""
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    return sum(e["kind"] == "signal_received" for e in events)


def test_a_replayed_delivery_with_new_idempotency_keys_is_one_signal(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """One genuine delivery replayed five times, each time with a new Idempotency-Key and
    delivery-id header, is one signal: only the signed webhook-id names a delivery."""
    server = hook_server(make_server, tmp_path)
    run_id = server.start_run("busy")
    body = body_for(run_id)
    genuine = signed_headers(SECRET.encode(), body)
    answers = []
    for n in range(6):
        extra = {"Idempotency-Key": f"k-{n}", "X-GitHub-Delivery": f"g-{n}"} if n else {}
        answer = server.http.post(URL, content=body, headers={**genuine, **extra})
        assert answer.status_code == 202, answer.text
        answers.append(answer.json()["duplicate"])
    assert answers == [False, True, True, True, True, True]
    server.wait_status(run_id, "delivered", timeout=30)
    assert received(server, run_id) == 1


def test_old_future_and_redated_deliveries_are_refused(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A delivery signed more than five minutes ago (or ahead) is refused, saying how far off
    its timestamp is; a captured one sent again with a new timestamp fails the signature,
    which covers the timestamp."""
    server = hook_server(make_server, tmp_path)
    run_id = server.start_run("busy")
    body = body_for(run_id)
    now = int(time.time())
    for stamp, words in ((now - 400, "s old"), (now + 400, "s in the future")):
        headers = signed_headers(SECRET.encode(), body, "d-old", stamp)
        answer = server.http.post(URL, content=body, headers=headers)
        assert answer.status_code == 401, answer.text
        message = answer.json()["error"]["message"]
        assert words in message and "more than 300 s from this server's clock" in message
    redated = {**signed_headers(SECRET.encode(), body, "d-old", now - 400)}
    redated[TIMESTAMP_HEADER] = str(now)
    answer = server.http.post(URL, content=body, headers=redated)
    assert answer.status_code == 401 and "no webhook-signature matches" in answer.text
    assert received(server, run_id) == 0


def test_the_earlier_scheme_is_refused_naming_the_headers_to_send(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """`X-Interlock-Signature: sha256=<hex HMAC of the body>` (replayable: it signs no time)
    is a 401 that names the Standard Webhooks headers and says the old one is not accepted."""
    import hashlib
    import hmac

    server = hook_server(make_server, tmp_path)
    run_id = server.start_run("busy")
    body = body_for(run_id)
    old = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    answer = server.http.post(URL, content=body, headers={"X-Interlock-Signature": old})
    assert answer.status_code == 401
    message = answer.json()["error"]["message"]
    for word in (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER, "no longer accepted"):
        assert word in message, message


def test_signatures_match_the_standard_webhooks_test_vector(tmp_path: Path) -> None:
    """A `whsec_` secret is read as Standard Webhooks libraries read it, and the signature is
    the one the specification gives for its example."""
    config = tmp_path / "interlock.toml"
    config.write_text(HOOKS)
    env = {"TEST_PAYMENTS_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
    hook = load_hooks(config, env)["payments"]
    assert hook.secret == base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    assert hook.written == env["TEST_PAYMENTS_SECRET"]  # what masking must hide
    signature = sign(
        hook.secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_forged_requests_and_replays_never_starve_the_genuine_sender(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Unsigned and forged requests spend a bucket of their own (429 once it is empty), and
    replays of an accepted delivery spend none: the genuine deliveries that follow a flood of
    both are accepted."""
    server = hook_server(make_server, tmp_path)
    run_id = server.start_run("busy")
    body = body_for(run_id)
    codes = [server.http.post(URL, content=body).status_code for _ in range(11)]
    forged = {**signed_headers(b"x" * 32, body)}
    codes += [server.http.post(URL, content=body, headers=forged).status_code for _ in range(5)]
    assert set(codes[:10]) == {401} and codes[-1] == 429, codes
    first = signed_headers(SECRET.encode(), body)
    assert server.http.post(URL, content=body, headers=first).status_code == 202
    replays = [server.http.post(URL, content=body, headers=first) for _ in range(15)]
    assert {r.status_code for r in replays} == {202} and all(r.json()["duplicate"] for r in replays)
    second = body_for(server.start_run("busy"), 3)
    answer = server.http.post(URL, content=second, headers=signed_headers(SECRET.encode(), second))
    assert answer.status_code == 202 and answer.json()["duplicate"] is False, answer.text


def test_a_signed_body_nested_too_deep_is_a_400_with_the_reason(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A signed body nested far past the recursion limit, or holding NaN, is refused with 400
    and why, and is no signal."""
    server = hook_server(make_server, tmp_path)
    run_id = server.start_run("busy")
    deep = b'{"metadata": {"run": "%s"}, "payload": ' % run_id.encode()
    deep += b"[" * 20_000 + b"]" * 20_000 + b"}"
    answer = server.http.post(URL, content=deep, headers=signed_headers(SECRET.encode(), deep))
    assert answer.status_code == 400, answer.text
    assert "20001 levels deep; at most 64 are accepted" in answer.json()["error"]["message"]
    nan = b'{"metadata": {"run": "%s"}, "payload": {"amount": NaN}}' % run_id.encode()
    answer = server.http.post(URL, content=nan, headers=signed_headers(SECRET.encode(), nan))
    assert answer.status_code == 400 and "NaN, which is not a JSON number" in answer.text
    assert received(server, run_id) == 0
