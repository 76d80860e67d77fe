"""A local OpenAI-compatible chat-completions server for the `llm` benchmark section.

    python benchmarks/llm_server.py --latency 1.0 --chunks 20

Every `POST .../chat/completions` waits `--latency` seconds (the model thinking), then streams
`--chunks` text fragments as server-sent events, a usage chunk and `[DONE]`; with
`"stream": false` it answers one JSON document instead. It prints `port N` once it listens and
serves until stdin closes, so it never outlives the benchmark that started it. It runs in a
process of its own so that its CPU is not counted as the client's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys

from aiohttp import web


def chunk(model: str, delta: dict[str, str], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def make_app(latency: float, chunks: int, gap: float) -> web.Application:
    """The application: one route, answering every model name."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = str(body.get("model", "bench"))
        await asyncio.sleep(latency)
        usage = {"prompt_tokens": 20, "completion_tokens": chunks, "total_tokens": 20 + chunks}
        if body.get("stream") is False:
            message = {"role": "assistant", "content": "word " * chunks}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return web.json_response({"model": model, "choices": [choice], "usage": usage})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk(model, {"role": "assistant", "content": ""}))
        for _ in range(chunks):
            if gap:
                await asyncio.sleep(gap)
            await response.write(chunk(model, {"content": "word "}))
        await response.write(chunk(model, {}, "stop"))
        tail = {"id": "chatcmpl-bench", "model": model, "choices": [], "usage": usage}
        await response.write(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/{prefix:.*}chat/completions", completions)
    return app


async def serve(latency: float, chunks: int, gap: float) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8192)  # thousands of calls connect at once
    runner = web.AppRunner(make_app(latency, chunks, gap), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=8192).start()
    print(f"port {sock.getsockname()[1]}", flush=True)
    # Serve until the parent closes our stdin (or dies).
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=1.0, help="seconds before answering")
    parser.add_argument("--chunks", type=int, default=20, help="text fragments per answer")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between fragments")
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.chunks, args.gap))


if __name__ == "__main__":
    main()
