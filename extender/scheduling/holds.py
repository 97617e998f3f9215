"""HoldBook: the capacity withheld for the gangs at the head of the wait (see holding.py for who
holds and where), and how every other plan sees the cluster with it withheld.

The ledger owns the book (one owner for everything that keeps capacity from someone): it drops a
gang's hold the moment the gang is planned or leaves; the holding pass replaces the book's holds
as a whole. Everything here is soft state: after a restart holds are chosen again from the cluster.

A hold is not a reservation: it never takes capacity anyone has, so it can never over-commit a
node. It is an overlay: every other plan sees a held row's free capacity less what the hold wants
there (never below zero), so the row only drains towards the holder's amount and nobody fills it
past that. A holder plans around the holds ranked before it only.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping

import numpy as np

from extender.model.keys import GroupKey
from extender.placement import backfill
from extender.placement.backfill import Hold
from extender.placement.layout import ClusterArrays


@dataclasses.dataclass(frozen=True)
class HoldSettings:
    """Whether gangs that do not fit hold capacity, and how many at once."""

    enabled: bool = True
    depth: int = 1  # how many waiting gangs hold (1: the head only; more idles more capacity)
    pools: bool = True  # size-class pools (scheduling.pooling); only with holds, which bound their wait
    pool_label: str = ""  # the node label whose domains are the pools; "": each gang's required level
    pool_reserve: float = 0.0  # domains' worth of room small gangs leave large ones
    large_share: float = 0.5  # a gang asking this share of a typical pool domain or more is large

    def __post_init__(self) -> None:
        problems = []
        if self.depth < 1:
            problems.append(
                f"hold depth: at least 1 (the head's hold is what rules out starvation), got {self.depth}"
            )
        if not self.pool_reserve >= 0:  # NaN too
            problems.append(f"pool reserve: 0 or more domains' worth of room, got {self.pool_reserve}")
        if not 0 < self.large_share <= 1:
            problems.append(f"large share: in (0, 1], got {self.large_share}")
        if problems:
            raise ValueError("; ".join(problems))


@dataclasses.dataclass(frozen=True)
class Held:
    """Capacity held for one gang: where, how much, for whose queue, since when."""

    gang: GroupKey
    hold: Hold
    nodes: tuple[str, ...]  # the held rows' node names (a row may be reused by another node)
    queue: str | None  # charged to it in the queue book
    room: Mapping[str, int]  # the held amounts by resource name, summed over the rows
    priority: int
    since_s: float  # when the gang first held
    domain: str  # "rack r3", for messages
    row_domains: np.ndarray | None = None
    """int32[levels, k]: each held row's domain at every level as held (arrays.domains' columns): a
    row relabelled into another domain since leaves the hold's plan split, and the hold is chosen anew."""


