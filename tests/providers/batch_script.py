"""Sends N batch-mode calls through interlock's providers and prints their answers and cost
as JSON: started by the crash tests, which kill it at a named crash point and start it again.

Usage: batch_script.py CONFIG LEDGER N ALIAS
"""

from __future__ import annotations

import asyncio
import json
import sys

from interlock.providers.base import ModelRequest
from interlock.providers.batch_store import use_batch_store
from interlock.providers.config import ModelConfig
from interlock.providers.factory import ProviderRegistry
from interlock.storage.provider_batches_sqlite import SQLiteBatches


async def main(config_path: str, ledger: str, n: int, alias: str) -> None:
    use_batch_store(SQLiteBatches(ledger))
    config = ModelConfig.load([config_path], env={"TEST_KEY": "k"})
    resolved = config.resolve(alias)
    registry = ProviderRegistry()
    provider = registry.build(resolved, config)
    requests = [
        ModelRequest(
            alias=alias,
            model=resolved.model,
            system="",
            prompt=f"row {i}",
            timeout=30.0,
            idempotency_key=f"key{i:04d}",
            run_id="run-1",
            task_id=f"t{i}",
        )
        for i in range(n)
    ]
    results = await asyncio.gather(*(provider.complete(r) for r in requests))
    await registry.aclose()
    print(json.dumps({"texts": [r.text for r in results],
                      "cost": sum(r.cost_usd for r in results)}))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
