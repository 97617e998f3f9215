"""Plan where a whole gang goes: the typed entry points of the placement core.

Owns the gang-tree walk (which constraint is solved in which scope, trial and rollback) and the
validation of what callers hand in; the loops over nodes live in `kernels.py`. Inputs are
ClusterArrays rows and level indices; names, pods and Kubernetes objects belong to the callers.

How a gang is planned (the rules the reference in tests/placement/naive.py restates):
1. Tree nodes are solved top-down; a node with a required level picks one domain of that level
   inside its parent's scope, a child is solved inside the domain its parent picked.
2. Candidate domains are those whose summed free capacity (schedulable rows eligible for some
   leaf below the node) covers the subtree's total request. They are tried tightest first: the
   smallest min over requested resources of free/request, ties by domain id. Members already
   bound pin a required level to their domain(s). The first candidate where the real fill
   succeeds wins; a failed trial is rolled back.
3. A preferred level (deeper than the required one, or alone) first tries to fit the node's
   subtree into one preferred domain (same order, domains holding bound members first); failing
   that it spills across preferred domains of the scope, most free first, so the gang spans as
   few of them as possible.
4. Inside a scope, constrained descendants are solved first (index order), then the remaining
   leaves are filled together, largest pod first (dominant share of the cluster's largest node),
   each onto the most-allocated rows that fit, a row filled before the next is used.
5. When nothing fits, the report names the domain (of the top-most failing constraint) where a
   flat fill places the most pods, how many, and the resource with the least slack there:
   short_units = total request minus summed free in that column (0 when there is enough in sum
   but no node has room: fragmentation).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from extender.placement import kernels
from extender.placement.layout import ClusterArrays


@dataclasses.dataclass(frozen=True)
class TreeNode:
    """A gang tree node; index 0 is the root and parents come before their children."""

    parent: int  # -1 for the root
    required_level: int = -1  # ClusterArrays level index, -1 = none
    preferred_level: int = -1
    fallback_levels: tuple[int, ...] = ()
    """Levels between the preferred and the required one, nearest the preferred first (KAI tries
    every level from preferred up to required: prefer a rack, else one block, else the zone)."""


@dataclasses.dataclass(frozen=True)
class LeafDemand:
    """Pods of one shape attached to a tree node (several demands may share a node)."""

    tree_node: int
    request: np.ndarray  # int64[n_res], one pod's requests
    count: int  # pods of this leaf to place now (not yet bound)
    eligible: np.ndarray | None = None  # bool[n_rows] rows kube-scheduler passed; None = all schedulable
    bound_rows: np.ndarray | None = None  # int32[k] rows where this leaf's members are already bound


@dataclasses.dataclass(frozen=True)
class GangRequest:
    tree: tuple[TreeNode, ...]
    leaves: tuple[LeafDemand, ...]


class DomainOrder(enum.Enum):
    """Which fitting domain a constraint tries first. Only TIGHTEST is for production; the others
    exist so the quality benchmark can compare against them in one run."""

    TIGHTEST = "tightest"
    FIRST = "first"  # lowest domain id that fits (first-fit)
    RANDOM = "random"  # a random fitting domain


class Outcome(enum.Enum):
    PLACED = "placed"
    NO_FIT = "no-fit"


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """Why the best domain fails."""

    level: int  # -1 when unconstrained (whole scope)
    domain_id: int  # -1 when unconstrained, or when no domain of the level has a usable node
    fits: int  # pods of the gang (below the failing constraint) that fit there
    needed: int
    resource: int  # column with the least slack, -1 when nothing is requested
    short_units: int  # total request minus summed free in that column; 0 means fragmented


@dataclasses.dataclass(frozen=True)
class Plan:
    outcome: Outcome
    rows: tuple[np.ndarray, ...]  # per leaf: int32[count] node rows (PLACED)
    domains: dict[int, tuple[int, int]]  # tree node -> (level, domain_id) for constrained nodes
    shortfall: Shortfall | None  # NO_FIT


# -- validation and flattening ------------------------------------------------------------------


@dataclasses.dataclass
class _Gang:
    tree: tuple[TreeNode, ...]
    requests: np.ndarray  # int64[L, n_res]
    counts: np.ndarray  # int64[L]
    elig: np.ndarray  # bool[M, n_rows] (or [1, 1] unused)
    leaf_elig: np.ndarray  # int32[L]
    subtree_leaves: list[np.ndarray]  # per tree node, int32
    subtree_nodes: list[list[int]]
    loose: list[list[int]]  # leaves filled by the node itself
    constrained_below: list[list[int]]  # nearest constrained descendants
    demand: list[np.ndarray]  # per tree node, int64[n_res]
    needed: list[int]
    pinned_rows: list[np.ndarray]  # per tree node, int32


def _int_vector(value: object, *, field: str, n: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.shape != (n,):
        raise ValueError(f"{field}: expected {n} values (one per resource column), got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{field}: expected integer units, got dtype {arr.dtype}; convert with to_units")
    values = arr.tolist()  # a handful of columns: plain Python beats numpy's reductions here
    if n and min(values) < 0:
        raise ValueError(f"{field}: negative request {values}; requests are >= 0")
    if arr.dtype == np.int64 and arr.flags.c_contiguous and arr.flags.writeable:
        return arr  # read, never written
    # a read-only or strided array would reach numba as another type: compiled anew, mid-call
    return np.array(arr, dtype=np.int64, order="C")


def _compile(arrays: ClusterArrays, request: GangRequest) -> _Gang:
    tree = tuple(request.tree)
    if not tree:
        raise ValueError("GangRequest.tree: empty; a gang has at least its root (TreeNode(parent=-1))")
    n_levels, n_rows, n_res = arrays.n_levels, arrays.n_rows, arrays.n_res
    children: list[list[int]] = [[] for _ in tree]
    for i, node in enumerate(tree):
        if i == 0 and node.parent != -1:
            raise ValueError(f"GangRequest.tree[0].parent: the root's parent must be -1, got {node.parent}")
        if i > 0:
            if not 0 <= node.parent < i:
                raise ValueError(
                    f"GangRequest.tree[{i}].parent: {node.parent} is not an earlier node; list parents first"
                )
            children[node.parent].append(i)
        for field, lv in (
            ("required_level", node.required_level),
            ("preferred_level", node.preferred_level),
            *((f"fallback_levels[{k}]", f) for k, f in enumerate(node.fallback_levels)),
        ):
            if not -1 <= lv < n_levels or (field.startswith("fallback") and lv < 0):
                raise ValueError(
                    f"GangRequest.tree[{i}].{field}: {lv} is not a registered level "
                    f"(0..{n_levels - 1}); register it with ClusterArrays.level(label_key)"
                )
    leaves = tuple(request.leaves)
    n_leaves = len(leaves)
    requests = np.zeros((max(n_leaves, 1), n_res), dtype=np.int64)
    counts = np.zeros(max(n_leaves, 1), dtype=np.int64)
    leaf_elig = np.full(max(n_leaves, 1), -1, dtype=np.int32)
    masks: list[np.ndarray] = []
    direct: list[list[int]] = [[] for _ in tree]
    bound: list[np.ndarray] = []
    for li, leaf in enumerate(leaves):
        where = f"GangRequest.leaves[{li}]"
        if not 0 <= leaf.tree_node < len(tree):
            raise ValueError(f"{where}.tree_node: {leaf.tree_node} is not a node of the tree")
        direct[leaf.tree_node].append(li)
        requests[li] = _int_vector(leaf.request, field=f"{where}.request", n=n_res)
        if isinstance(leaf.count, bool) or not isinstance(leaf.count, int | np.integer) or leaf.count < 0:
            raise ValueError(f"{where}.count: expected a non-negative int, got {leaf.count!r}")
        counts[li] = int(leaf.count)
        if leaf.eligible is not None:
            mask = np.asarray(leaf.eligible)
            if mask.dtype != np.bool_ or mask.shape != (n_rows,):
                raise ValueError(
                    f"{where}.eligible: expected bool[{n_rows}] (one per ClusterArrays row), "
                    f"got {mask.dtype}{list(mask.shape)}"
                )
            leaf_elig[li] = len(masks)
            masks.append(mask)
        rows = np.zeros(0, dtype=np.int32)
        if leaf.bound_rows is not None:
            raw = np.asarray(leaf.bound_rows)
            if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
                raise ValueError(
                    f"{where}.bound_rows: expected int32[k] row numbers, got {raw.dtype}{raw.shape}"
                )
            if raw.size and (raw.min() < 0 or raw.max() >= n_rows):
                raise ValueError(f"{where}.bound_rows: rows must be in 0..{n_rows - 1}, got {raw.tolist()}")
            rows = raw.astype(np.int32)
        bound.append(rows)
    elig = np.ascontiguousarray(np.stack(masks)) if masks else np.zeros((1, 1), dtype=np.bool_)

    constrained = [n.required_level >= 0 or n.preferred_level >= 0 for n in tree]
    subtree_nodes: list[list[int]] = [[i] for i in range(len(tree))]
    for i in range(len(tree) - 1, 0, -1):
        subtree_nodes[tree[i].parent].extend(subtree_nodes[i])
    loose: list[list[int]] = []
    below: list[list[int]] = []
    for t in range(len(tree)):
        own, cons = list(direct[t]), []
        stack = list(reversed(children[t]))
        while stack:
            c = stack.pop()
            if constrained[c]:
                cons.append(c)
            else:
                own.extend(direct[c])
                stack.extend(reversed(children[c]))
        loose.append(sorted(own))
        below.append(sorted(cons))
    sub_leaves = [
        np.array(sorted(li for n in subtree_nodes[t] for li in direct[n]), dtype=np.int32)
        for t in range(len(tree))
    ]
    demand = [
        (counts[s][:, None] * requests[s]).sum(axis=0) if s.size else np.zeros(n_res, np.int64)
        for s in sub_leaves
    ]
    needed = [int(counts[s].sum()) for s in sub_leaves]
    pinned = [
        np.concatenate([bound[li] for li in s]) if s.size else np.zeros(0, dtype=np.int32) for s in sub_leaves
    ]
    return _Gang(
        tree=tree,
        requests=requests,
        counts=counts,
        elig=elig,
        leaf_elig=leaf_elig,
        subtree_leaves=sub_leaves,
        subtree_nodes=subtree_nodes,
        loose=loose,
        constrained_below=below,
        demand=[np.ascontiguousarray(d, dtype=np.int64) for d in demand],
        needed=needed,
        pinned_rows=pinned,
    )


# -- the walk -----------------------------------------------------------------------------------


class _Solver:
    """One plan's trial state: the placement log, the domains chosen so far."""

    def __init__(
        self, arrays: ClusterArrays, gang: _Gang, order: DomainOrder, rng: np.random.Generator | None
    ) -> None:
        self.order = order
        self.rng = rng
        self.a = arrays
        self.g = gang
        total = int(gang.counts.sum())
        # Twice the pods: the no-fit report uses the space past the log as scratch.
        self.log_rows = np.zeros(2 * total + 1, dtype=np.int32)
        self.log_leaves = np.zeros(2 * total + 1, dtype=np.int32)
        self.n_log = 0
        self.chosen: dict[int, tuple[int, int]] = {}
        self._scale: np.ndarray | None = None
        self._no_dom = np.full(1, -1, dtype=np.int32)
        self._no_rank = np.zeros(1, dtype=np.int64)

    # kernels, typed

    def totals(self, t: int, scope: np.ndarray, level: int) -> kernels.DomainTotals:
        return self.totals_over(t, scope, self.a.domains[level], self.a.n_domains(level))

    def totals_over(
        self, t: int, scope: np.ndarray, dom_row: np.ndarray, n_domains: int
    ) -> kernels.DomainTotals:
        """Free capacity per domain of `dom_row` (one id per row) over the scope, for subtree t."""
        return kernels.domain_totals(
            free=self.a.free,
            schedulable=self.a.schedulable,
            dom_row=dom_row,
            n_domains=n_domains,
            scope=scope,
            demand=self.g.demand[t],
            elig=self.g.elig,
            leaf_elig=self.g.leaf_elig,
            group_leaves=self.g.subtree_leaves[t],
            requests=self.g.requests,
            log_rows=self.log_rows,
            log_leaves=self.log_leaves,
            n_log=self.n_log,
        )

    def pinned(self, t: int, level: int) -> np.ndarray:
        mask = np.zeros(self.a.n_domains(level), dtype=np.bool_)
        rows = self.g.pinned_rows[t]
        if rows.size:
            ids = self.a.domains[level, rows]
            mask[ids[ids >= 0]] = True
        return mask

    def fill_inputs(self) -> dict[str, Any]:
        """The arrays every fill reads: the cluster's, the gang's and the placement log so far."""
        return {
            "free": self.a.free,
            "allocatable": self.a.allocatable,
            "scarce": self.a.scarce,
            "schedulable": self.a.schedulable,
            "requests": self.g.requests,
            "counts": self.g.counts,
            "elig": self.g.elig,
            "leaf_elig": self.g.leaf_elig,
            "log_rows": self.log_rows,
            "log_leaves": self.log_leaves,
            "n_log": self.n_log,
        }

    def fill(self, scope: np.ndarray, leaves: np.ndarray, spill: tuple[int, np.ndarray] | None) -> bool:
        want = int(self.g.counts[leaves].sum())
        start = self.n_log
        spill_dom, rank = (self.a.domains[spill[0]], spill[1]) if spill else (self._no_dom, self._no_rank)
        self.n_log = kernels.fill(
            **self.fill_inputs(),
            scope=scope,
            leaves=leaves,
            spill_dom=spill_dom,
            dom_rank=rank,
            use_rank=spill is not None,
        )
        return self.n_log - start == want

    def largest_first(self, leaves: list[int]) -> np.ndarray:
        live = [li for li in leaves if self.g.counts[li] > 0]
        if len(live) > 1:
            if self._scale is None:
                self._scale = self.a.allocatable[: self.a.n_rows].max(axis=0, initial=0)
            scale = self._scale

            def size(li: int) -> float:
                req = self.g.requests[li]
                return max((req[j] / scale[j] for j in range(req.shape[0]) if scale[j] > 0), default=0.0)

            live.sort(key=lambda li: (-size(li), li))
        return np.array(live, dtype=np.int32)

    def policy(self, order: np.ndarray) -> np.ndarray:
        if self.order is DomainOrder.FIRST:
            return np.sort(order)
        if self.order is DomainOrder.RANDOM:
            return (self.rng or np.random.default_rng()).permutation(order)
        return order

    def rollback(self, mark: int, t: int) -> None:
        self.n_log = mark
        for n in self.g.subtree_nodes[t]:
            self.chosen.pop(n, None)

    # the rules of the module docstring

    def solve(self, t: int, scope: np.ndarray) -> bool:
        node = self.g.tree[t]
        req = node.required_level
        if self.g.needed[t] == 0:
            if req >= 0:
                pins = np.flatnonzero(self.pinned(t, req))
                if pins.size:
                    self.chosen[t] = (req, int(pins[0]))
            return True
        if req < 0:
            return self.place_preferred(t, scope, required=-1)
        dt = self.totals(t, scope, req)
        pinned = self.pinned(t, req)
        order, _ = kernels.order_domains(
            dt,
            demand=self.g.demand[t],
            pinned=pinned,
            restrict=bool(pinned.any()),
            descending=False,
            include_unfit=False,
        )
        for d in self.policy(order):
            mark = self.n_log
            if self.place_preferred(t, dt.rows(int(d)), required=req):
                self.chosen[t] = (req, int(d))
                return True
            self.rollback(mark, t)
        return False

    def place_preferred(self, t: int, scope: np.ndarray, *, required: int) -> bool:
        pref = self.g.tree[t].preferred_level
        if pref < 0 or pref == required:
            return self.place_inside(t, scope, spill=None)
        dt = self.totals(t, scope, pref)
        pinned = self.pinned(t, pref)
        order, _ = kernels.order_domains(
            dt, demand=self.g.demand[t], pinned=pinned, restrict=False, descending=False, include_unfit=False
        )
        for d in self.policy(order):
            mark = self.n_log
            if self.place_inside(t, dt.rows(int(d)), spill=None):
                if required < 0:
                    self.chosen[t] = (pref, int(d))
                return True
            self.rollback(mark, t)
        spread, _ = kernels.order_domains(
            dt, demand=self.g.demand[t], pinned=pinned, restrict=False, descending=True, include_unfit=True
        )
        rank = np.full(max(self.a.n_domains(pref), 1), spread.shape[0], dtype=np.int64)
        rank[spread] = np.arange(spread.shape[0], dtype=np.int64)
        # relax one level at a time: the whole subtree in one domain of the next level up, still
        # packed into as few preferred domains as it can
        for level in self.g.tree[t].fallback_levels:
            ft = self.totals(t, scope, level)
            forder, _ = kernels.order_domains(
                ft,
                demand=self.g.demand[t],
                pinned=self.pinned(t, level),
                restrict=False,
                descending=False,
                include_unfit=False,
            )
            for d in self.policy(forder):
                mark = self.n_log
                if self.place_inside(t, ft.rows(int(d)), spill=(pref, rank)):
                    return True
                self.rollback(mark, t)
        return self.place_inside(t, scope, spill=(pref, rank))

    def place_inside(self, t: int, scope: np.ndarray, *, spill: tuple[int, np.ndarray] | None) -> bool:
        for c in self.g.constrained_below[t]:
            if not self.solve(c, scope):
                return False
        leaves = self.largest_first(self.g.loose[t])
        if leaves.size == 0:
            return True
        return self.fill(scope, leaves, spill)

    # the no-fit report

    def shortfall(self, t: int, scope: np.ndarray) -> Shortfall:
        level = self.g.tree[t].required_level
        needed = self.g.needed[t]
        leaves = self.largest_first([int(x) for x in self.g.subtree_leaves[t]])
        if level >= 0:
            dt = self.totals(t, scope, level)
            pinned = self.pinned(t, level)
        else:
            whole = np.zeros(self.a.capacity, dtype=np.int32)  # the scope as one domain
            dt = self.totals_over(t, scope, whole, 1)
            pinned = np.zeros(1, dtype=np.bool_)
        fits = kernels.fits_per_domain(dt, **self.fill_inputs(), leaves=leaves)
        usable = dt.row_counts > 0
        if pinned.any():
            usable &= pinned
        best, best_fits = -1, -1
        for d in np.flatnonzero(usable):
            if fits[d] > best_fits:
                best, best_fits = int(d), int(fits[d])
        report_level = level if level >= 0 else -1
        if best < 0:
            return self._short(report_level, -1, 0, needed, np.zeros_like(self.g.demand[t]), t)
        if best_fits >= needed:
            # Enough room in sum and in a flat fill: a constraint further down is what fails.
            sub = dt.rows(best)
            mark = self.n_log
            for c in self.g.constrained_below[t]:
                if not self.solve(c, sub):
                    report = self.shortfall(c, sub)
                    self.rollback(mark, t)
                    return report
            self.rollback(mark, t)
        return self._short(report_level, best if level >= 0 else -1, best_fits, needed, dt.totals[best], t)

    def _short(
        self, level: int, domain_id: int, fits: int, needed: int, totals: np.ndarray, t: int
    ) -> Shortfall:
        demand = self.g.demand[t]
        resource, worst, short = -1, -np.inf, 0
        for j in range(demand.shape[0]):
            if demand[j] > 0:
                gap = (int(demand[j]) - int(totals[j])) / int(demand[j])
                if gap > worst:
                    resource, worst, short = j, gap, max(int(demand[j]) - int(totals[j]), 0)
        return Shortfall(level, domain_id, fits, needed, resource, short)

    def rows_per_leaf(self) -> tuple[np.ndarray, ...]:
        n_leaves = self.g.counts.shape[0]
        rows = self.log_rows[: self.n_log]
        which = self.log_leaves[: self.n_log]
        return tuple(np.ascontiguousarray(rows[which == li]) for li in range(n_leaves))


