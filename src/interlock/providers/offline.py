"""The offline provider: a deterministic stand-in that needs no network and no key.

Its documents are clearly labelled as generated offline so nobody mistakes them for model
output. It is used only when no real provider is configured for an alias, and the run
records a warning when it is.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from interlock.providers.base import ModelRequest, ModelResult, TokenCallback

LABEL = "[interlock offline provider: deterministic placeholder text, no model was called]"


class OfflineProvider:
    """Writes a deterministic document derived from the prompt."""

    name = "offline"

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        started = time.perf_counter()
        text = render_offline(request)
        if request.response_schema is not None:
            # A document of the asked shape, so pipelines with a schema run offline too.
            text = json.dumps(placeholder(request.response_schema, LABEL), indent=2) + "\n"
        if on_token is not None:
            for line in text.splitlines(keepends=True):
                on_token(line)
        words_in = len(request.system.split()) + len(request.prompt.split())
        return ModelResult(
            text=text,
            provider=self.name,
            model=request.model,
            input_tokens=words_in,
            output_tokens=len(text.split()),
            latency_s=time.perf_counter() - started,
            cost_usd=0.0,
            finish_reason="stop",
        )


def render_offline(request: ModelRequest) -> str:
    """The document the offline provider returns for `request` (pure, deterministic).

    It echoes what the model was asked (the task and the start of each input) so pipelines
    downstream have realistic text to work on, framed so it cannot pass for model output.
    """
    digest = hashlib.sha256(f"{request.system}\n{request.prompt}".encode()).hexdigest()[:12]
    body = request.prompt.split("\n# Output", 1)[0].strip()
    excerpt = body if len(body) <= 4000 else body[:4000] + "\n[...]"
    return (
        f"{LABEL}\n\n"
        f"Alias {request.alias!r}, prompt digest {digest}, {len(request.prompt)} characters.\n\n"
        f"{excerpt}\n\n"
        "(end of offline document)\n"
    )


def placeholder(schema: Any, label: str) -> Any:
    """A simple value of the shape `schema` asks for (first enum or const, then by type)."""
    if not isinstance(schema, dict):
        return label
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return placeholder(schema[key][0], label)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: placeholder(spec, label) for name, spec in properties.items()}
    if kind == "array":
        return [placeholder(schema.get("items"), label)] * int(schema.get("minItems", 0))
    simple = {"integer": 0, "number": 0, "boolean": False, "null": None}
    return simple.get(kind, label) if isinstance(kind, str) else label
