"""Pooling: the size-class pools of extender.placement.pools in the live service.

Owns what the rule reads off the cluster, cached: the typical domain of each pool level, each
gang's demand and the rows where members of large gangs run, are binding or are planned. Nothing
here is remembered beyond a cache of the cluster: a restarted service reads the same classes.

Which level is the pool level: the one `--pool-label` names, else each gang's own required level
(a gang that must fit in one rack packs into racks that host gangs of its size). A gang with
neither, a gang whose members must be alone on their nodes, a gang with members placed already
(they fix its domain), and every plain pod, are not pooled.
Pools need holds: a gang its pool keeps waiting is bounded by the hold it gets as head, so with
holds off a gang plans where it fits, as before.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from extender.model.keys import GroupKey
from extender.placement import api as placement
from extender.placement import pools
from extender.placement.layout import ClusterArrays
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore

DERIVE_INTERVAL_S = 1.0
"""How often, at most, the large rows are read again from every gang while the cluster changes; a
large gang this service plans is marked at once (`note_planned`)."""


@dataclasses.dataclass(frozen=True)
class Pooled:
    """A pooled plan, and what the filter says and notes of it."""

    fit: pools.PoolFit
    plan: placement.Plan
    size: pools.SizeClass
    level: int
    on_hold: bool = False  # started on its ready hold, outside its pool

    @property
    def waits(self) -> bool:
        """It fits only outside its pool and holds no ready hold: it does not start now."""
        return self.fit is pools.PoolFit.OUTSIDE and not self.on_hold


class PoolMap:
    def __init__(self, store: ClusterStore, ledger: GangLedger) -> None:
        self.store = store
        self.ledger = ledger
        hs = ledger.holds.settings
        self.settings = pools.PoolSettings(large_share=hs.large_share, reserve=hs.pool_reserve)
        self._typical: dict[int, tuple[int, np.ndarray]] = {}  # level -> (node_gen, median domain)
        self._demand: dict[GroupKey, tuple[int, np.ndarray]] = {}  # gang -> (members, summed requests)
        self._large: dict[int, np.ndarray] = {}  # level -> rows of large gangs' members (count)
        self._derived: tuple[int, float] = (-1, float("-inf"))  # (change_gen, when)
        self._classes: dict[int, tuple[tuple[int, int, int], dict[int, pools.SizeClass]]] = {}
        self._marks = 0  # bumps when a plan marks rows large
        self._derivations = 0  # bumps when the large rows of a level are derived again

    @property
    def enabled(self) -> bool:
        hs = self.ledger.holds.settings
        return hs.enabled and hs.pools

    # ----------------------------------------------------------------- reads
    def level_of(self, request: placement.GangRequest) -> int:
        """The pool level for this gang, or -1: not pooled."""
        return self._level(request.tree[0].required_level if request.tree else -1)

    def _level(self, required_level: int) -> int:
        if not self.enabled:
            return -1
        label = self.ledger.holds.settings.pool_label
        if label:
            return self.store.arrays.level(label)
        return required_level

    def class_of(self, gang: GroupKey, required_level: int) -> tuple[int, pools.SizeClass] | None:
        """The gang's pool level and size class, its members' summed requests against a typical domain
        of that level (what /debug says); None: not pooled."""
        level = self._level(required_level)
        if not 0 <= level < self.store.arrays.n_levels:
            return None
        demand = self._gang_demand(gang)
        return level, pools.size_class(demand, self.typical(level), self.settings.large_share)

    def typical(self, level: int) -> np.ndarray:
        hit = self._typical.get(level)
        if hit is None or hit[0] != self.store.node_gen:
            hit = (self.store.node_gen, pools.typical_domain(self.store.arrays, level))
            self._typical[level] = hit
        return hit[1]

    def size_of(self, request: placement.GangRequest, level: int) -> pools.SizeClass:
        demand = pools.gang_demand(self.store.arrays, request)
        return pools.size_class(demand, self.typical(level), self.settings.large_share)

    def classes(self, level: int) -> dict[int, pools.SizeClass]:
        """Each domain in use at `level` and its class, read off the store's own arrays (the holds are
        an overlay on a plan's view, never in use); kept while nothing changed."""
        large = self.large_rows(level)
        # the large rows may be derived again while change_gen stands (a derivation put off by the
        # interval), so their own count is in the key
        key = (self.store.change_gen, self._marks, self._derivations)
        hit = self._classes.get(level)
        if hit is None or hit[0] != key:
            arrays = self.store.arrays
            free = self.ledger.holds.unheld_free(arrays)
            if free is not arrays.free:  # inside a plan's view: the holds are not in use
                arrays = copy.copy(arrays)
                arrays.free = free
            hit = self._classes[level] = (key, pools.classes_of(arrays, level, large > 0))
        return hit[1]

    def large_rows(self, level: int) -> np.ndarray:
        """int32[capacity]: members of gangs large at `level` per row (bound, binding or planned)."""
        self._derive_if_due()
        arrays = self.store.arrays
        rows = self._large.get(level)
        if rows is None or rows.size != arrays.capacity:
            rows = self._large[level] = self._derive_level(level)
            self._derivations += 1
        return rows

    def allowed(self, request: placement.GangRequest) -> tuple[np.ndarray, pools.SizeClass] | None:
        """Where the gang may start now (bool by row) and its class; None: not pooled."""
        level = self.level_of(request)
        if level < 0:
            return None
        size = self.size_of(request, level)
        return pools.allowed_rows(self.store.arrays, level, self.classes(level), size, self.settings), size

    # ----------------------------------------------------------------- the plan
    def plan(self, view: ClusterArrays, request: placement.GangRequest, gang: GroupKey) -> Pooled | None:
        """The gang's plan by the pool rule over `view` (the cluster as the gang sees it, holds ranked
        before it taken out); a holder whose pool has no room starts on its ready hold. None: not
        pooled (plan it as before)."""
        level = self.level_of(request)
        if level < 0 or not 0 <= level < view.n_levels:
            return None
        if any(leaf.bound_rows is not None and len(leaf.bound_rows) for leaf in request.leaves):
            return None  # members placed already fix its domain: the pool has no say
        size = self.size_of(request, level)
        pooled = pools.plan_in_pools(view, request, level, self.classes(level), size, self.settings)
        if pooled.fit in (pools.PoolFit.IN_POOL, pools.PoolFit.OPENED):
            return Pooled(pooled.fit, pooled.plan, size, level)
        held = self.ledger.holds.of(gang)
        if held is not None and held.hold.ready(view):
            plan = pools.plan_on_hold(view, request, held.hold)
            if plan.outcome is placement.Outcome.PLACED:
                return Pooled(pooled.fit, plan, size, level, on_hold=True)
        return Pooled(pooled.fit, pooled.plan, size, level)

    def note_planned(self, pooled: Pooled) -> None:
        """A large gang was planned: its rows are large now, not at the next derivation (a small gang
        planned a moment later must not take the rest of the domain it opened)."""
        if pooled.size is not pools.SizeClass.LARGE:
            return
        rows = self.large_rows(pooled.level)
        for r in pooled.plan.rows:
            rows[np.asarray(r, dtype=np.int64)] += 1
        self._marks += 1

    def version(self) -> tuple[int, float, int]:
        """Moves whenever the classes may have: the large rows read again (at most every
        DERIVE_INTERVAL_S while the cluster changes), or a plan marking rows large. A gang's answer
        kept while nothing it read changed (a pool wait among them) keys on it: the pools may let
        it start now though no pod of it, no release and no hold moved."""
        self._derive_if_due()
        return (self._derived[0], self._derived[1], self._marks)

    # ----------------------------------------------------------------- the cache
    def _derive_if_due(self) -> None:
        gen, when = self._derived
        now = self.ledger.clock()
        if gen != self.store.change_gen and now - when >= DERIVE_INTERVAL_S:
            self._large.clear()
            self._derived = (self.store.change_gen, now)

    def _gang_demand(self, key: GroupKey) -> np.ndarray:
        """The gang's summed requests (int64[n_res]), summed again only when its member count changed:
        a pass over every gang costs O(gangs), not O(pods), unless gangs changed."""
        size = self.store.group_size(key)
        hit = self._demand.get(key)
        if hit is None or hit[0] != size:
            total = np.zeros(self.store.arrays.n_res, dtype=np.int64)
            for rec in self.store.group_members(key):
                vec, _ = self.store.request_vector(rec.requests)
                total[: vec.size] += vec[: total.size]
            hit = self._demand[key] = (size, total)
        total = hit[1]
        n_res = self.store.arrays.n_res  # a resource name new since it was summed: nothing of it asked
        return total if total.size >= n_res else np.pad(total, (0, n_res - total.size))

    def _derive_level(self, level: int) -> np.ndarray:
        store = self.store
        arrays = store.arrays
        out = np.zeros(arrays.capacity, dtype=np.int32)
        typical = self.typical(level)
        keys = store.gang_keys()
        for key in set(self._demand) - set(keys):
            del self._demand[key]
        for key in keys:
            demand = self._gang_demand(key)
            if pools.size_class(demand, typical, self.settings.large_share) is not pools.SizeClass.LARGE:
                continue
            for rec in store.group_members(key):
                row = rec.bound_row
                if row < 0:
                    res = store.reservations.get(rec.key)
                    row = res.row if res is not None else -1
                if 0 <= row < out.size:
                    out[row] += 1
        return out

    def text(self, pooled: Pooled, gang: GroupKey, needed: int) -> str:
        """Why a gang its pool keeps waiting does not start where it would fit."""
        arrays = self.store.arrays
        level_key = arrays.level_key(pooled.level)
        short = level_key.rsplit("/", 1)[-1].removeprefix("topology-") or level_key
        where = ", ".join(sorted(arrays.domain_name(pooled.level, d) for d in _domains(arrays, pooled)))
        kept = "for large gangs" if pooled.size is pools.SizeClass.SMALL else "for small gangs"
        return (
            f"gang {gang} ({needed} pods, {pooled.size.value} for a {short}) waits for room in the "
            f"{short}s of {pooled.size.value} gangs: it would fit only in {short} {where}, kept {kept} "
            "(size-class pools); it starts there only once it holds it"
        )


def _domains(arrays: ClusterArrays, pooled: Pooled) -> set[int]:
    out: set[int] = set()
    for rows in pooled.plan.rows:
        for d in arrays.domains[pooled.level, np.asarray(rows, dtype=np.int64)]:
            if d >= 0:
                out.add(int(d))
    return out
