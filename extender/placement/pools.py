"""Size-class pools: small gangs packed into the domains that already host small gangs, so the
others stay whole for large gangs.

Owns the rule that decides where a gang may start now when the domains of one topology level
(racks or blocks, say) are pools with a size class each, the way GPU clusters split node pools or
Slurm partitions, except that here the boundary moves by itself. The service (scheduling.pooling,
scheduling.filtering, scheduling.holding) and `bench quality`'s pool policy (`admit`) run this code:

1. A gang is large when it asks for at least `large_share` of a typical pool domain (its dominant
   resource against the domain's median allocatable), small otherwise (`size_class`).
2. A domain's class is read off the cluster (`classes_of`): large where any member of a large gang
   runs or is planned, small where anything else does, none when empty. Nothing is remembered, so
   a restarted service finds the same classes; a domain changes class only as its pods change.
3. A gang plans over the domains of its own class first (tightest fit among them) and opens an
   empty domain only when none of those fits (`plan_in_pools`). Small gangs may open one only while
   the room left for large gangs stays at least `reserve` domains: an empty domain counts whole, a
   large one by its free share (half a block beside a half-block gang counts a half). A gang that
   fits only in the other class's domains (or in the reserve) waits: it does not start there.
4. The wait is bounded by `extender.placement.backfill`'s holds: the first waiting gangs of each
   class hold capacity (so a gang its pool keeps waiting never waits behind the other class's
   head), a small one within the rows its pool lets it start on (`allowed_rows`) when those
   could fit it drained (so the reserve stays whole); otherwise, and for a large one, where it
   fits now if it does (no room stands free while it waits for rows to drain), else on the least
   used rows anywhere (a small domain that drains for a large gang is as good as an empty one).
   A holder whose hold is ready starts on its held rows, whatever their class or the reserve
   (`plan_on_hold`), so the backfill rule's argument holds unchanged: the head starts in finite
   time once the pods on its held rows leave, and every gang becomes the head in its turn.
   Classes and the reserve only narrow where the gangs behind the head may start now.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from extender.placement.api import DomainOrder, GangRequest, Outcome, Plan, plan_gang
from extender.placement.backfill import Hold, HoldPass, around, charge, choose_holds, gang_demand, withheld
from extender.placement.layout import ClusterArrays


class SizeClass(enum.Enum):
    SMALL = "small"
    LARGE = "large"


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """Where large starts, and how much room small gangs leave large ones."""

    large_share: float = 0.5  # a gang asking this share of a typical domain or more is large
    reserve: float = 0.0  # domains' worth of room small gangs leave large ones (a hold may still take it)

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.large_share <= 1:  # NaN fails too
            problems.append(f"large share: in (0, 1], got {self.large_share}")
        if not self.reserve >= 0:
            problems.append(f"reserve: 0 or more domains' worth of room, got {self.reserve}")
        if problems:
            raise ValueError("; ".join(problems))


class PoolFit(enum.Enum):
    """Where the rule lets a gang start now."""

    IN_POOL = "in_pool"  # in domains of its own class
    OPENED = "opened"  # opening an empty domain
    OUTSIDE = "outside"  # it fits only in the other class's domains, or in the reserve: it waits
    NONE = "none"  # it fits nowhere now


@dataclasses.dataclass(frozen=True)
class PooledPlan:
    fit: PoolFit
    plan: Plan  # PLACED for IN_POOL and OPENED; for OUTSIDE, where it would fit; else why not
    size: SizeClass


@dataclasses.dataclass(frozen=True)
class PoolAdmission:
    """The gangs that start now (queue position, plan), the holds after them, the large rows after
    them (the caller's mask with the large gangs started now added)."""

    starts: tuple[tuple[int, Plan], ...]
    holds: tuple[Hold, ...]
    large_rows: np.ndarray


def typical_domain(arrays: ClusterArrays, level: int) -> np.ndarray:
    """float[n_res]: the median allocatable of the level's domains (those with any)."""
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    keep = (dom >= 0) & arrays.schedulable[:n]
    if not keep.any():
        return np.zeros(arrays.n_res)
    ids = dom[keep]
    alloc = arrays.allocatable[:n][keep]
    sums = np.stack(
        [np.bincount(ids, weights=alloc[:, c], minlength=int(ids.max()) + 1) for c in range(arrays.n_res)],
        axis=1,
    )
    sums = sums[np.unique(ids)]
    return np.median(sums, axis=0)


def size_class(request_demand: np.ndarray, typical: np.ndarray, large_share: float) -> SizeClass:
    """LARGE when the gang's dominant share of a typical domain is at least `large_share`.

    A resource no domain has at all makes the gang large: it fits no pool of small gangs either.
    """
    asked = request_demand > 0
    if not asked.any():
        return SizeClass.SMALL
    if (typical[asked] <= 0).any():
        return SizeClass.LARGE
    share = float((request_demand[asked] / typical[asked]).max())
    return SizeClass.LARGE if share >= large_share else SizeClass.SMALL


def _in_use(arrays: ClusterArrays, level: int) -> set[int]:
    """Domain ids at `level` where some row has anything allocated."""
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    busy = (arrays.free[:n] != arrays.allocatable[:n]).any(axis=1) & (dom >= 0)
    return {int(d) for d in np.unique(dom[busy])}


def _domains(arrays: ClusterArrays, level: int) -> set[int]:
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    return {int(d) for d in np.unique(dom[(dom >= 0) & arrays.schedulable[:n]])}


def _room(arrays: ClusterArrays, level: int, large: set[int], empty: set[int]) -> float:
    """Domains' worth of room large gangs have: each empty domain 1, each large one its free share
    (1 less its dominant used share)."""
    if not large:
        return float(len(empty))
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    ids = np.fromiter(large, dtype=np.int32, count=len(large))
    keep = np.isin(dom, ids)
    where = np.searchsorted(np.sort(ids), dom[keep])
    alloc = np.zeros((ids.size, arrays.n_res))
    used = np.zeros((ids.size, arrays.n_res))
    np.add.at(alloc, where, arrays.allocatable[:n][keep])
    np.add.at(used, where, arrays.allocatable[:n][keep] - arrays.free[:n][keep])
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(alloc > 0, used / np.maximum(alloc, 1), 0.0)
    return float(len(empty)) + float((1.0 - share.max(axis=1)).clip(0, 1).sum())


def _plan_within(
    arrays: ClusterArrays, request: GangRequest, level: int, allowed: set[int], order: DomainOrder
) -> Plan:
    """A plan on the rows of the allowed domains (and rows outside every domain of the level)."""
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    mask = np.zeros_like(arrays.schedulable)
    mask[:n] = (dom < 0) | np.isin(dom, np.fromiter(allowed, dtype=np.int32, count=len(allowed)))
    view = copy.copy(arrays)
    view.schedulable = arrays.schedulable & mask
    return plan_gang(view, request, order=order)


def classes_of(arrays: ClusterArrays, level: int, large_rows: np.ndarray) -> dict[int, SizeClass]:
    """The class of each domain at `level` in use: LARGE where some row in `large_rows` (bool, by row:
    a large gang's member runs or is planned there) lies, SMALL where anything else is in use."""
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    out = dict.fromkeys(_in_use(arrays, level), SizeClass.SMALL)
    mask = large_rows[:n] & (dom >= 0)
    for d in np.unique(dom[mask]):
        out[int(d)] = SizeClass.LARGE
    return out


def allowed_rows(
    arrays: ClusterArrays,
    level: int,
    classes: Mapping[int, SizeClass],
    size: SizeClass,
    settings: PoolSettings,
) -> np.ndarray:
    """bool[capacity]: the rows a gang of class `size` may start on now (those outside every domain
    of the level too): its class's domains, and the empty ones when it may open one."""
    n = arrays.n_rows
    dom = arrays.domains[level, :n]
    keep = [d for d, c in classes.items() if c is size]
    empty = _domains(arrays, level) - set(classes)
    if empty and _may_open(arrays, level, classes, empty, size, settings):
        keep += sorted(empty)
    mask = np.zeros(arrays.capacity, dtype=bool)
    mask[:n] = (dom < 0) | np.isin(dom, np.asarray(keep, dtype=np.int32))
    return mask


def _may_open(
    arrays: ClusterArrays,
    level: int,
    classes: Mapping[int, SizeClass],
    empty: set[int],
    size: SizeClass,
    settings: PoolSettings,
) -> bool:
    if size is SizeClass.LARGE:
        return True
    large = {d for d, c in classes.items() if c is SizeClass.LARGE}
    return _room(arrays, level, large, empty) - 1 >= settings.reserve


def plan_in_pools(
    arrays: ClusterArrays,
    request: GangRequest,
    level: int,
    classes: Mapping[int, SizeClass],
    size: SizeClass,
    settings: PoolSettings,
    *,
    order: DomainOrder = DomainOrder.TIGHTEST,
) -> PooledPlan:
    """The gang's plan by the rule: in its class's domains, else in an empty one it may open; when
    neither, where it would fit (OUTSIDE: it waits) or why it fits nowhere (NONE)."""
    mine = {d for d, c in classes.items() if c is size}
    plan = _plan_within(arrays, request, level, mine, order)
    if plan.outcome is Outcome.PLACED:
        return PooledPlan(PoolFit.IN_POOL, plan, size)
    empty = _domains(arrays, level) - set(classes)
    if empty and _may_open(arrays, level, classes, empty, size, settings):
        plan = _plan_within(arrays, request, level, mine | empty, order)
        if plan.outcome is Outcome.PLACED:
            return PooledPlan(PoolFit.OPENED, plan, size)
    plan = plan_gang(arrays, request, order=order)
    return PooledPlan(PoolFit.OUTSIDE if plan.outcome is Outcome.PLACED else PoolFit.NONE, plan, size)


def plan_on_hold(
    arrays: ClusterArrays, request: GangRequest, hold: Hold, *, order: DomainOrder = DomainOrder.TIGHTEST
) -> Plan:
    """The gang's plan on its held rows only: where a holder whose pool has no room starts once its
    hold is ready (neither class nor reserve binds it there)."""
    view = copy.copy(arrays)
    view.schedulable = np.zeros_like(arrays.schedulable)
    view.schedulable[hold.rows] = arrays.schedulable[hold.rows]
    return plan_gang(view, request, order=order)


def admit(
    arrays: ClusterArrays,
    queue: Sequence[tuple[Hashable, GangRequest]],
    holds: Sequence[Hold],
    settings: PoolSettings,
    *,
    level: int,
    large_rows: np.ndarray,
    depth: int = 1,
    order: DomainOrder = DomainOrder.TIGHTEST,
) -> PoolAdmission:
    """Which of the waiting gangs (`queue`, in service order) start now, and the holds after them: the
    service's steps (scheduling.holding's pass, then scheduling.filtering's pooled plan per gang) in
    one call, as `backfill.admit` is for holds alone.

    1. The holds, as the pass chooses them, each within its gang's `allowed_rows` first.
    2. Each gang, in order, plans by `plan_in_pools` around the holds ranked before its own (those
       before it in the pass when the pass found it fits now; all of them when it holds none and
       did not fit) and starts in its pool or in a domain it may open; else, when its
       hold is ready, on its held rows (`plan_on_hold`). A gang that starts is charged to a working
       copy; a large one's rows join the large rows.
    3. The holds are chosen again over the gangs still waiting.
    `arrays` and `large_rows` are not changed.
    """
    if not 0 <= level < arrays.n_levels:
        raise ValueError(f"pool level: {level} is not a level of the cluster (it has {arrays.n_levels})")
    arrays.check()
    work = copy.copy(arrays)
    work.free = arrays.free.copy()
    large = large_rows.copy()
    typical = typical_domain(work, level)
    sizes = {key: size_class(gang_demand(work, req), typical, settings.large_share) for key, req in queue}

    def hold(gangs: Sequence[tuple[Hashable, GangRequest]], previous: Sequence[Hold]) -> HoldPass:
        classes = classes_of(work, level, large)
        allowed = {key: allowed_rows(work, level, classes, sizes[key], settings) for key, _ in gangs}
        small = {key: rows for key, rows in allowed.items() if sizes[key] is SizeClass.SMALL}
        return choose_holds(
            work, gangs, previous, depth=depth, order=order, within=allowed, hold_within=small, classes=sizes
        )

    first = hold(queue, holds)
    current = list(first.holds)
    starts: list[tuple[int, Plan]] = []
    for pos, (key, request) in enumerate(queue):
        ranked = [h.owner for h in current]
        classes = classes_of(work, level, large)
        with withheld(work, around(current, key, first)) as view:
            pooled = plan_in_pools(view, request, level, classes, sizes[key], settings, order=order)
            plan = pooled.plan if pooled.fit in (PoolFit.IN_POOL, PoolFit.OPENED) else None
            own = current[ranked.index(key)] if key in ranked else None
            if plan is None and own is not None and own.ready(view):
                plan = plan_on_hold(view, request, own, order=order)
        if plan is not None and plan.outcome is Outcome.PLACED:
            charge(work, request, plan)
            starts.append((pos, plan))
            current = [h for h in current if h.owner != key]
            if sizes[key] is SizeClass.LARGE:
                for rows in plan.rows:
                    large[np.asarray(rows, dtype=np.int64)] = True
    started = {queue[pos][0] for pos, _ in starts}
    left = [(k, r) for k, r in queue if k not in started]
    return PoolAdmission(tuple(starts), hold(left, current).holds, large)
