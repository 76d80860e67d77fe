"""Running `model:` workers: resolve the alias, assemble the prompt, call the provider.

The exact prompt of every attempt is kept in `prompts/<task>.<attempt>.md` of the run's
directory, so `interlock explain --prompts` can show what a model was sent (masked, with its
hash recorded, once the attempt ends: `runtime.records`).

`ModelRunner.run` is the one place where a provider's failure becomes a task's failure, for
the local dispatcher and for fleet workers alike: every message passes through `scrub` with
every key the configuration can reach before it leaves here for the ledger, status.json,
logs, the terminal or the API. A finished answer is judged here too (`verdict.judge`): an
empty, truncated or filtered one is a failed attempt, and the cost of every answered call
is part of the outcome, failed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from interlock.providers import (
    CallStopped,
    ModelConfig,
    ModelRequest,
    ModelResult,
    Provider,
    ProviderError,
    ResolvedModel,
    assemble_prompt,
    build_provider,
    check_context,
    estimate_tokens,
)
from interlock.providers.attachments import load_attachment, media_type
from interlock.providers.cli_env import secret_values
from interlock.providers.redaction import MaskedStream, Secret, mask_keys, redact_file, scrub
from interlock.providers.request import unsupported
from interlock.providers.schema_output import (
    NATIVE_KINDS,
    complete_with_schema,
    enforces_schema,
    schema_document,
    schema_instructions,
)
from interlock.providers.settings import recorded_settings
from interlock.providers.verdict import judge
from interlock.runtime.artifacts import write_record
from interlock.runtime.executors import Outcome, TaskSpec, keep_output, stopped_outcome
from interlock.runtime.tool_runs import complete_with_tools

ProgressCallback = Callable[[str], None]


@dataclass(frozen=True)
class Resolved:
    """What an alias stands for in this process."""

    provider: Provider
    model: ResolvedModel

    @property
    def offline_fallback(self) -> bool:
        """True when no configuration exists and the offline stand-in answers."""
        return self.model.offline_fallback


class ModelRunner:
    """Calls providers for model workers; shared by every task of the process.

    Configuration is read in the order of `providers.config_paths` (the workflow file's
    folder, the current directory up to the project root, the state directory, the user's
    file, plus environment variables), once per workflow directory.
    """

    def __init__(self, home: Path | None = None, config: ModelConfig | None = None) -> None:
        self.home = home
        self._fixed = config
        self._configs: dict[Path | None, ModelConfig] = {}
        # What each alias resolves to, per workflow directory: resolving builds prices and
        # settings anew (about 30 us), and the configuration it reads is loaded only once.
        self._models: dict[tuple[Path | None, str], ResolvedModel] = {}

    def config(self, workflow_dir: Path | None) -> ModelConfig:
        """The configuration that applies to workflows in `workflow_dir`."""
        if self._fixed is not None:
            return self._fixed
        if workflow_dir not in self._configs:
            self._configs[workflow_dir] = ModelConfig.for_workflow(workflow_dir, self.home)
        return self._configs[workflow_dir]

    def pin(self, workflow_dir: Path | None, config: ModelConfig) -> None:
        """Resolve the workflows of `workflow_dir` with `config` from now on in this process
        (a rerun reads the files its source run recorded: `rerun_config`)."""
        if self._fixed is not None:
            return
        self._configs[workflow_dir] = config
        self._models = {k: v for k, v in self._models.items() if k[0] != workflow_dir}

    def secrets(self, workflow_dir: Path | None) -> list[Secret]:
        """Every key the configuration of `workflow_dir` can reach (none when it cannot be
        read: text is then masked by the shapes of credentials alone)."""
        try:
            return self.config(workflow_dir).secrets()
        except Exception:
            return []

    def masked(self, spec: TaskSpec, outcome: Outcome) -> Outcome:
        """The outcome of a command or `call:` worker with every key this configuration
        reaches, and this process's own secrets (`redaction.protect`), masked in its error
        and in a command's logs (`logs/`). A command gets the variables its `env:` names (a
        key among them, maybe) and a `call:` function runs in this process: one that prints
        its environment or a request it made must not put a key in the ledger, status.json
        or the run's folder. Outputs are the worker's data and are left as they are."""
        secrets: list[Secret] | None = None
        if spec.worker.kind == "command":
            # The values of the secret-named variables under `env:` that it was given, too.
            given = secret_values(os.environ, spec.worker.env)
            secrets = [*self.secrets(spec.workflow_dir), *(Secret(v) for v in given)]
            base = spec.log_dir / f"{spec.task_id}.{spec.attempt}"
            for log in (Path(f"{base}.stdout"), Path(f"{base}.stderr")):
                with contextlib.suppress(OSError):  # no such log (stdout became the output)
                    redact_file(log, secrets)
        if outcome.ok or not outcome.error:
            return outcome  # a call that succeeded: nothing of it is text to mask
        if secrets is None:
            secrets = self.secrets(spec.workflow_dir)
        return replace(outcome, error=scrub(outcome.error, secrets))

    def resolve(self, alias: str, workflow_dir: Path | None = None) -> Resolved:
        """The provider and model behind `alias` (raises ConfigError subclasses)."""
        config = self.config(workflow_dir)
        model = self._models.get((workflow_dir, alias))
        if model is None:
            model = self._models[workflow_dir, alias] = config.resolve(alias)
        return Resolved(provider=build_provider(model, config), model=model)

    async def run(self, spec: TaskSpec, progress: ProgressCallback | None) -> Outcome:
        """One model call; the text goes to the temporary output only when complete.

        Cancelled once the server had begun answering, it returns a `stopped` outcome with
        what the call cost instead of raising; cancelled before, it raises."""
        alias = spec.model or spec.worker.model or ""
        try:
            resolved = self.resolve(alias, spec.workflow_dir)
        except Exception as exc:  # configuration problems fail the task with their message
            return self._failed(spec, ProviderError(str(exc), retryable=False))
        model = resolved.model.for_worker(spec.worker)
        if model.batch != resolved.model.batch:  # the worker's `batch` over the alias's
            try:
                provider = build_provider(model, self.config(spec.workflow_dir))
            except Exception as exc:
                return self._failed(spec, ProviderError(str(exc), retryable=False))
            resolved = Resolved(provider=provider, model=model)
        else:
            resolved = replace(resolved, model=model)
        refused = unsupported(resolved.model.kind, resolved.model.settings)
        if refused is not None:
            message = f"model {alias!r} ({resolved.model.provider}): {refused}"
            return self._failed(spec, ProviderError(message, retryable=False), alias)
        try:
            attachments = tuple(
                load_attachment(name, path, resolved.model.kind, alias)
                for name, path in spec.reads
                if media_type(name) is not None
            )
        except ProviderError as exc:
            return self._failed(spec, exc, alias, resolved.model)
        reads = [
            (name, path.read_text(encoding="utf-8", errors="replace"))
            for name, path in spec.reads
            if media_type(name) is None
        ]
        system, prompt = assemble_prompt(
            task=spec.task,
            topic=spec.topic,
            reads=reads,
            output_name=spec.worker.output_name,
            system=spec.worker.system,
        )
        if spec.item is not None:
            prompt += f"\n# Item\n\n{spec.item}\n"
        if attachments:
            listed = "\n".join(f"- {a.name} ({a.media_type})" for a in attachments)
            prompt += f"\n# Attached files\n\nAlso source material, attached:\n\n{listed}\n"
        model = resolved.model
        try:
            schema = worker_schema(spec)
        except ProviderError as exc:
            return self._failed(spec, exc, alias, model)
        native = schema is not None and model.kind in NATIVE_KINDS
        instructions = schema_instructions(schema) if schema is not None else ""
        # A server that may ignore the native field is told the schema in the prompt too.
        if schema is not None and not (native and enforces_schema(model.kind, model.base_url)):
            prompt += instructions
        header = f"<!-- model {alias} -> {model.provider}:{model.model} -->"
        recorded = recorded_settings(model.settings)
        if recorded:
            header += f"\n<!-- settings {json.dumps(recorded)} -->"
        record = f"{header}\n# System\n\n{system}\n\n# User\n\n{prompt}"
        prompt_file = spec.run_dir / "prompts" / f"{spec.task_id}.{spec.attempt}.md"
        write_record(prompt_file, record.encode())
        received: list[str] = []
        # A gateway may echo a key into the answer: what is streamed, kept and recorded
        # has every key this configuration reaches masked.
        keys = self._answer_keys(spec, model)
        shown = MaskedStream(keys)

        def relay(text: str) -> None:
            received.append(text)
            if progress is not None:
                masked = shown.feed(text)
                if masked:
                    progress(masked)

        try:
            check_context(
                system=system,
                prompt=prompt,
                reads=reads,
                context_tokens=model.context_tokens,
                max_output_tokens=model.max_output_tokens,
                alias=alias,
            )
            request = ModelRequest(
                alias=alias,
                model=model.model,
                system=system,
                prompt=prompt,
                timeout=call_timeout(model, spec.worker.timeout),
                idempotency_key=spec.idempotency_key,
                max_output_tokens=model.max_output_tokens,
                settings=model.settings,
                response_schema=schema if native else None,
                schema_name=re.sub(r"[^A-Za-z0-9_-]", "_", spec.worker.role)[:64],
                attachments=attachments,
                pipeline=spec.pipeline,
                run_id=spec.run_id,
                task_id=spec.task_id,
            )
            warnings: list[str] = []

            async def complete(request: ModelRequest) -> ModelResult:
                result, said = await complete_with_schema(
                    resolved.provider, request, relay, instructions=instructions
                )
                warnings.extend(w for w in said if w not in warnings)
                return result

            transcript = spec.run_dir / "prompts" / f"{spec.task_id}.{spec.attempt}.tools.md"
            if spec.worker.tools:
                try:
                    result = await complete_with_tools(
                        complete,
                        request,
                        spec.worker,
                        kind=model.kind,
                        transcript=transcript,
                        cwd=spec.workflow_dir,
                        journal=spec.run_dir / "journal" / f"{spec.task_id}.jsonl",
                        warn=warnings.append,
                        mask=lambda text: mask_keys(text, keys),
                        decisions=spec.tool_decisions,
                    )
                finally:
                    with contextlib.suppress(OSError):  # no transcript yet
                        await asyncio.to_thread(redact_file, transcript, keys)
            else:
                result = await complete(request)
            if progress is not None:
                rest = shown.flush()
                if rest:
                    progress(rest)
        except CallStopped as stopped:
            # Stopped while the server was answering (the run ended): that much was spent.
            return stopped_outcome(usage_of(stopped.answered, alias, model))
        except asyncio.CancelledError:
            if not received:
                raise
            # A provider that does not say what arrived: count the text it streamed.
            answered = estimated_result(model, system, prompt, "".join(received))
            return stopped_outcome(usage_of(answered, alias, model))
        except ProviderError as exc:
            return self._failed(spec, exc, alias, model)
        except Exception as exc:  # a library's own error: a failed attempt, never a crash
            detail = f"{model.provider}: {type(exc).__name__}: {exc}"
            return self._failed(spec, ProviderError(detail, retryable=True), alias, model)
        problem = judge(result, accept_truncated=spec.worker.accept_truncated)
        if problem is not None:
            return self._failed(spec, problem, alias, model)
        try:
            text = result.text if schema is None else schema_document(result, schema)
        except ProviderError as exc:
            return self._failed(spec, exc, alias, model)
        kept = keep_output(spec.output, mask_keys(text, keys), durable=False)
        usage = usage_of(result, alias, model)
        return replace(kept, usage={**usage, "warnings": warnings} if warnings else usage)

    def _answer_keys(self, spec: TaskSpec, model: ResolvedModel) -> list[Secret]:
        """The keys masked in an answer: every key of the configuration, and the values of
        the model's configured headers (a gateway's key often travels in one)."""
        keys = self.secrets(spec.workflow_dir)
        headers = model.settings.headers or {}
        return keys + [Secret(v) for v in headers.values() if len(v) >= 8]

    def _failed(
        self,
        spec: TaskSpec,
        failure: ProviderError,
        alias: str = "",
        model: ResolvedModel | None = None,
    ) -> Outcome:
        """The outcome of a failed call: its message with every key masked, its wait and,
        when the server answered, its cost."""
        try:
            secrets: list[Secret] = self.config(spec.workflow_dir).secrets()
        except Exception:  # an unreadable configuration: mask by shape alone
            secrets = []
        if model is not None and model.settings.headers:
            # A gateway's key often travels in a configured header: mask those values too.
            secrets += [Secret(v) for v in model.settings.headers.values() if len(v) >= 8]
        answered = failure.answered
        # A tool call that waits for a person ends the attempt without failing the task.
        approval = getattr(failure, "approval", None)
        return Outcome(
            ok=False,
            error=scrub(str(failure), secrets),
            retryable=failure.retryable,
            retry_after=failure.retry_after,
            usage=None if answered is None else usage_of(answered, alias, model),
            extra={"approval": approval} if approval is not None else {},
        )


def unpriced(model: ResolvedModel) -> bool:
    """True when nothing prices this model's calls (neither interlock.toml nor the price
    table): they count $0. The offline stand-in costs nothing for real."""
    return not model.price_source and model.kind != "offline"


def worker_schema(spec: TaskSpec) -> dict[str, Any] | None:
    """The worker's JSON Schema; a path (a pipeline built in code) is read from the workflow
    file's directory."""
    schema = spec.worker.output_schema
    if not isinstance(schema, str):
        return schema
    path = (spec.workflow_dir or Path.cwd()) / schema
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProviderError(f"schema: cannot read {path}: {exc}", retryable=False) from None
    if not isinstance(loaded, dict):
        raise ProviderError(f"schema {path} is not a JSON object", retryable=False)
    return loaded


