"""`interlock watch RUN`: follow a run's stream in the terminal, from the store or a server."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from interlock.api import Interlock
from interlock.core.loader import Definition
from interlock.core.state import RunState, apply
from interlock.server.messages import event_message

STYLE = {"running": "yellow", "paused": "cyan", "delivered": "green", "failed": "red"}
STYLE["cancelled"] = "red"
STYLE["waiting"] = "cyan"


def from_store(app: Interlock, run_id: str, since: int = 0) -> Iterator[dict[str, Any]]:
    """The run's messages, read from the store (polling), until the final one."""
    run_id = app.resolve(run_id)
    record = app.store.get_run(run_id)
    pipeline = Definition.from_canonical(
        record.pipeline, app.store.definition(record.definition_hash)
    ).pipeline
    state = RunState()
    for stored in app.watch(run_id, 0):
        apply(state, stored.event)
        if stored.seq > since:
            yield event_message(stored, state, pipeline)


def from_server(url: str, run_id: str, since: int, token: str | None) -> Iterator[dict[str, Any]]:
    """The run's messages from a server's WebSocket, reconnecting with `since` when dropped."""
    from websockets.sync.client import connect

    base = url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    protocols = ["interlock", f"bearer.{token}"] if token else None
    while True:
        target = f"{base}/ws/runs/{run_id}?since={since}"
        with connect(target, subprotocols=protocols, open_timeout=10) as socket:  # type: ignore[arg-type]
            for raw in socket:
                message = json.loads(raw)
                if message["type"] == "error":
                    raise SystemExit(f"error: {message['error']['message']}")
                if message["type"] == "dropped":
                    since = message["since"]
                    break
                if message["type"] == "event":
                    since = message["seq"]
                yield message
                if message.get("final"):
                    return
            else:
                return


class Display:
    """A header with state, phase and progress, and the latest messages."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.last: dict[str, Any] = {}
        # Shown progress never goes back: a loop that revisits a phase lowers the estimate,
        # but a person watching reads a drop as lost work.
        self.progress = 0.0
        self.lines: deque[Text] = deque(maxlen=14)
        self.streaming: dict[str, str] = {}

    def add(self, message: dict[str, Any]) -> None:
        """Take in one stream message."""
        if message["type"] == "token":
            text = self.streaming.get(message["task_id"], "") + message["text"]
            self.streaming[message["task_id"]] = text[-200:]
            return
        if message["type"] != "event":
            return
        self.last = message
        self.progress = max(self.progress, float(message.get("progress", 0.0)))
        self.streaming.pop(message["data"].get("task_id", ""), None)
        stamp = time.strftime("%H:%M:%S", time.localtime(message["at"]))
        line = Text.assemble(
            (f"{stamp} ", "dim"), (f"#{message['seq']:<4}", "dim"), message["message"]
        )
        if message.get("rule"):
            line.append(f"  [{message['rule']}]", style="dim")
        self.lines.append(line)

    def render(self) -> Group:
        """The current view."""
        m = self.last
        state = m.get("state", "…")
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text(self.run_id, style="bold"),
            Text(state, style=STYLE.get(state, "")),
            Text(f"phase {m.get('phase') or '-'}"),
            ProgressBar(total=1.0, completed=self.progress, width=30),
            Text(f"{100 * self.progress:.0f}%  ${m.get('cost_usd', 0.0):.4f}"),
        )
        tail = [Text(f"  {t}: …{s[-80:]}", style="italic dim") for t, s in self.streaming.items()]
        return Group(head, *self.lines, *tail)


def watch(console: Console, run_id: str, messages: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """Show `messages` live (or one line each off a terminal); returns the last event's."""
    display = Display(run_id)
    if not console.is_terminal:
        for message in messages:
            display.add(message)
            if message["type"] == "event":
                console.print(
                    f"{message['seq']:>4} {message['state']:<9} {display.progress:>5.0%} "
                    f"{message['message']}",
                    highlight=False,
                    soft_wrap=True,
                )
        return display.last
    with Live(display.render(), console=console, refresh_per_second=8) as live:
        for message in messages:
            display.add(message)
            live.update(display.render())
    return display.last
