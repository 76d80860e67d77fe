"""The worst case of a whole batch: what `check --cost` computes, once per row, with each
row's own topic and inputs, summed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interlock.core.batches import RowInputs
    from interlock.core.loader import Definition
    from interlock.core.quote import Quote


@dataclass(frozen=True, kw_only=True)
class BatchQuote:
    """The most a batch can spend (None: no bound), and its dearest row's own quote."""

    usd: float | None
    tokens: int | None
    dearest: Quote | None
    dearest_row: int | None
    complete: bool  # False: exploring stopped early, so this is not a bound

    def summary(self, rows: int) -> str:
        """The quote in one line."""
        usd = "cost: no bound" if self.usd is None else f"at most ${self.usd:,.4f}"
        tokens = "tokens: no bound" if self.tokens is None else f"{self.tokens:,} tokens"
        line = f"worst case of the batch ({rows} row(s)): {usd} and {tokens}"
        if self.dearest is not None and self.dearest.usd and self.dearest_row is not None:
            line += f"; the dearest row is row {self.dearest_row} (${self.dearest.usd:,.4f})"
        if not self.complete:
            line += " (not a bound: exploring stopped early)"
        return line


def batch_quote(file: str, definition: Definition, rows: list[RowInputs], home: Path) -> BatchQuote:
    """Each row's worst case (explored once; rows of the same text sizes quoted once)."""
    from interlock.errors import UsageError
    from interlock.providers import ModelConfig
    from interlock.runtime.budget_reserve import row_quotes

    try:
        config = ModelConfig.for_workflow(Path(file).parent, home)
    except Exception as exc:  # an invalid interlock.toml: its message names the file
        raise UsageError(str(exc)) from None
    quotes = row_quotes(definition, config, rows)
    usd: float | None = 0.0
    tokens: int | None = 0
    dearest: tuple[float, int, Quote] | None = None
    for row in rows:
        quote = quotes[row.number]
        usd = None if usd is None or quote.usd is None else usd + quote.usd
        tokens = None if tokens is None or quote.tokens is None else tokens + quote.tokens
        if dearest is None or (quote.usd or 0.0) > dearest[0]:
            dearest = (quote.usd or 0.0, row.number, quote)
    return BatchQuote(
        usd=usd,
        tokens=tokens,
        dearest=dearest[2] if dearest else None,
        dearest_row=dearest[1] if dearest else None,
        complete=all(q.complete for q in quotes.values()),
    )
