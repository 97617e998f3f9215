"""Holding capacity for the gang at the head of the queue, and backfilling around the hold.

Owns the rule that keeps a stream of small gangs from starving a large one (reservation plus
backfill, as Slurm, LSF, PBS and Volcano's `reserve` do it, without their run-time limits, which
pods do not have):

1. Waiting gangs are served in order (oldest first, or by priority: the caller's order). The first
   one is the head. The head plans over the whole cluster, its own hold included.
2. When the head does not fit, it gets a hold: the rows (and the amount on each) where it would
   fit once they drained, chosen among the least used rows (`choose_hold`). The hold is kept until
   the head starts or leaves the queue, and moves only to rows with strictly less still to drain
   (`Hold.deficit`): a long-running pod on a held row does not pin the head to it.
3. Every other gang plans against free capacity minus the hold (`withheld`): on a held row it may
   use only what the head will not need there (`max(0, free - held)` per resource), so a held row
   only drains towards the head's amount and never fills past it.
4. When every held row has its amount free (`Hold.ready`), the head starts on the hold's own plan
   if a fresh plan found nothing better.

Why it cannot starve: a held row's deficit only shrinks (no other gang can take what the head
needs there, and the pods holding it leave after a finite run), so it strictly shrinks within
finite time until it is 0; a move only ever goes to a strictly smaller deficit, and deficits
take finitely many values, so the head's deficit reaches 0 (the hold is ready, the head starts)
in finite time. Each gang becomes the head after finitely many older gangs have started, so
every gang that fits an empty cluster starts (one that cannot fit even an empty cluster never
gets a hold and is passed over as head). The assumption is that pods end: a pod that never
does (a server, a daemon) on a held row pins the head there until a strictly emptier place
exists. With `depth` 1 only the head holds, so at most one gang's worth of capacity waits idle;
a larger depth lets the next waiting gangs hold too, each from what the older holds leave
(conservative backfill), and idles more.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence

import numpy as np

from extender.placement.api import DomainOrder, GangRequest, Outcome, Plan, plan_gang
from extender.placement.layout import ClusterArrays


@dataclasses.dataclass(frozen=True)
class Hold:
    """Capacity promised to one waiting gang: `amounts[i]` on row `rows[i]`, and where its pods go."""

    owner: Hashable  # the caller's key of the gang it is held for
    rows: np.ndarray  # int32[k], distinct
    amounts: np.ndarray  # int64[k, n_res], the gang's summed requests on each row
    plan: Plan  # PLACED, on these rows: what starts when the hold is ready

    def usable(self, arrays: ClusterArrays) -> bool:
        """Every held row is still a schedulable node whose allocatable takes the held amount (a
        kubelet may lower it): otherwise the hold can never be ready."""
        if not self.rows.size:
            return True
        if int(self.rows.max()) >= arrays.n_rows or not bool(arrays.schedulable[self.rows].all()):
            return False
        return bool((arrays.allocatable[self.rows, : self.amounts.shape[1]] >= self.amounts).all())

    def deficit(self, arrays: ClusterArrays) -> float:
        """What must still leave the held rows: summed over them, the dominant share (of the row's
        allocatable) of the held amount not yet free. 0 exactly when the hold is ready."""
        if not self.rows.size:
            return 0.0
        width = self.amounts.shape[1]
        short = np.maximum(self.amounts - arrays.free[self.rows, :width], 0)
        alloc = np.maximum(arrays.allocatable[self.rows, :width], 1)
        return float((short / alloc).max(axis=1).sum())

    def ready(self, arrays: ClusterArrays) -> bool:
        """Every held row is schedulable and has its whole amount free: the gang fits there now."""
        if not self.usable(arrays):
            return False
        return bool((arrays.free[self.rows, : self.amounts.shape[1]] >= self.amounts).all())


def _usage(arrays: ClusterArrays, demand: np.ndarray) -> np.ndarray:
    """float[n_rows]: each row's dominant used share over the resources the gang asks for."""
    n = arrays.n_rows
    alloc = arrays.allocatable[:n]
    used = alloc - arrays.free[:n]
    cols = np.flatnonzero(demand > 0)
    if not cols.size:
        return np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(alloc[:, cols] > 0, used[:, cols] / np.maximum(alloc[:, cols], 1), 0.0)
    return share.max(axis=1)


