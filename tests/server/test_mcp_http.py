"""The MCP server at `/mcp` of a real `interlock serve` with auth on, driven by the MCP SDK's
client over streamable HTTP: the API's tokens and scopes apply to every tool."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.mcpserver.helpers import call, refused
from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, token, write_workflow


@asynccontextmanager
async def http_session(url: str, bearer: str) -> AsyncIterator[Client]:
    """A client of `url`/mcp sending `bearer` with every request."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30)
    transport = streamable_http_client(f"{url}/mcp", http_client=http)
    async with http, Client(transport, cache=None) as client:
        yield client


def test_tokens_and_scopes_guard_every_tool(make_server: ServerFactory) -> None:
    """A read-only token lists pipelines and reads runs but cannot start one; an operate
    token starts a run, approves it at its pause and reads the final output; prompts are
    not served over HTTP."""
    server = make_server(auth_secret=SECRET)

    async def scenario() -> dict[str, Any]:
        async with http_session(server.url, token(["read"])) as reader:
            listed = await call(reader, "list_pipelines")
            assert "review" in {p["pipeline"] for p in listed["pipelines"]}
            forbidden = await refused(reader, "start_run", pipeline="review", topic="x")
            assert forbidden["code"] == "forbidden"
            assert "needs the 'operate' scope" in forbidden["message"]
            assert (await call(reader, "list_runs"))["runs"] == []

        async with http_session(server.url, token(["read", "operate"])) as operator:
            row = await call(operator, "start_run", pipeline="review", topic="HTTP")
            run_id = row["run_id"]
            assert (await call(operator, "wait_for_run", run_id=run_id))["status"] == "paused"
            await call(operator, "approve", run_id=run_id, note="from an agent")
            done = await call(operator, "wait_for_run", run_id=run_id)
            assert done["status"] == "delivered"
            final = await call(operator, "read_output", run_id=run_id, name="final.md")
            assert "Approved text" in final["text"]
            hidden = await refused(operator, "explain", run_id=run_id, prompts_of="draft")
            assert hidden["code"] == "not_served"

        async with http_session(server.url, token(["read"])) as reader:
            status = await call(reader, "run_status", run_id=run_id)
            events = (await call(reader, "run_events", run_id=run_id))["events"]
            assert any(e["kind"] == "approved" and e["data"]["by"] == "tester" for e in events)
            return status

    status = asyncio.run(scenario())
    assert status["status"] == "delivered"


def test_requests_without_a_good_token_are_refused(make_server: ServerFactory) -> None:
    """`/mcp` answers 401 without a token, 403 to a token without `read` and to a foreign
    web origin, as the API does, before the MCP app sees the request."""
    server = make_server(auth_secret=SECRET)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    anonymous = server.http.post("/mcp", json=hello, headers=accept)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthorized"
    operate_only = {**accept, "Authorization": f"Bearer {token(['operate'])}"}
    refused_scope = server.http.post("/mcp", json=hello, headers=operate_only)
    assert refused_scope.status_code == 403 and "'read'" in refused_scope.json()["error"]["message"]
    foreign = {**accept, "Authorization": f"Bearer {token(['read'])}", "Origin": "http://evil"}
    refused_origin = server.http.post("/mcp", json=hello, headers=foreign)
    assert refused_origin.status_code == 403
    assert refused_origin.json()["error"]["code"] == "bad_origin"


def test_actions_share_the_api_rate_limits(make_server: ServerFactory) -> None:
    """Starting a run through MCP spends the same `start` bucket as the REST route: after one
    start over REST, the tool answers `rate_limited`, while reading goes on."""
    server = make_server(auth_secret=SECRET, rate_limit=0.001, rate_burst=1)
    bearer = token(["read", "operate"])
    started = server.http.post(
        "/api/runs",
        json={"pipeline": "quick", "topic": "one"},
        headers={"Authorization": f"Bearer {bearer}"},
    )
    assert started.status_code == 201

    async def scenario() -> None:
        async with http_session(server.url, bearer) as client:
            limited = await refused(client, "start_run", pipeline="quick", topic="two")
            assert limited["code"] == "rate_limited"
            assert len((await call(client, "list_runs"))["runs"]) == 1
            approve = await refused(client, "approve", run_id=started.json()["run_id"])
            assert approve["code"] == "wrong_state"  # another action has a bucket of its own

    asyncio.run(scenario())


