"""Signals over HTTP: the operate scope, idempotency keys, schema errors and wrong states."""

from __future__ import annotations

from tests.server.conftest import ServerFactory
from tests.server.helpers import Server, token


def test_signal_route_delivers_and_repeats_are_ignored(server: Server) -> None:
    """A waiting run shows what it waits for; a signal lets it deliver; a repeat is ignored."""
    run_id = server.start_run("signalled")
    waiting = server.wait_status(run_id, "waiting")
    assert waiting["waiting"]["signal"] == "payment" and waiting["tasks"] == []
    listed = server.http.get("/api/runs", params={"status": "waiting"}).json()
    assert [r["run_id"] for r in listed] == [run_id]
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
