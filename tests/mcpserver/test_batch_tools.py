"""The batch tools of `interlock mcp` over stdio, driven by the MCP SDK's client: a batch
started from rows, followed, retried and cancelled, two batches compared, and bad input
answered with the `{"error": {"code", "message"}}` body."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from mcp import Client
from tests.mcpserver.helpers import call, refused, stdio_session

# Odd rows fail until the file `flag` exists beside the workflow.
FLOW = """\
score:
  inputs:
    n: {type: integer, required: true}
  metrics:
    score: w.score
  phases:
    - id: only
      workers:
        - role: w
          final: true
          command:
            - sh
            - -c
            - '[ -e FLAG ] || [ $(($1 % 2)) -eq 0 ] || exit 3; echo "Score: $1" > "$2"'
            - sh
            - "{{ n }}"
            - "{output}"
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def folder_with_flow(tmp_path: Path) -> Path:
    """A project folder whose one workflow file holds the `score` pipeline."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "score.yaml").write_text(FLOW.replace("FLAG", str(tmp_path / "flag")))
    return tmp_path


async def settled(client: Client, batch_id: str) -> dict[str, Any]:
    """batch_status once nothing more runs."""
    deadline = time.monotonic() + 60
    while True:
        shown = await call(client, "batch_status", batch_id=batch_id)
        if shown["settled"]:
            return shown
        assert time.monotonic() < deadline, shown
        await asyncio.sleep(0.1)


def test_a_batch_is_started_followed_retried_and_compared(tmp_path: Path) -> None:
    """start_batch checks every row and runs them; batch_status filters rows by status;
    retry_batch gives the failed rows a new try; compare_batches compares two batches of
    the same rows; cancel_batch of a settled batch stops nothing; list_batches lists both."""
    folder = folder_with_flow(tmp_path)

    async def scenario() -> None:
        async with stdio_session(folder) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"list_batches", "batch_status", "start_batch"} <= names
            assert {"retry_batch", "cancel_batch", "compare_batches"} <= names
            assert (await call(client, "list_batches"))["batches"] == []
            rows = [{"topic": f"t{n}", "n": n} for n in (1, 2, 3)]
            started = await call(
                client, "start_batch", pipeline="score", rows=rows, batch_id="m1", tolerate="67%"
            )
            assert (started["batch_id"], started["row_count"]) == ("m1", 3)
            assert (started["tolerate"], started["allowed_failures"]) == ("67%", 2)
            shown = await settled(client, "m1")
            assert shown["counts"] == {"delivered": 1, "failed": 2}
            failed = await call(client, "batch_status", batch_id="m1", status="failed", limit=1)
            assert failed["rows_matching"] == 2
            assert [r["run_id"] for r in failed["rows"]] == ["m1-r1"]

            (folder / "flag").write_text("")
            retried = await call(client, "retry_batch", batch_id="m1")
            assert (retried["retried"], retried["batch_ids"]) == (2, ["m1"])
            shown = await settled(client, "m1")
            assert shown["counts"] == {"delivered": 3}
            assert [r["run_id"] for r in shown["rows"]] == ["m1-r1-t2", "m1-r2", "m1-r3-t2"]

            backwards = [{"topic": f"t{n}", "n": n} for n in (3, 2, 1)]
            await call(client, "start_batch", pipeline="score", rows=backwards, batch_id="m2")
            await settled(client, "m2")
            found = await call(client, "compare_batches", batch_ids=["m1", "m2"], limit=1)
            assert [v["batch_id"] for v in found["variants"]] == ["m1", "m2"]
            assert found["by"] == "score"
            [most] = found["differences"]
            assert most["row"] == 1 and most["diff"] == "interlock diff m1-r1-t2 m2-r1"

            done = await call(client, "cancel_batch", batch_id="m2")
            assert (done["unstarted"], done["stopped"]) == (0, [])
            listed = (await call(client, "list_batches"))["batches"]
            assert [b["batch_id"] for b in listed] == ["m2", "m1"]

    asyncio.run(scenario())


def test_bad_input_is_an_error_body(tmp_path: Path) -> None:
    """A bad row (naming it), limits out of range, an unknown pipeline or batch, a compare
    of a batch that is no experiment, and a read-only server's start are error results with
    the API's codes; nothing is recorded."""
    folder = folder_with_flow(tmp_path)

    async def scenario() -> None:
        async with stdio_session(folder) as client:
            bad = await refused(
                client, "start_batch", pipeline="score", rows=[{"n": 1}, {"n": "x"}]
            )
            assert bad["code"] == "bad_request"
            assert "row 2: input 'n' is a whole number" in bad["message"]
            zero = await refused(
                client, "start_batch", pipeline="score", rows=[{"n": 1}], concurrency=0
            )
            assert zero == {
                "code": "bad_request",
                "message": "concurrency: give 1 to 10,000 (got 0)",
            }
            past = await refused(
                client, "start_batch", pipeline="score", rows=[{"n": 1}], tolerate="150%"
            )
            assert past["code"] == "bad_request"
            assert "tolerate '150%' is more than 100% of the rows" in past["message"]
            empty = await refused(client, "start_batch", pipeline="score", rows=[])
            assert "rows: give 1 to 100,000 rows" in empty["message"]
            ghost = await refused(client, "start_batch", pipeline="ghost", rows=[{"n": 1}])
            assert ghost["code"] == "pipeline_not_found"
            assert (await call(client, "list_batches"))["batches"] == []
            for tool in ("batch_status", "retry_batch", "cancel_batch"):
                missing = await refused(client, tool, batch_id="nope")
                assert missing["code"] == "batch_not_found", tool
                assert "nope" in missing["message"]
            await call(client, "start_batch", pipeline="score", rows=[{"n": 2}], batch_id="one")
            alone = await refused(client, "compare_batches", batch_ids=["one"])
            assert alone["code"] == "bad_request" and "is no experiment" in alone["message"]
            taken = await refused(
                client, "start_batch", pipeline="score", rows=[{"n": 2}], batch_id="one"
            )
            assert taken["code"] == "batch_exists"

        async with stdio_session(folder, "--scope", "read") as client:
            forbidden = await refused(client, "start_batch", pipeline="score", rows=[{"n": 2}])
            assert forbidden["code"] == "forbidden"
            assert "start_batch needs the 'operate' scope" in forbidden["message"]

    asyncio.run(scenario())
