"""The journal of the model calls a `call:` worker makes through `ctx.model`.

One file per task, ``journal/<task>.calls.jsonl`` in the run directory, for every attempt of
the task: a line per answered call (appended and fsynced once the answer is complete), keyed
by the SHA-256 of the request. A later attempt that sends the same request gets the recorded
answer back instead of paying for it again: the k-th call of one request replays the k-th line
recorded for it, so calls made concurrently replay whatever order they are issued in. A
request that differs (another prompt, other tools, other settings) matches no line and is
sent. Each line carries the SHA-256 of its content; a line that does not match (changed, or
cut short by a crash while it was written) and everything after it is not used.

Which calls the ledger has counted is kept too: when an attempt ends, a line says that the
calls recorded so far are in its usage. The calls after the last such line were paid by an
attempt that never reported (its process was killed): the next attempt counts them in its own
usage, so what was spent is counted once.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict, deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

from interlock.providers.base import ModelRequest, ModelResult, ToolCall
from interlock.runtime.sealed_lines import append_sealed, keep_good, read_sealed


def request_key(request: ModelRequest) -> str:
    """What a recorded answer answers: the alias, the messages, the tools offered, the
    schema asked for and the settings sent (never the idempotency key or the timeout)."""
    text = json.dumps(
        {
            "alias": request.alias,
            "system": request.system,
            "prompt": request.prompt,
            "turns": [asdict(turn) for turn in request.turns],
            "tools": [asdict(tool) for tool in request.tools],
            "schema": request.response_schema,
            "max_output_tokens": request.max_output_tokens,
            "settings": request.settings.model_dump(mode="json", exclude_none=True),
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def result_json(result: ModelResult) -> dict[str, Any]:
    """A result as JSON values (what a journal line keeps)."""
    return {**asdict(result), "tool_calls": [asdict(call) for call in result.tool_calls]}


def result_of(data: dict[str, Any]) -> ModelResult:
    """The result a journal line keeps."""
    calls = tuple(ToolCall(**call) for call in data.get("tool_calls") or ())
    values = {**data, "tool_calls": calls, "thinking": tuple(data.get("thinking") or ())}
    return ModelResult(**values)


class CallJournal:
    """The calls journal of one task (see the module docstring).

    Args:
        path: ``journal/<task>.calls.jsonl`` in the run directory.
        attempt: The attempt that reads and appends to it now.
    """

    def __init__(self, path: Path, attempt: int) -> None:
        self.path = path
        self.attempt = attempt
        self._lock = threading.Lock()
        self._answers: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self._calls = 0  # call lines in the file
        self._counted = 0  # of them, those an ended attempt counted in its usage
        self._unreported: list[dict[str, Any]] = []  # usage of calls no attempt counted
        self._load()

    def _load(self) -> None:
        found = read_sealed(self.path)
        for body in found.bodies:
            if "settled" in body:
                self._counted = max(self._counted, int(body["settled"]))
                continue
            self._calls += 1
            self._answers[body["key"]].append(body)
        keep_good(self.path, found)  # what follows a bad line is not trusted
        lines = sorted((b for q in self._answers.values() for b in q), key=lambda b: b["n"])
        self._unreported = [b["usage"] for b in lines if b["n"] > self._counted]

    def unreported(self) -> list[dict[str, Any]]:
        """The usage of calls that earlier attempts paid for and no attempt counted."""
        return list(self._unreported)

    def replay(self, key: str) -> ModelResult | None:
        """The next recorded answer to the request with `key`, if one is left."""
        with self._lock:
            answers = self._answers.get(key)
            if not answers:
                return None
            return result_of(answers.popleft()["result"])

    def record(self, key: str, result: ModelResult, usage: dict[str, Any]) -> None:
        """Append an answered call."""
        with self._lock:
            self._calls += 1
            body = {
                "n": self._calls,
                "key": key,
                "attempt": self.attempt,
                "result": result_json(result),
                "usage": usage,
            }
            self._append(body)

    def settle(self) -> None:
        """Say that every call recorded so far is counted (the attempt's usage has them)."""
        with self._lock:
            if self._calls > self._counted:
                self._append({"settled": self._calls, "attempt": self.attempt})
                self._counted = self._calls

    def _append(self, body: dict[str, Any]) -> None:
        append_sealed(self.path, body)
