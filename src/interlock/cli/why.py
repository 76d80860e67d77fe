"""`interlock explain`: each decision with its rule, why, and the values its conditions read
(see `interlock.runtime.explain`), as lines for the terminal or for a pipe."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interlock.cli.base import escape, when
from interlock.runtime.explain import decisions, item_outcomes, outcome_lines

if TYPE_CHECKING:
    from interlock.storage.base import Store


def explain_lines(store: Store, run_id: str) -> list[str]:
    """The lines of `interlock explain` (rich markup, values escaped)."""
    lines = [_markup(d) for d in decisions(store, run_id)]
    return lines + [escape(line) for line in outcome_lines(item_outcomes(store, run_id))]


def plain_lines(store: Store, run_id: str) -> list[str]:
    """The same lines without styles: a wide run's tens of thousands of events are printed
    off a terminal without rich parsing each."""
    lines = [_plain(d) for d in decisions(store, run_id)]
    return lines + outcome_lines(item_outcomes(store, run_id))


def _markup(d: dict[str, Any]) -> str:
    head = f"{d['seq']:>4} {when(d['at'])}"
    why = escape(d["why"] or "")
    if d["rule"]:
        text = f"{head} [bold]{d['rule']:<12}[/] {d['kind']:<16} {why}"
    elif d["why"]:
        text = f"{head} [dim]{'observed':<12}[/] {d['kind']:<16} {why}"
    else:
        text = f"{head} [dim]{'observed':<12} {d['kind']:<16}[/]"
    return "\n".join([text, *(f"{' ' * 26}{escape(line)}" for line in d["reads"])])


def _plain(d: dict[str, Any]) -> str:
    label = d["rule"] or "observed"
    text = f"{d['seq']:>4} {when(d['at'])} {label:<12} {d['kind']:<16} {d['why'] or ''}".rstrip()
    return "\n".join([text, *(f"{' ' * 26}{line}" for line in d["reads"])])
