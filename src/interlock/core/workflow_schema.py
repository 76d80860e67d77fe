"""The JSON Schema of a workflow file, for editors and other tools.

Generated from the models of `interlock.core.workflow`, then completed with what the models
check in code: the short forms they accept (`for_each: role.list`, `inputs: {n: 5}`,
`ttl: 7d`), name patterns, and "exactly one of" rules. Cross-place rules (reads, transitions,
loops) stay with `interlock check`. Pure: no I/O.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from interlock.core.workflow import SAFE_NAME, WorkflowFile

SCHEMA_FILE = "workflow.schema.json"
"""The name `interlock init` gives the copy it writes beside a workflow file."""

DIALECT = "http://json-schema.org/draft-07/schema#"  # the dialect editors support best

# Field descriptions shown by editors on hover, keyed by model and key as written in a file.
DESCRIPTIONS: dict[str, dict[str, str]] = {
    "Pipeline": {
        "description": "What the pipeline does, shown by 'interlock pipelines' and 'init --list'.",
        "inputs": "Declared parameters: name -> {default, required, description}, or name -> "
        "default value. Give them with '--input name=value'.",
        "phases": "The phases, run in file order unless a phase's 'next' rules say otherwise.",
        "budget": "Limits on what one run may spend (cost in USD, tokens).",
        "schedule": "Start a run on a schedule (a cron expression) while the server runs.",
        "concurrency": "At most this many runs of this pipeline at once, or "
        "{key: CEL over topic and inputs, limit: N}: at most N runs at once per key value.",
        "cache": "Reuse completed tasks of earlier runs with the same fingerprint: true, "
        "false, or {ttl: 7d}. Workers may say otherwise.",
        "env": "Names of environment variables every command worker gets, beside those its "
        "own 'env' names.",
        "max_rejections": "How many times a person may send a run back at a review "
        "('interlock reject').",
        "metrics": "What a delivered run scores: name -> CEL over extracted values, e.g. "
        "score: reviewer.score or passed: verdict.passed ('interlock compare' reads them).",
    },
    "ConcurrencyKey": {
        "key": "A CEL expression, e.g. inputs.customer: over topic and inputs for a "
        "pipeline; a worker's may also read item (its fan-out item) and model.",
        "limit": "At most this many runs (a pipeline's) or task attempts (a worker's) at once "
        "per value of the key, across every orchestrator of the store.",
    },
    "InputSpec": {
        "default": "The value used when the run does not give one.",
        "type": "What a given value must be: text, integer, number or boolean; a value given "
        "as text (--input n=4) is converted. Without it, the default's kind.",
        "required": "A run must give this input (unless it has a default).",
        "description": "What the input is for, shown by 'interlock pipelines'.",
    },
    "Budget": {
        "max_cost_usd": "Most a run may cost, in US dollars.",
        "max_tokens": "Most tokens (input and output) a run may use.",
        "on_exceed": "What reaching a limit does: fail the run, or pause it for a person.",
    },
    "Phase": {
        "id": "The phase's name: letters, digits, '.', '_' and '-'.",
        "mode": "parallel: all workers at once; sequential: one after another, in order.",
        "workers": "The workers of this phase (at least one).",
        "pause_after": "Wait for 'interlock approve' after this phase.",
        "next": "Transitions checked in order: the first whose 'if' holds is taken; "
        "without any, the next phase in the file.",
        "for_each": "Fan-out: run the workers once per item of a list an earlier worker "
        "extracted ('<role>.<value>', or a mapping with items, concurrency, max_items).",
        "wait_for": "Wait for a signal from outside the run ('interlock signal', the HTTP API "
        "or a webhook) before the phase starts or after it ends.",
        "delay": "Wait this long before the phase starts: seconds, or 30s, 5m, 2h, 1d.",
        "not_before": "A CEL expression giving the earliest start (a timestamp, RFC 3339 text "
        "or epoch seconds), e.g. inputs.publish_at.",
    },
    "WaitFor": {
        "signal": "The signal's name; conditions and task templates read its data as signals.NAME.",
        "timeout": "How long to wait: seconds, or 30s, 5m, 2h, 1d; when it passes, the phase's "
        "next rules decide with signals.NAME == null (a phase waiting to start does not run). "
        "Unset: as long as it takes.",
        "schema": "The JSON Schema the signal's data must match (checked when it is sent).",
        "when": "before: the phase starts once the signal arrives; after: the phase's next "
        "rules wait for it.",
    },
    "Rule": {
        "if": "A CEL condition over extracted values and inputs; without it, always.",
        "goto": "The id of the phase to go to.",
        "max_visits": "Take this rule at most this many times (bounds a loop).",
    },
    "ForEach": {
        "items": "'<role>.<value>': a list extracted from an earlier worker's output.",
        "concurrency": "At most this many items at once.",
        "max_items": "Fail the phase if the list is longer than this.",
        "tolerate": "How many items may fail for good (retries spent) while the run goes on: "
        "a count (5) or a percentage of the items ('2%', rounded down). Past it the run fails.",
    },
    "Worker": {
        "role": "The worker's name, unique in the pipeline; its output is '<role>.md'.",
        "task": "The instructions (a template: {{ topic }}, {{ inputs }}, extracted values).",
        "timeout": "Seconds an attempt may take, counted from its start.",
        "grace": "Seconds past the timeout before the engine gives up on the attempt.",
        "start_timeout": "Seconds (or 30m, 2h, 1d) a dispatched attempt may wait to start "
        "(for a free slot or worker) before it is timed out and retried; default 1 day.",
        "reads": "Output files of earlier workers this worker is given.",
        "final": "This worker's output is the run's result (final.md).",
        "output": "The file this worker writes, instead of '<role>.md'.",
        "model": "Run a model: an alias configured in interlock.toml.",
        "command": "Run a command: an argv list, e.g. ['python', 'x.py', '{output}'].",
        "call": "Run a Python function: 'package.module:function' or a registered name.",
        "env": "Names of environment variables a command gets beyond PATH, HOME, the locale, "
        "proxies, CA bundles and its INTERLOCK_* variables (it gets no others).",
        "system": "The system prompt of a model worker.",
        "retries": "Attempts again after a failure (each after the backoff delay).",
        "backoff": "The delay between attempts.",
        "fallback_models": "Model aliases tried in order once the model's retries are spent.",
        "accept_truncated": "Keep an answer cut off at the model's output limit instead of "
        "failing the attempt.",
        "extract": "Named values pulled out of the output (a JSON field or a regex group), "
        "for conditions and fan-out.",
        "max_task_size": "Characters the rendered task (and each value its templates build) "
        "may have; default 1,000,000.",
        "tags": "Labels for filtering and fleet routing.",
        "cache": "Reuse this worker's completed task from earlier runs: true, false or "
        "{ttl: 7d}; unset: as the pipeline says.",
        "params": "Request settings over those of the model's alias in interlock.toml.",
        "batch": "true: send its model calls through the provider's batch API (OpenAI, "
        "Anthropic) at the batch price; false: one by one; unset: as the alias says.",
        "batch_window": "With batch: true, seconds (or 30s, 10m, 2h) calls are gathered "
        "into one batch (default: the alias's, else 10m).",
        "batch_max": "With batch: true, a batch is sent once it holds this many calls "
        "(default: the alias's, else 1000).",
        "schema": "The JSON Schema the model's answer must match (an object, or the path of "
        "a .json file); its top-level properties become extracted values.",
        "tools": "MCP servers whose tools the model may call: {mcp: [command, args...]} or "
        "{url: http://host/mcp}.",
        "max_turns": "Most model calls of the tool loop in one attempt (default 10).",
        "accept_max_turns": "Keep the last answer when the model still asks for tools at "
        "max_turns, instead of failing the attempt.",
        "pipeline": "Run another pipeline as a child run: a name in this file, or "
        "'other.yaml#name'; its final.md is this worker's output.",
        "inputs": "The child run's inputs (templates, like 'task'); 'task' is its topic.",
        "concurrency": "{key: CEL over topic, inputs, item and model, limit: N}: at most N "
        "attempts of this worker's tasks at once per key value, across all runs; the others "
        "wait for a slot before they are dispatched.",
    },
    "ToolServer": {
        "mcp": "Start this command (an argv list) and speak MCP over its stdin and stdout.",
        "url": "A streamable HTTP MCP server's endpoint.",
        "timeout": "Seconds one tool call may take before the attempt fails (default 60).",
        "env": "Names of environment variables passed to a server started with 'mcp' (it "
        "gets PATH, HOME, the locale and proxies, and no others).",
        "allow": "Offer the model only these tools of the server (its names); a name the "
        "server does not offer fails the attempt, saying which it offers.",
        "deny": "Never offer the model these tools of the server.",
        "max_calls": "Calls of this server's tools in one attempt; past it, a call is answered "
        "with an error the model can act on.",
        "timeouts": "{tool: seconds}: how long one call of that tool may take, instead of "
        "'timeout'.",
        "approve": "Tools of the server (its names) whose every call waits for a person: the "
        "run pauses showing the call; 'interlock approve --call' runs it, 'interlock reject "
        "--call' answers the model with a refusal.",
    },
    "Backoff": {
        "initial": "Seconds before the first retry.",
        "max": "Longest delay in seconds.",
        "multiplier": "Each delay is this many times the one before.",
        "jitter": "Random spread, as a fraction of the delay.",
    },
    "Extract": {
        "json": "A field path in the output's JSON, e.g. 'verdict' or 'scores.0'.",
        "regex": "A regular expression; the value is its capture group (or whole match).",
        "type": "The value's type.",
        "required": "Fail the attempt when the value is missing.",
    },
    "Cache": {
        "ttl": "Oldest reusable task: seconds, or a duration like 30m, 12h, 7d; unset: any age.",
    },
    "RequestSettings": {
        "temperature": "Sampling temperature.",
        "top_p": "Nucleus sampling.",
        "seed": "Sampling seed, where the provider supports one.",
        "stop": "Stop sequences (one string or a list).",
        "max_output_tokens": "Most tokens of the answer.",
        "reasoning_effort": "Reasoning effort of OpenAI reasoning models.",
        "thinking_budget": "Tokens for Anthropic extended thinking.",
        "timeout": "Seconds one call may take, within the worker's timeout.",
        "stream": "false: ask for one JSON answer instead of an event stream.",
        "cache_prompt": "Anthropic: mark the system prompt and input files as cacheable.",
        "extra_body": "Merged into the request body last.",
        "headers": "Sent with every request; values are never recorded.",
    },
}

_NAME = {"type": "string", "pattern": SAFE_NAME.pattern, "not": {"pattern": r"\.\."}}
_DURATION = {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*[smhdw]?\s*$"}
_CALL = r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$"
_ITEMS = r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.[A-Za-z_]\w*$"


def _one_of(*keys_and_types: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Exactly one of these keys is given (a null counts as not given)."""
    return [{"required": [key], "properties": {key: kind}} for key, kind in keys_and_types]


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """The non-null members of an `anyOf`."""
    kinds = [k for k in prop.get("anyOf", [prop]) if k != {"type": "null"}]
    return kinds[0] if len(kinds) == 1 else {"anyOf": kinds}


