"""The providers' batch APIs over HTTP: OpenAI's Batch API and Anthropic's Message Batches.

Each client sends a batch under interlock's tag (OpenAI: the batch's ``metadata``;
Anthropic: the prefix of every ``custom_id``), finds a batch by that tag again, reads its
status and, once it ended, its results by ``custom_id``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import aiohttp
import orjson

from interlock.providers.base import ProviderError
from interlock.providers.redaction import Secret, join_url

TAG_KEY = "interlock_batch"  # OpenAI metadata key holding the tag
COMPLETION_WINDOW = "24h"  # the only window OpenAI offers; Anthropic's batches expire alike


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """One request's end in a batch: the answer body, or why there is none."""

    answer: dict[str, Any] | None = None
    error: str = ""
    retryable: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class Poll:
    """What the provider says of a batch now."""

    status: str  # the provider's own word
    ended: bool = False  # results (or the lack of them) are final
    results: dict[str, Outcome] = dataclasses.field(default_factory=dict)  # by custom_id
    expired: bool = False  # the provider gave up on what had not finished


class BatchApi(Protocol):
    """One provider's batch API."""

    async def submit(self, tag: str, lines: Sequence[tuple[str, dict[str, Any]]]) -> str:
        """Send a batch of (custom_id, body); the provider's batch id."""
        ...

    async def find(self, tag: str, since: float) -> str | None:
        """The id of a batch sent under `tag` (created at `since` or later), if any."""
        ...

    async def poll(self, batch_id: str) -> Poll:
        """The batch's status, with its results once it ended."""
        ...

    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to stop the batch."""
        ...


class _Http:
    def __init__(self, *, session: aiohttp.ClientSession, base_url: str, headers: dict[str, str],
                 name: str, timeout: float = 60.0) -> None:  # fmt: skip
        self.session = session
        self.base_url = base_url
        self.headers = headers
        self.name = name
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        url = path if path.startswith(("http://", "https://")) else join_url(self.base_url, path)
        try:
            async with self.session.request(
                method, url, headers=self.headers, timeout=self.timeout, **kwargs
            ) as response:
                data = await response.read()
                if response.status >= 400:
                    raise ProviderError(
                        f"{self.name}: batch API {method} {path} answered {response.status}: "
                        f"{data[:300].decode(errors='replace')}",
                        retryable=response.status in (408, 409, 429) or response.status >= 500,
                        status=response.status,
                    )
                return data
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ProviderError(
                f"{self.name}: batch API {method} {path} failed: {exc or type(exc).__name__}",
                retryable=True,
            ) from None

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return orjson.loads(await self.call(method, path, **kwargs))


def jsonl(data: bytes) -> list[dict[str, Any]]:
    """The objects of a JSONL file; a line cut short (a partial file) is left out."""
    found = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


class OpenAIBatches:
    """``/files`` and ``/batches`` of an OpenAI-compatible server (base URL ending in /v1)."""

    def __init__(self, *, session: aiohttp.ClientSession, base_url: str, api_key: Secret | None,
                 name: str) -> None:  # fmt: skip
        headers = {} if api_key is None else {"Authorization": f"Bearer {api_key.reveal()}"}
        self._http = _Http(session=session, base_url=base_url, headers=headers, name=name)

    async def submit(self, tag: str, lines: Sequence[tuple[str, dict[str, Any]]]) -> str:
        text = b"".join(
            orjson.dumps({"custom_id": custom_id, "method": "POST",
                          "url": "/v1/chat/completions", "body": body}) + b"\n"
            for custom_id, body in lines
        )  # fmt: skip
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", text, filename=f"{tag}.jsonl", content_type="application/jsonl")
        uploaded = await self._http.json("POST", "files", data=form)
        created = await self._http.json("POST", "batches", json={
            "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions",
            "completion_window": COMPLETION_WINDOW, "metadata": {TAG_KEY: tag}})  # fmt: skip
        return str(created["id"])

    async def find(self, tag: str, since: float) -> str | None:
        after: str | None = None
        while True:
            params = {"limit": "100", **({"after": after} if after else {})}
            page = await self._http.json("GET", "batches", params=params)
            for batch in page.get("data") or []:
                if (batch.get("metadata") or {}).get(TAG_KEY) == tag:
                    return str(batch["id"])
                if float(batch.get("created_at") or 0) < since - 60:
                    return None  # newest first: older ones cannot be ours
            if not page.get("has_more") or not page.get("data"):
                return None
            after = page["data"][-1]["id"]

    async def poll(self, batch_id: str) -> Poll:
        batch = await self._http.json("GET", f"batches/{batch_id}")
        status = str(batch.get("status"))
        if status not in ("completed", "failed", "expired", "cancelled"):
            return Poll(status=status)
        results: dict[str, Outcome] = {}
        for field, _ok in (("output_file_id", True), ("error_file_id", False)):
            file_id = batch.get(field)
            if not file_id:
                continue
            for line in jsonl(await self._http.call("GET", f"files/{file_id}/content")):
                results[str(line.get("custom_id"))] = _openai_outcome(line)
        if status == "failed" and not results:
            errors = (batch.get("errors") or {}).get("data") or []
            said = "; ".join(str(e.get("message")) for e in errors) or "the batch failed"
            raise ProviderError(f"OpenAI batch {batch_id} failed: {said}", retryable=False)
        return Poll(status=status, ended=True, results=results, expired=status == "expired")

    async def cancel(self, batch_id: str) -> None:
        await self._http.json("POST", f"batches/{batch_id}/cancel")


def _openai_outcome(line: dict[str, Any]) -> Outcome:
    response = line.get("response") or {}
    error = line.get("error")
    status = int(response.get("status_code") or 0)
    if error or status >= 400 or not isinstance(response.get("body"), dict):
        body = response.get("body") or {}
        message = (error or {}).get("message") if isinstance(error, dict) else None
        message = message or (body.get("error") or {}).get("message") or f"status {status}"
        retryable = status in (0, 408, 409, 429) or status >= 500
        return Outcome(error=f"the batch answered this request with an error: {message}",
                       retryable=retryable)  # fmt: skip
    return Outcome(answer=response["body"])


class AnthropicBatches:
    """``/v1/messages/batches`` of Anthropic's API (base URL without /v1)."""

    def __init__(self, *, session: aiohttp.ClientSession, base_url: str, api_key: Secret | None,
                 name: str, version: str) -> None:  # fmt: skip
        headers = {"anthropic-version": version}
        if api_key is not None:
            headers["x-api-key"] = api_key.reveal()
        self._http = _Http(session=session, base_url=base_url, headers=headers, name=name)
        self._tags: dict[str, str] = {}

    async def submit(self, tag: str, lines: Sequence[tuple[str, dict[str, Any]]]) -> str:
        requests = [{"custom_id": custom_id, "params": body} for custom_id, body in lines]
        created = await self._http.json("POST", "v1/messages/batches", json={"requests": requests})
        return str(created["id"])

    async def find(self, tag: str, since: float) -> str | None:
        # Anthropic keeps no metadata: a batch is ours when its results' custom_ids carry
        # our tag, which only an ended batch shows; one still running is matched by its
        # time and size, then confirmed by its results (`poll` drops foreign custom_ids).
        page = await self._http.json("GET", "v1/messages/batches", params={"limit": "100"})
        for batch in page.get("data") or []:
            if batch.get("results_url") and batch.get("processing_status") == "ended":
                lines = jsonl(await self._http.call("GET", batch["results_url"]))
                if lines and all(str(x.get("custom_id", "")).startswith(tag) for x in lines):
                    return str(batch["id"])
        return None

    async def poll(self, batch_id: str) -> Poll:
        batch = await self._http.json("GET", f"v1/messages/batches/{batch_id}")
        status = str(batch.get("processing_status"))
        if status != "ended" or not batch.get("results_url"):
            return Poll(status=status)
        results: dict[str, Outcome] = {}
        expired = False
        for line in jsonl(await self._http.call("GET", batch["results_url"])):
            result = line.get("result") or {}
            kind = result.get("type")
            if kind == "succeeded" and isinstance(result.get("message"), dict):
                outcome = Outcome(answer=result["message"])
            elif kind == "expired":
                expired = True
                outcome = Outcome(error="the batch expired (24 h) before this request ran")
            elif kind == "canceled":
                outcome = Outcome(error="the batch was cancelled before this request ran")
            else:
                error = (result.get("error") or {}).get("error") or result.get("error") or {}
                message = error.get("message") if isinstance(error, dict) else str(error)
                outcome = Outcome(
                    error=f"the batch answered this request with an error: {message}",
                    retryable=(error.get("type") if isinstance(error, dict) else "")
                    in ("api_error", "overloaded_error", "rate_limit_error"),
                )
            results[str(line.get("custom_id"))] = outcome
        return Poll(status=status, ended=True, results=results, expired=expired)

    async def cancel(self, batch_id: str) -> None:
        await self._http.json("POST", f"v1/messages/batches/{batch_id}/cancel")
