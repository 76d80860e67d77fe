"""Signals over HTTP: the operate scope, idempotency keys, schema errors and wrong states."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server.conftest import ServerFactory
from tests.server.helpers import Server, token

from interlock.api import Interlock
from interlock.errors import UsageError
from interlock.server.hooks import SIGNATURE_HEADER, load_hooks, signed_headers


def test_signal_route_delivers_and_repeats_are_ignored(server: Server) -> None:
    """A waiting run shows what it waits for (in the runs list too); a signal lets it
    deliver; a repeat is ignored."""
    run_id = server.start_run("signalled")
    waiting = server.wait_status(run_id, "waiting")
    assert waiting["waiting"]["signal"] == "payment" and waiting["tasks"] == []
    listed = server.http.get("/api/runs", params={"status": "waiting"}).json()
    assert [r["run_id"] for r in listed] == [run_id]
    assert listed[0]["waiting"]["signal"] == "payment", "the list says what a run waits for"
    metrics = server.http.get("/metrics").text
    assert 'interlock_runs_waiting{signal="payment"} 1.0' in metrics
    assert 'interlock_runs{status="waiting"} 1.0' in metrics
    bad = server.http.post(f"/api/runs/{run_id}/signals/payment", json={"data": {}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_signal"
    unknown = server.http.post(f"/api/runs/{run_id}/signals/nope", json={"data": {}})
    assert unknown.status_code == 400 and "it waits for: payment" in unknown.text
    sent = server.http.post(
        f"/api/runs/{run_id}/signals/payment",
        json={"data": {"amount": 5}},
        headers={"Idempotency-Key": "order-5"},
    )
    assert sent.status_code == 202 and sent.json()["accepted"] == "signal"
    again = server.http.post(
        f"/api/runs/{run_id}/signals/payment", json={"data": {"amount": 5}, "key": "order-5"}
    )
    assert again.status_code == 202 and again.json()["duplicate"] is True
    done = server.wait_status(run_id, "delivered")
    assert done["signals"]["received"] == {"payment": {"amount": 5}}
    said = [e["message"] for e in server.http.get(f"/api/runs/{run_id}/events").json()]
    assert "ship waits for signal payment" in said and "ship: signal payment arrived" in said
    assert "signal payment received from anonymous (key order-5)" in said, said
    ended = server.http.post(f"/api/runs/{run_id}/signals/payment", json={"data": {"amount": 1}})
    assert ended.status_code == 409 and "running, waiting or paused" in ended.text


def test_signal_route_needs_the_operate_scope(make_server: ServerFactory) -> None:
    """A read-only token cannot send signals; an operate token can."""
    from tests.server.helpers import SECRET

    server = make_server(auth_secret=SECRET)
    operate = {"Authorization": f"Bearer {token(['read', 'operate'])}"}
    server.http.headers.update(operate)
    run_id = server.start_run("signalled")
    server.wait_status(run_id, "waiting")
    read = {"Authorization": f"Bearer {token(['read'])}"}
    url = f"/api/runs/{run_id}/signals/payment"
    refused = server.http.post(url, json={"data": {"amount": 1}}, headers=read)
    assert refused.status_code == 403
    accepted = server.http.post(url, json={"data": {"amount": 1}}, headers=operate)
    assert accepted.status_code == 202


HOOKS = """
[hooks.payments]
signal = "payment"
run_id = "metadata.run"
data = "payload"
key = "id"
secret_env = "TEST_PAYMENTS_SECRET"
"""


def test_webhook_signals_a_run_when_its_signature_is_right(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A signed hook body signals the run it names; a wrong signature or body is refused."""
    config = tmp_path / "interlock.toml"
    config.write_text(HOOKS)
    secret = "s" * 32
    hooks = load_hooks(config, {"TEST_PAYMENTS_SECRET": secret})
    server = make_server(hooks=hooks)
    run_id = server.start_run("signalled")
    server.wait_status(run_id, "waiting")
    body = json.dumps({"id": "evt_1", "metadata": {"run": run_id}, "payload": {"amount": 2}})
    url = "/api/hooks/payments"
    forged_headers = {**signed_headers(secret.encode(), body.encode()), SIGNATURE_HEADER: "v1,AA=="}
    forged = server.http.post(url, content=body, headers=forged_headers)
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "bad_signature"
    unknown = server.http.post("/api/hooks/other", content=body)
    assert unknown.status_code == 404
    missing = json.dumps({"id": "evt_0"})
    no_run = server.http.post(
        url,
        content=missing,
        headers=signed_headers(secret.encode(), missing.encode()),
    )
    assert no_run.status_code == 400 and "'metadata.run'" in no_run.text
    signed = signed_headers(secret.encode(), body.encode())
    sent = server.http.post(url, content=body, headers=signed)
    assert sent.status_code == 202 and sent.json()["accepted"] == "signal", sent.text
    replayed = server.http.post(url, content=body, headers=signed)
    assert replayed.json()["duplicate"] is True
    done = server.wait_status(run_id, "delivered")
    assert done["signals"]["received"] == {"payment": {"amount": 2}}
    events = server.http.get(f"/api/runs/{run_id}/events").json()
    received = [e for e in events if e["kind"] == "signal_received"]
    assert [e["data"]["by"] for e in received] == ["hook:payments"]


def test_hook_configuration_errors_name_the_table_and_the_fix(tmp_path: Path) -> None:
    """A secret in the file, a missing variable or a bad key is refused with the fix."""
    config = tmp_path / "interlock.toml"
    config.write_text(HOOKS.replace('secret_env = "TEST_PAYMENTS_SECRET"', 'secret = "x"'))
    with pytest.raises(UsageError, match=r"\[hooks.payments\] has secret; secrets are never"):
        load_hooks(config, {})
    config.write_text(HOOKS)
    with pytest.raises(UsageError, match="TEST_PAYMENTS_SECRET must hold the hook's secret"):
        load_hooks(config, {})
    config.write_text(HOOKS.replace('signal = "payment"', 'signal = "pay-ment"'))
    with pytest.raises(UsageError, match=r"\[hooks.payments\]: signal"):
        load_hooks(config, {"TEST_PAYMENTS_SECRET": "s" * 32})


@pytest.fixture
def pg_store() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test (ask for it before the server, so
    that it is dropped after the server stopped)."""
    from tests.distributed.helpers import PG_ADMIN, admin

    from interlock.storage.postgres import PostgresStore

    name = f"il_sig_{uuid.uuid4().hex[:12]}"
    admin(f"CREATE DATABASE {name}")
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    PostgresStore(url).close()
    yield url
    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_signal_posted_elsewhere_wakes_a_postgres_server_at_once(
    pg_store: str, make_server: ServerFactory, tmp_path: Path
) -> None:
    """A server on PostgreSQL that looks at its inbox every 30 s records a signal another
    process posted within seconds: it hears the post's NOTIFY."""
    server = make_server(store_url=pg_store, heartbeat=30.0, lease_ttl=120.0)
    run_id = server.start_run("signalled")
    server.wait_status(run_id, "waiting")
    elsewhere = Interlock(tmp_path / "elsewhere", store=pg_store)
    try:
        sent = time.time()
        elsewhere.signal(run_id, "payment", {"amount": 4})
        server.wait_status(run_id, "delivered", timeout=20)
        recorded = next(e.at for e in elsewhere.events(run_id) if e.kind == "signal_received")
    finally:
        elsewhere.close()
    assert recorded - sent < 5.0
