"""Size-class pools: small gangs packed into the domains that already host small gangs, so the
others stay whole for large gangs; and the head of the queue's hold, so that no gang starves.

Owns the rule that decides, for a queue of waiting gangs, which start now and where, when the
domains of one topology level (blocks, say) are pools with a size class each, the way GPU clusters
split node pools or Slurm partitions, except that here the boundary moves by itself:

1. A gang is large when it asks for at least `large_share` of a typical pool domain (its dominant
   resource against the domain's median allocatable), small otherwise (`size_class`).
2. A domain in use has the class of the gang that opened it; an empty domain has none and goes to
   whichever class opens it next. A domain changes class only by draining empty, so small gangs
   never scatter over the domains that large gangs need whole. A domain already in use when the
   rule first sees it (pods of unknown gangs) counts as small.
3. A gang plans over the domains of its own class first (tightest fit among them) and opens an
   empty domain only when none of those fits. Small gangs may open one only while the room left
   for large gangs stays at least `reserve` domains: an empty domain counts whole, a large one by
   its free share (half a block beside a half-block gang counts a half), so the reserve is a
   number of domains' worth, and need not be a whole one.
4. Over that, `extender.placement.backfill`'s hold, per class: the first `depth` waiting small
   gangs and `large_depth` large ones that do not fit hold the least used rows that fit them once
   drained, and every later gang plans around the holds. Per class, so that a queue headed by
   small gangs (most of the gangs, and most of the waiting ones) still has its oldest large gang
   draining a domain; more large holds drain more small domains while large gangs queue.
   A small gang holds within the small domains when those could fit it drained (so the reserve
   stays whole), anywhere otherwise; a large gang holds anywhere, since a small domain that drains
   for it is as good as an empty one. A hold that is ready starts its gang where it is, even in a
   domain of the other class (which keeps its class).

Why nothing starves in a finite stream: the head of the queue holds first, around no other hold,
and its hold is bound by neither class nor reserve once it is chosen, so the backfill rule's
argument (a held row's deficit only shrinks, since every later gang plans around it; a hold moves
only to a strictly smaller deficit) holds unchanged: the head starts in finite time once the pods
on its held rows leave, and every gang becomes the head in its turn. Classes, the reserve and the
other class's hold only narrow where the gangs behind the head may start now.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Hashable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from extender.placement.api import DomainOrder, GangRequest, Outcome, Plan, plan_gang
from extender.placement.backfill import Hold, charge, choose_hold, withheld
from extender.placement.layout import ClusterArrays


class SizeClass(enum.Enum):
    SMALL = "small"
    LARGE = "large"


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """How the pools are cut: by which level, where large starts, how many empty domains are kept."""

    level: int  # the topology level whose domains are the pools
    large_share: float = 0.5  # a gang asking this share of a typical domain or more is large
    reserve: float = 0.0  # domains' worth of room small gangs leave large ones (a hold may still take it)
    depth: int = 1  # how many waiting small gangs hold capacity
    large_depth: int = 1  # how many waiting large gangs hold capacity

    def __post_init__(self) -> None:
        problems = []
        if self.level < 0:
            problems.append(f"level: a topology level index (0 or more), got {self.level}")
        if not 0 < self.large_share <= 1:
            problems.append(f"large_share: in (0, 1], got {self.large_share}")
        if self.reserve < 0:
            problems.append(f"reserve: 0 or more domains' worth of room, got {self.reserve}")
        if self.large_depth < 1:
            problems.append(f"large_depth: at least 1, got {self.large_depth}")
        if self.depth < 1:
            problems.append(
                f"depth: at least 1 (the head's hold is what rules out starvation), got {self.depth}"
            )
        if problems:
            raise ValueError("; ".join(problems))


@dataclasses.dataclass(frozen=True)
class Pools:
    """What the rule keeps between calls: each domain in use's class, and the holds."""

    classes: Mapping[int, SizeClass] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    holds: tuple[Hold, ...] = ()


@dataclasses.dataclass(frozen=True)
class PoolAdmission:
    """The gangs that start now (queue position, plan), and the state for the next call."""

    starts: tuple[tuple[int, Plan], ...]
    pools: Pools