def workflow_schema() -> dict[str, Any]:
    """The JSON Schema (draft 7) a workflow file (YAML or JSON) must match."""
    schema = copy.deepcopy(WorkflowFile.model_json_schema(by_alias=True))
    defs: dict[str, Any] = schema.pop("$defs")
    for model, fields in DESCRIPTIONS.items():
        props = defs[model]["properties"]
        for key, text in fields.items():
            props[key].setdefault("description", text)
        for prop in props.values():
            prop.pop("title", None)  # "Pause After": the key itself says it better
    worker = defs["Worker"]["properties"]
    worker["role"].update(_NAME)
    worker["output"] = {"anyOf": [_NAME, {"type": "null"}], **_meta(worker["output"])}
    worker["call"]["anyOf"][0]["pattern"] = _CALL
    worker["command"]["anyOf"][0].update(minItems=1, items={"type": "string", "minLength": 1})
    worker["schema"]["anyOf"][1]["pattern"] = r"\.json$"
    worker["extract"]["propertyNames"] = {"pattern": r"^[A-Za-z_]\w{0,63}$"}
    # Filled in by the loader from `pipeline`, never written by hand.
    worker.pop("pipeline_definition")
    defs["Worker"]["oneOf"] = _one_of(
        *((key, _not_null(worker[key])) for key in ("model", "command", "call", "pipeline"))
    )
    extract = defs["Extract"]["properties"]
    defs["Extract"]["oneOf"] = _one_of(
        ("json", _not_null(extract["json"])), ("regex", _not_null(extract["regex"]))
    )
    defs["Phase"]["properties"]["id"].update(_NAME)
    for_each = defs["Phase"]["properties"]["for_each"]
    for_each["anyOf"].insert(1, {"type": "string", "pattern": _ITEMS})
    defs["ForEach"]["properties"]["items"]["pattern"] = _ITEMS
    defs["ForEach"]["properties"]["tolerate"] = {
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": r"^\s*(\d+|\d+(\.\d+)?\s*%)\s*$"},
            {"type": "null"},
        ],
        **_meta(defs["ForEach"]["properties"]["tolerate"]),
    }
    ttl = defs["Cache"]["properties"]["ttl"]
    ttl["anyOf"].insert(1, _DURATION)
    defs["Phase"]["properties"]["delay"]["anyOf"].insert(1, _DURATION)
    worker["start_timeout"]["anyOf"].insert(1, _DURATION)
    worker["batch_window"]["anyOf"].insert(1, _DURATION)
    defs["WaitFor"]["properties"]["timeout"]["anyOf"].insert(1, _DURATION)
    defs["WaitFor"]["properties"]["signal"]["pattern"] = r"^[A-Za-z_]\w{0,63}$"
    inputs = defs["Pipeline"]["properties"]["inputs"]
    scalar = {"type": ["string", "number", "boolean", "null"]}
    inputs["additionalProperties"] = {"anyOf": [inputs["additionalProperties"], scalar]}
    stop = defs["RequestSettings"]["properties"]["stop"]
    stop["anyOf"].insert(1, {"type": "string"})
    _python_names(defs)
    return {
        "$schema": DIALECT,
        "title": "interlock workflow file",
        "description": "Pipeline name -> pipeline. 'interlock check FILE' checks what a schema "
        "cannot: reads, transitions, loops and models.",
        "type": "object",
        "minProperties": 1,
        "properties": {
            "$language": {
                "const": 1,
                "description": "The workflow language the file is written for (1 today); "
                "without it, interlock assumes the one it reads and 'check' says so.",
            },
            "$schema": {"type": "string", "description": "For editors; interlock ignores it."},
        },
        # A pipeline name: not blank, and not starting with '$' (the file's own keys).
        "propertyNames": {
            "anyOf": [
                {"enum": ["$language", "$schema"]},
                {"allOf": [{"pattern": r"\S"}, {"pattern": r"^[^$]"}]},
            ]
        },
        "additionalProperties": schema["additionalProperties"],
        "$defs": dict(sorted(defs.items())),
    }


