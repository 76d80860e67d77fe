"""A batch's rows as a driver last read them, reread only where they may have moved.

A batch of 10,000 rows, most of them done, would cost its driver a join of every row with its
run at every turn. `RowMap` reads them all once (when the driver starts), then at each turn
only the rows that may have moved since (`moving`: its rows in flight), and all of them again
when the batch's `changes` moved: a row that is not in flight moves only by the driver's own
hand (which rereads what it touched) or by someone else's retry or cancel, which count a change.

The count is read before the rows (it comes with the batch's record, read first at each turn),
so a change made after the count was read is found at the next turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from interlock.core.batches import RowView
from interlock.storage.batches import BatchLedger, BatchRecord


class RowMap:
    """The views of one batch's rows, kept between turns."""

    def __init__(
        self, ledger: BatchLedger, batch_id: str, moving: Callable[[RowView], bool]
    ) -> None:
        self.ledger = ledger
        self.batch_id = batch_id
        self._moving = moving
        self._views: list[RowView] = []  # in row order
        self._at: dict[int, int] = {}  # row -> its place in `_views`
        self._changes: int | None = None  # the batch's count when its rows were read whole
        self._flying: set[int] = set()  # rows reread at each turn

    def refresh(self, record: BatchRecord) -> list[RowView]:
        """Every row in row order, as it stands now: all of them read again when `record`
        (just read) counts a change not seen yet, else only the rows that may have moved."""
        if record.changes != self._changes:
            self._views = self.ledger.views(self.batch_id)
            self._at = {v.number: i for i, v in enumerate(self._views)}
            self._changes = record.changes
            self._flying = {v.number for v in self._views if self._moving(v)}
        else:
            self.reread(self._flying)
        return self._views

    def reread(self, numbers: Iterable[int]) -> list[RowView]:
        """Read the rows `numbers` again (rows this driver moved itself); their views."""
        wanted = sorted(set(numbers))
        if not wanted:
            return []
        found = self.ledger.views_of(self.batch_id, wanted)
        for view in found:
            self._put(view)
        return found

    def kept(self, numbers: Iterable[int]) -> None:
        """Note that the results of these rows' ended runs were recorded (by this driver)."""
        for number in numbers:
            self._put(replace(self._views[self._at[number]], kept=True))

    def _put(self, view: RowView) -> None:
        place = self._at.get(view.number)
        if place is None:  # not a row of the batch when it was read whole: cannot be
            return
        self._views[place] = view
        if self._moving(view):
            self._flying.add(view.number)
        else:
            self._flying.discard(view.number)

    def settle(self, numbers: Iterable[int]) -> None:
        """Stop rereading rows that will not move on their own (runs whose result can no
        longer be kept): they are read again only with the whole batch."""
        self._flying.difference_update(numbers)

    def view(self, number: int) -> RowView:
        """One row as last read."""
        return self._views[self._at[number]]

    @property
    def views(self) -> list[RowView]:
        """Every row as last read, in row order (the map's own list: not to be changed)."""
        return self._views

    @property
    def flying(self) -> list[RowView]:
        """The rows reread at each turn, in row order."""
        return [self._views[self._at[n]] for n in sorted(self._flying)]