def plan_gang(
    arrays: ClusterArrays,
    request: GangRequest,
    *,
    order: DomainOrder = DomainOrder.TIGHTEST,
    rng: np.random.Generator | None = None,
) -> Plan:
    """A node row for every pod the request asks to place now, or the reason none fits.

    `order` and `rng` are for comparisons (bench/quality.py); callers leave the defaults.
    """
    arrays.check()
    gang = _compile(arrays, request)
    solver = _Solver(arrays, gang, order, rng)
    scope = np.arange(arrays.n_rows, dtype=np.int32)
    n_leaves = len(request.leaves)
    if solver.solve(0, scope):
        rows = solver.rows_per_leaf()[:n_leaves]
        return Plan(Outcome.PLACED, rows, dict(solver.chosen), None)
    solver.rollback(0, 0)
    report = solver.shortfall(0, scope)
    empty = tuple(np.zeros(0, dtype=np.int32) for _ in range(n_leaves))
    return Plan(Outcome.NO_FIT, empty, {}, report)


# -- per-node answers for filter and prioritize -------------------------------------------------


def _rows(arrays: ClusterArrays, rows: np.ndarray, *, field: str) -> np.ndarray:
    arr = np.asarray(rows)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{field}: expected a 1-d array of row numbers, got {arr.dtype}{list(arr.shape)}")
    if arr.size and (arr.min() < 0 or arr.max() >= arrays.n_rows):
        raise ValueError(f"{field}: rows must be in 0..{arrays.n_rows - 1}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def fit_mask(arrays: ClusterArrays, rows: np.ndarray | None, request: np.ndarray) -> np.ndarray:
    """bool[k]: whether `request` fits free[rows[i]]; rows None: every row, in order (nothing to check)."""
    arrays.check()
    return kernels.fit_mask(
        free=arrays.free,
        rows=np.arange(arrays.n_rows, dtype=np.int32) if rows is None else _rows(arrays, rows, field="rows"),
        request=_int_vector(request, field="request", n=arrays.n_res),
    )


def score_nodes(
    arrays: ClusterArrays,
    rows: np.ndarray,
    request: np.ndarray,
    *,
    anchor_rows: np.ndarray | None = None,
    anchor_levels: Sequence[int] = (),
) -> np.ndarray:
    """int64[k] in 0..10: most-allocated after placing `request`, blended with closeness.

    Closeness counts the deepest of `anchor_levels` (listed outermost first, e.g. [block, rack])
    at which a row shares a domain with one of `anchor_rows` (the gang's members already placed).
    Rows where the request does not fit score 0.
    """
    arrays.check()
    levels = np.asarray(list(anchor_levels), dtype=np.int64)
    if levels.size and (levels.min() < 0 or levels.max() >= arrays.n_levels):
        raise ValueError(
            f"anchor_levels: {levels.tolist()} are not all registered levels (0..{arrays.n_levels - 1})"
        )
    anchors = (
        np.zeros(0, dtype=np.int32)
        if anchor_rows is None
        else _rows(arrays, anchor_rows, field="anchor_rows")
    )
    domains = arrays.domains if arrays.n_levels else np.full((1, arrays.capacity), -1, dtype=np.int32)
    return kernels.score_nodes(
        free=arrays.free,
        allocatable=arrays.allocatable,
        scarce=arrays.scarce,
        domains=domains,
        rows=_rows(arrays, rows, field="rows"),
        request=_int_vector(request, field="request", n=arrays.n_res),
        anchor_rows=anchors,
        anchor_levels=levels,
    )


# -- node names to rows -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NameIndex:
    """Node names by row, indexed once per change of the node set, so that a list of offered names
    maps to rows straight from the request's bytes (`rows_of_names`), without a string per name.

    A name is looked up by a 63-bit fingerprint of its bytes, not compared byte by byte: on a busy
    machine the comparison's reads, scattered over every name, cost twice the lookup. Two indexed
    names never pass for each other (a shared fingerprint makes the lookup decline); a name not
    indexed passes for an indexed one only if their fingerprints collide, about 2^-63 per pair
    (at 50,000 nodes, once in some 10^14 unknown names)."""

    fps: np.ndarray  # int64[2^m >= 2k]: open addressing by fingerprint, 0 empty
    slot_rows: np.ndarray  # int32[2^m]: the row of the name in that slot; -2 shared by two names


def index_names(row_names: Mapping[int, str]) -> NameIndex:
    rows = np.fromiter(row_names, dtype=np.int32, count=len(row_names))
    encoded = [name.encode() for name in row_names.values()]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    chars = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    fps, slot_rows = kernels.index_names(chars=chars, offsets=offsets, rows=rows)
    return NameIndex(fps=fps, slot_rows=slot_rows)


def rows_of_names(index: NameIndex, array: bytes) -> np.ndarray | None:
    """int32[k]: the row of each string of `array`, the raw bytes of a JSON array of strings, in
    order, -1 where no indexed name equals it. None when `array` is not such an array, or writes a
    string with an escape sequence: decode it and map the strings instead."""
    return kernels.rows_of_names(
        array=np.frombuffer(array, dtype=np.uint8), fps=index.fps, slot_rows=index.slot_rows
    )


def warm_up() -> float:
    """Compile or load every kernel on tiny arrays (call before reporting ready); seconds taken."""
    started = time.perf_counter()
    arrays = ClusterArrays(resource_names=["cpu", "gpu"], capacity=16)
    rack, block = arrays.level("rack"), arrays.level("block")
    for i in range(8):
        arrays.add_row(
            allocatable=[4000, 2], labels={"rack": f"r{i // 2}", "block": f"b{i // 4}"}, schedulable=True
        )
    eligible = np.ones(arrays.n_rows, dtype=np.bool_)
    request = GangRequest(
        tree=(TreeNode(-1, required_level=block), TreeNode(0, preferred_level=rack)),
        leaves=(
            LeafDemand(1, np.array([1000, 1], dtype=np.int64), 5, eligible=eligible),
            LeafDemand(0, np.array([500, 0], dtype=np.int64), 1, bound_rows=np.array([0], dtype=np.int32)),
        ),
    )
    plan_gang(arrays, request)
    too_big = GangRequest(
        tree=(TreeNode(-1, required_level=rack),), leaves=(LeafDemand(0, np.array([1000, 1], np.int64), 9),)
    )
    plan_gang(arrays, too_big)
    plan_gang(
        arrays, GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, np.array([1000, 1], np.int64), 99),))
    )
    rows = np.arange(arrays.n_rows, dtype=np.int32)
    fit_mask(arrays, rows, np.array([1000, 1], dtype=np.int64))
    score_nodes(
        arrays, rows, np.array([1000, 1], dtype=np.int64), anchor_rows=rows[:1], anchor_levels=[block, rack]
    )
    rows_of_names(index_names({0: "a", 1: "b"}), b'["b", "a","c"]')
    return time.perf_counter() - started
