"""SettlingRows: the nodes whose room changed in this cache moments ago.

kube-scheduler runs its own NodeResourcesFit on its own cache before it calls filter, so for a
plain pod the filter need only check the nodes where this cache knows more. Both caches follow the
same API server, but not in step: where this cache saw a pod bound (a gang member this service
released itself, a binding kube-scheduler gave up waiting for, a pod bound by anyone else) or a
node change, kube-scheduler may still see the old room for a moment. Such a row is checked here
for `settle_s` after the change instead of being left to kube-scheduler's fit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class SettlingRows:
    def __init__(self, *, settle_s: float, clock: Callable[[], float]) -> None:
        self.settle_s = settle_s
        self.clock = clock
        self._until: dict[int, float] = {}  # row -> settled at; insertion order is expiry order
        self._rows: np.ndarray | None = None  # the array of `_until`'s rows, until it changes

    def mark(self, row: int) -> None:
        """The row's room changed now (a pod bound on it, its node updated)."""
        self._until.pop(row, None)  # re-inserted last: the dict stays ordered by expiry
        self._until[row] = self.clock() + self.settle_s
        self._rows = None

    def rows(self) -> np.ndarray:
        """int32[k]: the rows still settling."""
        now = self.clock()
        expired = []
        for row, until in self._until.items():
            if until > now:
                break
            expired.append(row)
        for row in expired:
            del self._until[row]
        if expired or self._rows is None:
            self._rows = np.fromiter(self._until, dtype=np.int32, count=len(self._until))
        return self._rows

    def __len__(self) -> int:
        return len(self._until)