# Keys whose Python name the loader also accepts: valid, but not offered for completion.
_PYTHON_NAMES = {
    "Rule": ("if", "if_"),
    "Extract": ("json", "json_path"),
    "Worker": ("schema", "output_schema"),
    "WaitFor": ("schema", "data_schema"),
}


def _python_names(defs: dict[str, Any]) -> None:
    """Accept `if_`, `json_path`, `output_schema` and `data_schema` as the loader does (one
    spelling at a time)."""
    for model, (key, name) in _PYTHON_NAMES.items():
        props = defs[model]["properties"]
        props[name] = {
            **props[key],
            "description": f"Another spelling of '{key}'.",
            "doNotSuggest": True,  # yaml-language-server: valid, not offered
        }
        defs[model]["not"] = {"required": [key, name]}
    # `oneOf` must see `json_path` as the `json` source too.
    defs["Extract"]["oneOf"][0] = {
        "anyOf": [
            {"required": [k], "properties": {k: {"type": "string"}}} for k in ("json", "json_path")
        ]
    }


def _meta(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's annotations (default, description), without its type."""
    return {k: v for k, v in prop.items() if k in ("default", "description")}


def schema_text() -> str:
    """The schema as the committed file holds it: indented, keys in file order."""
    return json.dumps(workflow_schema(), indent=2, ensure_ascii=False) + "\n"
