"""Exports need their own scope and a header token; reads have a rate limit per caller."""

from __future__ import annotations

import io
import tarfile

from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, token

from interlock.server.auth import issue_token


def test_an_export_needs_the_export_scope_and_a_header_token(make_server: ServerFactory) -> None:
    """A read or operate token cannot download a run's bundle; an export token can, from the
    Authorization header only: `?token=` is refused, so a bundle's token is never in a link."""
    server = make_server(auth_secret=SECRET)
    operate = {"Authorization": f"Bearer {token(['read', 'operate'])}"}
    run_id = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "t"}, headers=operate
    ).json()["run_id"]
    url = f"/api/runs/{run_id}/export"
    for scopes in (["read"], ["read", "operate"]):
        refused = server.http.get(url, headers={"Authorization": f"Bearer {token(scopes)}"})
        assert refused.status_code == 403, refused.text
        assert "needs the 'export' scope" in refused.json()["error"]["message"]
    export = token(["export"])
    in_link = server.http.get(url, params={"token": export, "download": "1"})
    assert in_link.status_code == 401 and "Authorization: Bearer" in in_link.text
    answer = server.http.get(url, headers={"Authorization": f"Bearer {export}"})
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
        assert "manifest.json" in tar.getnames()
    assert issue_token(SECRET, ["export"])  # `serve --issue-token export` knows the scope


def test_reads_are_rate_limited_per_caller(make_server: ServerFactory) -> None:
    """A caller past its read budget gets 429 with Retry-After; another token, the health
    check and actions are not held up by it."""
    server = make_server(auth_secret=SECRET, read_rate_limit=6.0, read_burst=3)
    greedy = {"Authorization": f"Bearer {token(['read', 'operate'])}"}
    codes = [server.http.get("/api/runs", headers=greedy).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429], codes
    limited = server.http.get("/api/workflows", headers=greedy)
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert "too many requests" in limited.json()["error"]["message"]
    other = {"Authorization": f"Bearer {token(['read'], ttl=900)}"}
    assert server.http.get("/api/runs", headers=other).status_code == 200
    assert server.http.get("/api/health").status_code == 200
    started = server.http.post(
        "/api/runs", json={"pipeline": "quick", "topic": "t"}, headers=greedy
    )
    assert started.status_code == 201, started.text