def _amounts(arrays: ClusterArrays, request: GangRequest, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    per_row: dict[int, np.ndarray] = {}
    for leaf, rows in zip(request.leaves, plan.rows, strict=True):
        req = np.asarray(leaf.request, dtype=np.int64)
        for r in rows:
            r = int(r)
            per_row[r] = per_row.get(r, np.zeros(arrays.n_res, dtype=np.int64)) + req
    rows = np.array(sorted(per_row), dtype=np.int32)
    amounts = (
        np.stack([per_row[int(r)] for r in rows]) if rows.size else np.zeros((0, arrays.n_res), np.int64)
    )
    return rows, amounts


def gang_demand(arrays: ClusterArrays, request: GangRequest) -> np.ndarray:
    """int64[n_res]: what the gang asks for in all."""
    total = np.zeros(arrays.n_res, dtype=np.int64)
    for leaf in request.leaves:
        req = np.asarray(leaf.request, dtype=np.int64)
        total[: req.size] += req * int(leaf.count)
    return total


def choose_hold(
    arrays: ClusterArrays,
    request: GangRequest,
    owner: Hashable,
    *,
    order: DomainOrder = DomainOrder.TIGHTEST,
    reserved: Sequence[Hold] = (),
) -> Hold | None:
    """The rows to hold for a gang that does not fit now; None if it fits no drained cluster.

    What is in use is what must leave first, so the hold goes where the least is in use: a row's
    use is its dominant share of the resources the gang asks for. Domains of the gang's required
    level (the whole cluster when it has none) are tried in order of the summed use of their
    least used rows, as many rows as the gang takes on an empty cluster. In the first domain that
    holds the gang once drained (free back to allocatable), its rows ranked least used first,
    the shortest prefix of that ranking on which the gang plans is found by bisection (fitting is
    monotone in the rows offered); the plan there is the hold.
    """
    arrays.check()
    n = arrays.n_rows
    demand = gang_demand(arrays, request)
    usable = np.flatnonzero(arrays.schedulable[:n]).astype(np.int32)
    usage = _usage(arrays, demand)
    drained = copy.copy(arrays)
    drained.free = arrays.allocatable.copy()
    take(drained.free, reserved)  # what older holds will take is not this gang's, drained or not

    def plan_on(rows: np.ndarray) -> Plan:
        offered = np.zeros_like(arrays.schedulable)
        offered[rows] = True
        drained.schedulable = offered
        return plan_gang(drained, request, order=order)

    plan = plan_on(usable)
    if plan.outcome is not Outcome.PLACED:
        return None
    needed = len({int(r) for rows in plan.rows for r in rows})
    level = request.tree[0].required_level
    if level < 0:
        groups = [usable]
    else:
        ids = arrays.domains[level, usable]
        by_domain = np.lexsort((usable, ids))
        cuts = np.flatnonzero(np.diff(ids[by_domain])) + 1
        groups = [g for g in np.split(usable[by_domain], cuts) if g.size and arrays.domains[level, g[0]] >= 0]

    def cost(rows: np.ndarray) -> float:
        least = np.sort(usage[rows])[:needed]
        return float(least.sum()) + (needed - least.size)  # a short domain costs a full row per gap

    for rows in sorted(groups, key=lambda g: (cost(g), int(g[0]))):
        ranked = rows[np.lexsort((rows, usage[rows]))]
        best = plan_on(ranked)
        if best.outcome is not Outcome.PLACED:
            continue
        lo, hi = 0, int(ranked.size)  # invariant: the first hi rows place, the first lo do not
        empty = plan_on(ranked[:0])
        if empty.outcome is Outcome.PLACED:  # nothing to place (every pod already bound)
            hi, best = 0, empty
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            trial = plan_on(ranked[:mid])
            if trial.outcome is Outcome.PLACED:
                hi, best = mid, trial
            else:
                lo = mid
        plan = best
        break
    rows, amounts = _amounts(arrays, request, plan)
    return Hold(owner=owner, rows=rows, amounts=amounts, plan=plan)


def hold_on(arrays: ClusterArrays, request: GangRequest, owner: Hashable, plan: Plan) -> Hold | None:
    """A hold on a plan's own rows (ready at once when the plan was made on free capacity); None
    when the plan placed nothing."""
    if plan.outcome is not Outcome.PLACED:
        return None
    rows, amounts = _amounts(arrays, request, plan)
    return Hold(owner=owner, rows=rows, amounts=amounts, plan=plan)


def take(free: np.ndarray, holds: Sequence[Hold]) -> None:
    """Take each hold's amounts out of `free` on its rows, never below 0 (in place)."""
    # clamping each hold in turn equals clamping their sum: max(0, max(0, f - a) - b) = max(0, f - a - b)
    for hold in holds:
        width = hold.amounts.shape[1]
        free[hold.rows, :width] = np.maximum(free[hold.rows, :width] - hold.amounts, 0)


@dataclasses.dataclass(frozen=True)
class Overlay:
    """What an open `overlay` block took out of `arrays.free`: the rows it touched, their free before."""

    arrays: ClusterArrays
    rows: np.ndarray
    saved: np.ndarray

    def free_before(self) -> np.ndarray:
        """A copy of `arrays.free` with what the block took given back."""
        free = self.arrays.free.copy()
        free[self.rows] = self.saved
        return free


@contextlib.contextmanager
def overlay(arrays: ClusterArrays, holds: Sequence[Hold]) -> Iterator[Overlay | None]:
    """The holds taken out of `arrays.free` (never below zero), restored on exit; what was taken, or
    None when no hold has rows.

    Touches only the held rows, so it costs O(rows held), not O(cluster); nothing may change
    `arrays` inside the block except through plans read from it.
    """
    held = [h for h in holds if h.rows.size]
    if not held:
        yield None
        return
    rows = np.unique(np.concatenate([h.rows for h in held]))
    saved = arrays.free[rows].copy()
    try:
        take(arrays.free, held)
        yield Overlay(arrays, rows, saved)
    finally:
        arrays.free[rows] = saved


@contextlib.contextmanager
def withheld(arrays: ClusterArrays, holds: Sequence[Hold]) -> Iterator[ClusterArrays]:
    """`arrays` with the holds taken out of free (never below zero), restored on exit (`overlay`)."""
    with overlay(arrays, holds):
        yield arrays


@dataclasses.dataclass(frozen=True)
class Admission:
    """What to do now with a queue: the gangs that start (queue position, plan), the holds kept."""

    starts: tuple[tuple[int, Plan], ...]
    holds: tuple[Hold, ...]  # in queue order, one per gang that holds


def around(current: Sequence[Hold], key: Hashable, passed: HoldPass) -> list[Hold]:
    """The holds of `current` a plan for `key` goes around: those ranked before its own; those the
    pass kept before it when the pass found it fits now; all of them when neither."""
    ranked = [h.owner for h in current]
    if key in ranked:
        return list(current[: ranked.index(key)])
    if key in passed.starting:
        return [h for h in current if h.owner in passed.starting[key]]
    return list(current)


def charge(arrays: ClusterArrays, request: GangRequest, plan: Plan) -> None:
    """Take a started gang's plan out of `arrays` (a working copy: the caller's own are not touched)."""
    for leaf, rows in zip(request.leaves, plan.rows, strict=True):
        req = np.asarray(leaf.request, dtype=np.int64)
        for r in rows:
            arrays.sub(int(r), req)


@dataclasses.dataclass(frozen=True)
class HoldPass:
    """Which waiting gangs hold (in rank order), and why the others that were looked at do not."""

    holds: tuple[Hold, ...]
    none: dict[Hashable, str]
    starting: dict[Hashable, frozenset[Hashable]] = dataclasses.field(default_factory=dict)
    """Each gang found to fit now that holds nothing: the owners of the holds kept before it, which
    it starts around (those after it, of its priority, must not keep it from the room it fits in)."""


Refusal = Callable[[Hashable, Hold, Sequence[Hold]], "str | None"]
"""Why the caller will not grant `hold` to its owner, given the holds kept before it (its queue has
no room for it, say), or None."""


def choose_holds(
    arrays: ClusterArrays,
    waiting: Sequence[tuple[Hashable, GangRequest]],
    previous: Sequence[Hold] = (),
    *,
    depth: int = 1,
    order: DomainOrder = DomainOrder.TIGHTEST,
    refuse: Refusal | None = None,
    within: Mapping[Hashable, np.ndarray] | None = None,
    hold_within: Mapping[Hashable, np.ndarray] | None = None,
    classes: Mapping[Hashable, Hashable] | None = None,
) -> HoldPass:
    """The holds for the gangs in `waiting` (rank order), the module's rule, given last pass's holds.

    The first `depth` gangs that do not fit now (around the holds kept before them) hold; a hold
    moves only to a strictly smaller deficit (seen around the holds before it), so the head's only
    falls; a gang that fits now keeps the hold it had until it starts. `within` (bool by row, per
    gang) narrows where a gang may start now (its size-class pool, extender.placement.pools): it
    fits now only there; `hold_within` narrows where it holds, when those rows could fit it
    drained; else a gang `within` narrows holds where it fits now, if anywhere, else where the
    least is in use. With `classes` (a size class per gang), `depth` counts per class:
    the first waiting gangs of each class hold, so a gang its pool keeps waiting gets a hold without
    waiting behind a gang of the other class. `arrays` is not changed.
    """
    if depth < 1:
        raise ValueError(f"depth: at least 1 (the head's hold is what rules out starvation), got {depth}")
    before = {h.owner: h for h in previous if h.usable(arrays)}  # a held node gone: choose again
    kept: list[Hold] = []
    none: dict[Hashable, str] = {}
    starting: dict[Hashable, frozenset[Hashable]] = {}
    held_by_class: dict[Hashable, int] = {}
    for key, request in waiting:
        cls = classes.get(key) if classes is not None else None
        if held_by_class.get(cls, 0) >= depth:
            if classes is None:
                break  # one class: nobody after this holds
            continue
        own = before.get(key)
        with withheld(arrays, kept) as view:
            fits = plan_gang(_narrowed(view, within, key), request, order=order).outcome is Outcome.PLACED
            if not fits:
                fresh = None
                if hold_within is not None and key in hold_within:
                    fresh = choose_hold(
                        _narrowed(view, hold_within, key), request, key, order=order, reserved=kept
                    )
                if fresh is None and within is not None and key in within:
                    # its pool keeps it waiting and could not hold it drained: where it fits now, if it
                    # does (ready at once), rather than rows that must drain while others stand free
                    fresh = hold_on(view, request, key, plan_gang(view, request, order=order))
                if fresh is None:
                    fresh = choose_hold(view, request, key, order=order, reserved=kept)
                if fresh is not None and (own is None or fresh.deficit(view) < own.deficit(view)):
                    own = fresh
                elif fresh is None and own is None:
                    none[key] = (
                        "what the holds before it leave fits it nowhere, even drained"
                        if kept
                        else "it fits nowhere even on an empty cluster"
                    )
        if own is None:
            if fits:
                starting[key] = frozenset(h.owner for h in kept)
            continue  # fits now and held nothing: it starts at its next try
        why = refuse(key, own, kept) if refuse is not None else None
        if why:
            none[key] = why
            continue
        kept.append(own)
        held_by_class[cls] = held_by_class.get(cls, 0) + 1
    return HoldPass(tuple(kept), none, starting)


def _narrowed(
    arrays: ClusterArrays, masks: Mapping[Hashable, np.ndarray] | None, key: Hashable
) -> ClusterArrays:
    mask = masks.get(key) if masks is not None else None
    if mask is None:
        return arrays
    view = copy.copy(arrays)
    view.schedulable = arrays.schedulable & mask[: arrays.schedulable.size]
    return view


def admit(
    arrays: ClusterArrays,
    queue: Sequence[tuple[Hashable, GangRequest]],
    holds: Sequence[Hold] = (),
    *,
    depth: int = 1,
    order: DomainOrder = DomainOrder.TIGHTEST,
) -> Admission:
    """Which of the waiting gangs (`queue`, in service order) start now, and the holds after them: the
    service's two steps (scheduling.filtering, then scheduling.holding's pass) in one call.

    1. The holds as the pass would choose them for this queue, from `holds` (the service's ticker
       passes between calls: a gang that holds does so before the next one arrives).
    2. Each gang, in order, plans around the holds ranked before its own (those before it in the
       pass when the pass found it fits now; all of them when it holds none and did not fit); a
       gang that fits starts, charged to a working copy.
    3. The holds are chosen again over the gangs still waiting.
    `arrays` is not changed.
    """
    work = copy.copy(arrays)
    work.free = arrays.free.copy()
    first = choose_holds(work, queue, holds, depth=depth, order=order)
    current = list(first.holds)
    starts: list[tuple[int, Plan]] = []
    for pos, (key, request) in enumerate(queue):
        with withheld(work, around(current, key, first)) as view:
            plan = plan_gang(view, request, order=order)
        if plan.outcome is Outcome.PLACED:
            charge(work, request, plan)
            starts.append((pos, plan))
            current = [h for h in current if h.owner != key]  # it starts: what was held is its plan's
    started = {queue[pos][0] for pos, _ in starts}
    left = [(k, r) for k, r in queue if k not in started]
    after = choose_holds(work, left, current, depth=depth, order=order)
    return Admission(tuple(starts), after.holds)