def _demand(arrays: ClusterArrays, request: GangRequest) -> np.ndarray:
    total = np.zeros(arrays.n_res, dtype=np.int64)
    for leaf in request.leaves:
        req = np.asarray(leaf.request, dtype=np.int64)
        total[: req.size] += req * int(leaf.count)
    return total


def _typical_domain(arrays: ClusterArrays, level: int) -> np.ndarray:
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


def _choose_hold(
    arrays: ClusterArrays,
    request: GangRequest,
    key: Hashable,
    cls: SizeClass,
    mine: set[int],
    level: int,
    order: DomainOrder,
    kept: Sequence[Hold],
) -> Hold | None:
    """A small gang holds within the small domains when they could fit it drained, so the reserve
    stays whole; a large one, or a small one they cannot fit, holds anywhere."""
    if cls is SizeClass.SMALL and mine:
        n = arrays.n_rows
        dom = arrays.domains[level, :n]
        inside = copy.copy(arrays)
        inside.schedulable = arrays.schedulable.copy()
        inside.schedulable[:n] &= (dom < 0) | np.isin(dom, np.fromiter(mine, dtype=np.int32, count=len(mine)))
        hold = choose_hold(inside, request, key, order=order, reserved=kept)
        if hold is not None:
            return hold
    return choose_hold(arrays, request, key, order=order, reserved=kept)


def admit(
    arrays: ClusterArrays,
    queue: Sequence[tuple[Hashable, GangRequest]],
    pools: Pools,
    settings: PoolSettings,
    *,
    order: DomainOrder = DomainOrder.TIGHTEST,
) -> PoolAdmission:
    """Which of the waiting gangs (`queue`, in service order) start now, and where, by the module's rule.

    `pools` is what the last call returned (`Pools()` the first time). `arrays` is not changed.
    """
    level = settings.level
    if not 0 <= level < arrays.n_levels:
        raise ValueError(
            f"PoolSettings.level: {level} is not a level of the cluster (it has {arrays.n_levels})"
        )
    arrays.check()
    work = copy.copy(arrays)
    work.free = arrays.free.copy()
    typical = _typical_domain(work, level)
    in_use = _in_use(work, level)
    # a domain that drained empty loses its class; one in use that the rule never opened is small
    classes = {d: pools.classes.get(d, SizeClass.SMALL) for d in in_use}
    empty = _domains(work, level) - in_use
    previous = {h.owner: h for h in pools.holds if h.usable(work)}  # a held node gone: choose again
    starts: list[tuple[int, Plan]] = []
    kept: list[Hold] = []
    holding = dict.fromkeys(SizeClass, 0)
    for pos, (key, request) in enumerate(queue):
        cls = size_class(_demand(work, request), typical, settings.large_share)
        own = previous.get(key)
        with withheld(work, kept) as view:
            mine = {d for d, c in classes.items() if c is cls}
            plan = _plan_within(view, request, level, mine, order)
            if plan.outcome is not Outcome.PLACED and empty:
                large = {d for d, c in classes.items() if c is SizeClass.LARGE}
                may_open = cls is SizeClass.LARGE or _room(view, level, large, empty) - 1 >= settings.reserve
            else:
                may_open = False
            if may_open:
                plan = _plan_within(view, request, level, mine | empty, order)
            depth = settings.large_depth if cls is SizeClass.LARGE else settings.depth
            if plan.outcome is not Outcome.PLACED and holding[cls] < depth:
                if own is None or not holding[cls]:
                    fresh = _choose_hold(view, request, key, cls, mine, level, order, kept)
                    if own is None or (fresh is not None and fresh.deficit(view) < own.deficit(view)):
                        own = fresh
                if own is not None and own.ready(view):
                    plan = own.plan  # class and reserve do not bind the head: it starts where it holds
                elif own is not None:
                    kept.append(own)
                    holding[cls] += 1
        if plan.outcome is Outcome.PLACED:
            charge(work, request, plan)
            starts.append((pos, plan))
            for rows in plan.rows:
                for d in np.unique(work.domains[level, rows]):
                    if int(d) in empty:
                        empty.discard(int(d))
                        classes[int(d)] = cls
    return PoolAdmission(tuple(starts), Pools(MappingProxyType(dict(classes)), tuple(kept)))
