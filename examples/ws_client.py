"""Follow one run over the WebSocket, resuming after a dropped connection without gaps.

    pip install websockets
    python examples/ws_client.py RUN_ID [ws://127.0.0.1:8765]
"""

import asyncio
import json
import sys

import websockets


async def follow(run_id: str, server: str = "ws://127.0.0.1:8765") -> None:
    since = 0  # the last sequence number seen: the server replays everything after it
    while True:
        try:
            async with websockets.connect(f"{server}/ws/runs/{run_id}?since={since}") as ws:
                async for raw in ws:
                    message = json.loads(raw)
                    if message["type"] == "token":  # streamed model text, live only
                        print(message.get("text", ""), end="", flush=True)
                    elif message["type"] == "event":
                        since = message["seq"]
                        print(f"{message['seq']:>4} {message['progress']:>4.0%} {message['message']}")
                        if message["final"]:
                            return
        except (OSError, websockets.ConnectionClosed):
            await asyncio.sleep(1)  # reconnect and resume from `since`


if __name__ == "__main__":
    asyncio.run(follow(*sys.argv[1:3]))