class HoldBook:
    def __init__(self, settings: HoldSettings) -> None:
        self.settings = settings
        self._held: dict[GroupKey, Held] = {}  # in rank order: the head first
        self._none: dict[GroupKey, str] = {}  # gangs given no hold, and why
        self._starting: dict[GroupKey, frozenset[GroupKey]] = {}  # fits now -> the holders before it
        self.gen = 0
        """Bumps whenever what is held changes: a no-fit found around the old holds may fit now."""
        self._overlay: backfill.Overlay | None = None
        """While a `withheld` block is open: what it took out of which arrays."""

    # ----------------------------------------------------------------- reads
    def all(self) -> list[Held]:
        """The holds in rank order (the head first)."""
        return list(self._held.values())

    def of(self, gang: GroupKey) -> Held | None:
        return self._held.get(gang)

    def why_none(self, gang: GroupKey) -> str:
        """Why a waiting gang was given no hold ("" when it holds or was not looked at)."""
        return self._none.get(gang, "")

    def no_hold_gangs(self) -> list[GroupKey]:
        """The waiting gangs the last pass gave no hold, with a reason (`why_none`)."""
        return list(self._none)

    def __len__(self) -> int:
        return len(self._held)

    def before(self, gang: GroupKey | None, priority: int | None = None) -> list[Held]:
        """The holds a plan for `gang` (of `priority`) goes around: those ranked before it when it
        holds, or when the last pass found it fits now; when neither, every hold of a gang of at
        least its priority (a hold never keeps
        room from work that outranks its holder: a higher-priority gang takes the head at the next
        pass, a higher-priority plain pod never holds and would otherwise wait behind it)."""
        out = []
        holding = gang is not None and gang in self._held
        ahead = self._starting.get(gang) if gang is not None and not holding else None
        if ahead is not None:
            # the pass found it fits now around the holds ranked before it: those alone, or a hold
            # ranked after it (of its priority) would keep it from the room the pass left it, and
            # the pass, finding it fits, would never hold for it (interleavings kill seed 2040)
            return [held for key, held in self._held.items() if key in ahead]
        for key, held in self._held.items():
            if key == gang:
                break
            if holding or priority is None or held.priority >= priority:
                out.append(held)
        return out

    def rows(self) -> np.ndarray:
        """Every held row (int64, distinct)."""
        if not self._held:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate([h.hold.rows for h in self._held.values()]).astype(np.int64))

    def holders_on(self, rows: np.ndarray) -> list[Held]:
        """The holds that take anything on any of `rows`."""
        return [h for h in self._held.values() if np.isin(h.hold.rows, rows).any()]

    def room_by_gang(self) -> dict[GroupKey, tuple[str, Mapping[str, int]]]:
        """gang -> (its queue, the room held for it): what the queue book charges to each queue."""
        return {g: (h.queue, h.room) for g, h in self._held.items() if h.queue is not None}

    # ----------------------------------------------------------------- the overlay
    def take_out(self, free: np.ndarray, *, for_gang: GroupKey | None, priority: int | None = None) -> None:
        """Take the holds `for_gang` plans around out of `free` (a copy the caller owns), never below 0."""
        backfill.take(free, [h.hold for h in self.before(for_gang, priority)])

    @contextlib.contextmanager
    def withheld(
        self, arrays: ClusterArrays, *, for_gang: GroupKey | None, priority: int | None = None
    ) -> Iterator[ClusterArrays]:
        """`arrays` as a plan for `for_gang` sees them (the holds before it taken out of free), restored
        on exit. Touches only the held rows: O(rows held), not O(cluster). Nothing may change `arrays`
        inside the block except through it (plans are applied after the block)."""
        around = [h.hold for h in self.before(for_gang, priority)]
        outer = self._overlay
        try:
            with backfill.overlay(arrays, around) as taken:
                if taken is not None:
                    self._overlay = taken
                yield arrays
        finally:
            self._overlay = outer

    def unheld_free(self, arrays: ClusterArrays) -> np.ndarray:
        """`arrays.free` as the cluster has it, the holds a `withheld` block took out given back (a
        copy when a block is open, else `arrays.free` itself): what is in use, for a reader that must
        not mistake a hold for a pod (the size-class pools' classes)."""
        if self._overlay is None or self._overlay.arrays is not arrays:
            return arrays.free
        return self._overlay.free_before()

    # ----------------------------------------------------------------- writes (the ledger's)
    def replace(
        self,
        held: list[Held],
        none: Mapping[GroupKey, str],
        starting: Mapping[GroupKey, frozenset[GroupKey]] | None = None,
    ) -> None:
        """The holding pass's decision, whole: `held` in rank order, the gangs given none, why, and
        those found to fit now, each with the holders ranked before it (`before`)."""
        same = [(h.gang, h.nodes, h.hold.amounts.tobytes()) for h in held] == [
            (h.gang, h.nodes, h.hold.amounts.tobytes()) for h in self._held.values()
        ]
        starting = dict(starting or {})
        self._held = {h.gang: h for h in held}
        self._none = dict(none)
        if not same or starting != self._starting:
            self.gen += 1  # what a plan goes around changed: a kept answer is read again
        self._starting = starting

    def drop(self, gang: GroupKey) -> Held | None:
        """The gang starts (is planned) or leaves: its hold goes at once, not at the next pass."""
        self._none.pop(gang, None)
        self._starting.pop(gang, None)
        held = self._held.pop(gang, None)
        if held is not None:
            self.gen += 1
        return held

    def clear(self) -> None:
        if self._held or self._starting:
            self.gen += 1
        self._held.clear()
        self._none.clear()
        self._starting.clear()
