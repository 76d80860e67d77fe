"""Structured output: a worker's answer checked against its `schema:`.

The schema is sent as the provider's native structured output (see `request.py`); whatever
comes back is still validated here with `jsonschema`, since compatible servers may ignore
the request. An answer that does not match is a failed attempt that says which field is
wrong; its cost was spent and is recorded.

Only OpenAI's and Anthropic's own APIs are known to enforce the schema. Every other server
(a local llama.cpp, vLLM or Ollama, a gateway such as LiteLLM) may drop the field without a
word, so the prompt states the schema too. A server that fails on the field instead (a 400 or
422 naming it, or an internal error, HTTP 500, which is what llama-cpp-python answers to a
schema it cannot compile) is asked once more without it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from interlock.providers.base import (
    ModelRequest,
    ModelResult,
    Provider,
    ProviderError,
    TokenCallback,
)

logger = logging.getLogger("interlock.providers")

# Words of the 400 a server answers when it does not know structured output requests.
_REJECTED = re.compile(
    r"response_format|json_schema|output_config|output_format|structured output", re.IGNORECASE
)
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


# Hosts of the APIs that enforce a schema sent natively.
_ENFORCING_HOSTS = frozenset({"api.openai.com", "api.anthropic.com"})


def rejects_structured_output(failure: ProviderError) -> bool:
    """Whether `failure`, answered to a request carrying a native schema, is the server
    failing on that part of the request: a 400 or 422 naming it, or an internal error (500),
    which the same request without the schema may not meet."""
    if failure.status == 500:
        return True
    return failure.status in (400, 422) and bool(_REJECTED.search(str(failure)))


def enforces_schema(kind: str, base_url: str | None) -> bool:
    """Whether a native schema sent to this provider is known to be enforced: only OpenAI's
    and Anthropic's own APIs (and the offline stand-in) promise it; compatible servers and
    gateways may ignore the field, so the prompt must state the schema as well."""
    if kind == "offline":
        return True
    host = (urlsplit(base_url or "").hostname or "").lower()
    return kind in ("openai", "anthropic") and host in _ENFORCING_HOSTS


def schema_instructions(schema: dict[str, Any]) -> str:
    """What the prompt says when the schema cannot be sent natively."""
    return (
        "\n# Answer format\n\nAnswer with one JSON document, and nothing else, that matches "
        f"this JSON Schema:\n\n```json\n{json.dumps(schema, indent=2)}\n```\n"
    )


def schema_document(result: ModelResult, schema: dict[str, Any]) -> str:
    """The answer as the JSON document the worker writes (pretty-printed).

    Raises:
        ProviderError: Retryable, carrying `result`: the answer is not JSON, or a field
            does not match the schema (the message names the field and why).
    """
    text = result.text.strip()
    fenced = _FENCE.match(text)  # a prompt-instructed model may fence its JSON
    if fenced:
        text = fenced.group(1).strip()
    where = f"{result.provider}: model {result.model!r}"
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ProviderError(
            f"{where} answered text that is not JSON ({exc}), but the worker's schema "
            "asks for a JSON document; the answer was discarded",
            retryable=True,
            answered=result,
        ) from None
    # Imported here: only a worker with a schema needs jsonschema (35 ms to import).
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    from interlock.core.schemas import local_validator

    try:
        error = best_match(local_validator(schema).iter_errors(document))
    except Unresolvable as exc:  # a definition read before references were checked
        raise ProviderError(
            f"{where}: the worker's schema refers to {exc.ref!r}, which is not inside it; "
            "nothing is retrieved at run time: copy the definition under '$defs' of the "
            "schema and refer to it as '#/$defs/NAME'",
            retryable=False,
            answered=result,
        ) from None
    if error is not None:
        field = error.json_path if error.json_path != "$" else "the document"
        raise ProviderError(
            f"{where} answered JSON that does not match the worker's schema: at {field}: "
            f"{error.message}; the answer was discarded",
            retryable=True,
            answered=result,
        )
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


NATIVE_KINDS = frozenset({"openai", "anthropic", "offline"})
"""Provider kinds whose requests carry a schema (the offline stand-in answers in its shape);
an agent command gets it in the prompt."""


async def complete_with_schema(
    provider: Provider,
    request: ModelRequest,
    on_token: TokenCallback | None,
    *,
    instructions: str,
) -> tuple[ModelResult, list[str]]:
    """Call `provider`; when it fails on the native structured output, call it once more
    with the schema in the prompt only (`instructions`) and say so in the warnings."""
    try:
        return await provider.complete(request, on_token), []
    except ProviderError as failure:
        if request.response_schema is None or not rejects_structured_output(failure):
            raise
        status = failure.status
    warning = (
        f"{provider.name} refused the native structured output request for model "
        f"{request.alias!r} (HTTP {status}); the schema was sent in the prompt and the answer "
        "validated here"
    )
    logger.warning("%s", warning)
    prompt = request.prompt if instructions in request.prompt else request.prompt + instructions
    fallback = replace(request, response_schema=None, prompt=prompt)
    return await provider.complete(fallback, on_token), [warning]
