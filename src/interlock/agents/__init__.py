"""Adapters that run agents written with other frameworks as interlock `call:` workers.

Each adapter routes the framework's model calls through `ctx.model`
(`interlock.runtime.model_calls`): every call is made by interlock's providers, priced,
journaled and counted in the attempt's usage, and a retry or resume of the attempt gets
the answers its earlier tries were paid for back from the journal.

- `interlock.agents.pydantic_ai`: `InterlockModel`, a Pydantic AI `Model`
  (``pip install 'interlock[pydantic-ai]'``).
- `interlock.agents.openai_agents`: `InterlockModelProvider`, an OpenAI Agents SDK
  `ModelProvider` (``pip install 'interlock[openai-agents]'``).

Neither is imported here: each needs its framework installed.
"""