def estimated_result(model: ResolvedModel, system: str, prompt: str, received: str) -> ModelResult:
    """What a call stopped part-way cost at least: the prompt and the text received."""
    input_tokens = estimate_tokens(system) + estimate_tokens(prompt)
    output_tokens = estimate_tokens(received)
    return ModelResult(
        text=received,
        provider=model.provider,
        model=model.model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_s=0.0,
        cost_usd=model.cost_usd(input_tokens, output_tokens),
        finish_reason="stopped",
        extra={"usage": "estimated"},
    )


def call_timeout(model: ResolvedModel, worker_timeout: float) -> float:
    """Seconds one call may take: the model's own `timeout`, never past the worker's (the
    engine's deadline for the attempt), so a fallback model gets its own limit."""
    own = model.settings.timeout
    return worker_timeout if own is None else min(own, worker_timeout)


def usage_of(result: ModelResult, alias: str, model: ResolvedModel | None = None) -> dict[str, Any]:
    """What the ledger records of a call: who answered, the tokens and what they cost, and
    the request settings it was sent with (header names only)."""
    settings = recorded_settings(model.settings) if model is not None else {}
    return {
        **({"settings": settings} if settings else {}),
        "model": result.model,
        "provider": result.provider,
        "alias": alias,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "latency_s": round(result.latency_s, 4),
        "cost_usd": result.cost_usd,
        "finish_reason": result.finish_reason,
        # Parts of the totals priced apart, recorded when reported (older records lack them).
        **{
            name: count
            for name, count in (
                ("cache_read_tokens", result.cache_read_tokens),
                ("cache_write_tokens", result.cache_write_tokens),
                ("reasoning_tokens", result.reasoning_tokens),
            )
            if count
        },
        **({"estimated": True} if result.extra.get("usage") == "estimated" else {}),
        # No price is known for this model: the call counts $0 in costs and budgets.
        **({"unpriced": True} if model is not None and unpriced(model) else {}),
        # A tool loop's model calls and tool calls, whose spend the figures above add up,
        # and each of them with its times (the trace's spans of the loop).
        **{
            name: int(result.extra[name])
            for name in ("turns", "tool_calls")
            if name in result.extra
        },
        **({"steps": json.loads(result.extra["steps"])} if "steps" in result.extra else {}),
    }