def test_without_the_extra_mcp_names_it(tmp_path: Path) -> None:
    """A server without the MCP SDK installed serves its API, and `/mcp` answers 501 naming
    the extra to install."""
    hide = (
        "import sys; sys.modules['mcp'] = None; sys.argv[0] = 'interlock';"
        "from interlock.cli.main import main; main()"
    )
    workflow = write_workflow(tmp_path)
    command = [sys.executable, "-c", hide, "--home", str(tmp_path / "home"), "serve"]
    with subprocess.Popen(
        [*command, "--port", "0", "-w", str(workflow)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            assert server.stderr is not None
            line = server.stderr.readline()
            url = line.split("serving on ")[1].removesuffix("/ui/\n")
            hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            answer = httpx.post(f"{url}/mcp", json=hello)
            assert answer.status_code == 501
            assert "pip install 'interlock[mcp]'" in answer.json()["error"]["message"]
            assert httpx.get(f"{url}/api/health").json() == {"ok": True}
        finally:
            server.terminate()


def test_a_signal_lets_a_waiting_run_go_on(make_server: ServerFactory) -> None:
    """A run waiting for a signal is listed as waiting; data that does not match the wait's
    schema is refused; the right signal lets it deliver, and a signal to an ended run names
    the states that accept one."""
    server = make_server(auth_secret=SECRET)

    async def scenario() -> None:
        async with http_session(server.url, token(["read", "operate"])) as client:
            run_id = (await call(client, "start_run", pipeline="signalled", topic="s"))["run_id"]
            assert (await call(client, "wait_for_run", run_id=run_id))["status"] == "waiting"
            invalid = await refused(client, "signal", run_id=run_id, name="payment", data={})
            assert invalid["code"] == "invalid_signal"
            sent = await call(client, "signal", run_id=run_id, name="payment", data={"amount": 3})
            assert sent["accepted"] == "signal"
            assert (await call(client, "wait_for_run", run_id=run_id))["status"] == "delivered"
            late = await refused(client, "signal", run_id=run_id, name="payment", data={})
            assert late["code"] == "wrong_state"
            assert "signal needs a run that is running or paused" in late["message"]

    asyncio.run(scenario())


def test_a_batch_started_over_mcp_is_driven_by_the_server(make_server: ServerFactory) -> None:
    """start_batch over `/mcp` records the rows and the server's orchestrator runs them (as
    `POST /api/batches` does); the REST API shows the same batch."""
    server = make_server(auth_secret=SECRET)
    bearer = token(["read", "operate"])

    async def scenario() -> dict[str, Any]:
        async with http_session(server.url, bearer) as client:
            rows = [{"topic": "one"}, {"topic": "two"}]
            started = await call(client, "start_batch", pipeline="quick", rows=rows, batch_id="mb")
            assert started["row_count"] == 2
            for _ in range(300):
                shown = await call(client, "batch_status", batch_id="mb")
                if shown["settled"]:
                    return shown
                await asyncio.sleep(0.05)
            raise AssertionError(shown)

    shown = asyncio.run(scenario())
    assert shown["counts"] == {"delivered": 2}
    served = server.http.get("/api/batches/mb", headers={"Authorization": f"Bearer {bearer}"})
    assert [r["run_id"] for r in served.json()["rows"]] == ["mb-r1", "mb-r2"]


OPERATE: dict[str, dict[str, Any]] = {
    "start_run": {"pipeline": "quick", "topic": "x"},
    "rerun": {"run_id": "x"},
    "approve": {"run_id": "x"},
    "reject": {"run_id": "x", "to": "draft", "feedback": "x"},
    "edit_output": {"run_id": "x", "output": "draft.md", "text": "x"},
    "decide_tool_call": {"run_id": "x", "call": "w@1/1/1", "approve": True},
    "cancel": {"run_id": "x"},
    "signal": {"run_id": "x", "name": "go"},
    "resume": {"run_id": "x"},
    "start_batch": {"pipeline": "quick", "rows": [{"topic": "x"}]},
    "retry_batch": {"batch_id": "x"},
    "cancel_batch": {"batch_id": "x"},
}
READ: dict[str, dict[str, Any]] = {
    "list_pipelines": {},
    "list_runs": {},
    "run_status": {"run_id": "x"},
    "wait_for_run": {"run_id": "x"},
    "run_events": {"run_id": "x"},
    "explain": {"run_id": "x"},
    "list_outputs": {"run_id": "x"},
    "read_output": {"run_id": "x", "name": "final.md"},
    "list_batches": {},
    "batch_status": {"batch_id": "x"},
    "compare_batches": {"batch_ids": ["x"]},
}


def test_each_tool_needs_the_scope_of_its_route(make_server: ServerFactory) -> None:
    """With a read-only token every acting tool is refused for want of `operate` (before it
    looks at its arguments) and no reading tool is."""
    server = make_server(auth_secret=SECRET)

    async def scenario() -> None:
        async with http_session(server.url, token(["read"])) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == set(OPERATE) | set(READ)
            for name, arguments in OPERATE.items():
                error = await refused(client, name, **arguments)
                assert error["code"] == "forbidden", name
            for name, arguments in READ.items():
                result = await client.call_tool(name, arguments)
                body = result.structured_content or {}
                assert body.get("error", {}).get("code") != "forbidden", name

    asyncio.run(scenario())
