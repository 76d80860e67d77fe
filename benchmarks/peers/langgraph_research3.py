"""research-3 on LangGraph with the SQLite checkpointer, durability="sync".

Run with the interpreter of benchmarks/.envs/langgraph:

    python langgraph_research3.py [--runs N] [--concurrent M]

One run is one invocation of a StateGraph on its own thread_id: START fans
out to two worker nodes (one super-step, run in parallel by LangGraph), both
feed a writer node.  With durability="sync" LangGraph persists each
super-step's checkpoint before starting the next one.  The checkpointer is
SqliteSaver on a file in a temp dir (the saver switches the file to WAL; the
connection keeps SQLite's default synchronous=FULL, read back and reported).

Concurrent runs are M invocations submitted at once to a pool of M threads
sharing the one saver (SqliteSaver serialises its writes with a lock).

Prints one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from typing import Annotated, TypedDict


def hard_timeout(seconds: float, result: dict) -> None:
    def fire() -> None:
        result["error"] = f"hard timeout after {seconds:.0f}s"
        print(json.dumps(result), flush=True)
        os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


class State(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]
    report: str


def web(state: State) -> dict:
    return {"notes": [f"web:{state['topic']}"]}


def papers(state: State) -> dict:
    return {"notes": [f"papers:{state['topic']}"]}


def writer(state: State) -> dict:
    return {"report": "report(" + ",".join(sorted(state["notes"])) + ")"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    result: dict = {
        "peer": "langgraph",
        "backend": "sqlite",
        "version": version("langgraph"),
        "sequential_runs_per_s": None,
        "ms_per_step": None,
        "concurrent_runs_per_s": None,
        "error": None,
    }
    hard_timeout(args.timeout, result)

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    tmp = tempfile.mkdtemp(prefix="bench-langgraph-")
    try:
        with SqliteSaver.from_conn_string(os.path.join(tmp, "checkpoints.sqlite")) as saver:
            saver.setup()
            result["durability"] = (
                "durability=sync; sqlite journal_mode="
                + str(saver.conn.execute("PRAGMA journal_mode").fetchone()[0])
                + " synchronous="
                + str(saver.conn.execute("PRAGMA synchronous").fetchone()[0])
            )
            result["checkpointer_version"] = version("langgraph-checkpoint-sqlite")

            g = StateGraph(State)
            g.add_node("web", web)
            g.add_node("papers", papers)
            g.add_node("writer", writer)
            g.add_edge(START, "web")
            g.add_edge(START, "papers")
            g.add_edge(["web", "papers"], "writer")
            g.add_edge("writer", END)
            graph = g.compile(checkpointer=saver)

            def run(thread_id: str) -> str:
                out = graph.invoke(
                    {"topic": thread_id},
                    {"configurable": {"thread_id": thread_id}},
                    durability="sync",
                )
                return out["report"]

            for i in range(3):
                run(f"warm{i}")

            t0 = time.perf_counter()
            for i in range(args.runs):
                out = run(f"seq{i}")
                assert out == f"report(papers:seq{i},web:seq{i})", out
            seq = time.perf_counter() - t0
            result["sequential_runs_per_s"] = round(args.runs / seq, 2)
            result["ms_per_step"] = round(seq * 1000 / (args.runs * 3), 3)

            if args.concurrent > 0:
                try:
                    with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
                        t0 = time.perf_counter()
                        futs = [pool.submit(run, f"conc{i}") for i in range(args.concurrent)]
                        outs = [f.result() for f in futs]
                        conc = time.perf_counter() - t0
                    assert all(o.startswith("report(") for o in outs)
                    result["concurrent_runs_per_s"] = round(args.concurrent / conc, 2)
                except Exception as exc:
                    result["error"] = f"concurrent: {type(exc).__name__}: {exc}"[:300]
    except Exception as exc:
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(json.dumps(result), flush=True)
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
