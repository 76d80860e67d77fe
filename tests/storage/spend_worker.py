"""One process of a fleet making model calls under spend caps counted in PostgreSQL.

    python spend_worker.py CONFIG LEDGER_URL CALLS

Makes CALLS concurrent calls to alias ``main`` of the configuration; prints ``waiting``
when its first call waits on a cap, then one JSON line: how many calls ended well, how
many failed, and their cost.
"""

from __future__ import annotations

import asyncio
import json
import sys

from interlock.providers import (
    ModelConfig,
    ModelRequest,
    aclose_providers,
    build_provider,
    spend_guard,
)
from interlock.runtime.shared_limits import open_spend

PROMPT = "x" * (4000 - len("You are careful."))  # 1000 tokens by the estimate


async def main(config_path: str, ledger: str, calls: int) -> None:
    spend_guard.POLL_S = 0.2  # a person's raise is noticed sooner than in production
    spend_guard.use_spend_store(open_spend(ledger))
    config = ModelConfig.load([config_path])
    provider = build_provider(config.resolve("main"), config)
    told = False

    def progress(text: str) -> None:
        nonlocal told
        if text.strip().startswith("waiting: spend cap") and not told:
            told = True
            print("waiting", flush=True)

    async def one(n: int) -> float:
        request = ModelRequest(
            alias="main",
            model="gpt-test",
            system="You are careful.",
            prompt=PROMPT,
            timeout=30,
            idempotency_key=f"{n}",
        )
        return (await provider.complete(request, progress)).cost_usd

    results = await asyncio.gather(*(one(n) for n in range(calls)), return_exceptions=True)
    await aclose_providers()
    costs = [r for r in results if isinstance(r, float)]
    failed = [repr(r) for r in results if not isinstance(r, float)]
    print(json.dumps({"ok": len(costs), "failed": failed, "cost": sum(costs)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
