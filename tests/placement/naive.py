"""A slow, plain-Python planner restating the rules of extender/placement/api.py.

No numpy in the algorithm: rows are dicts of Python ints, domains are found by scanning, the
trial state is a list of (row, leaf) placements that is truncated to roll back. Tests compare
its plans with the kernels' on random clusters; the benchmarks time it as the reference.
"""

from __future__ import annotations

import math

import numpy as np

from extender.placement.api import GangRequest, Outcome, Plan, Shortfall
from extender.placement.layout import ClusterArrays


class _Naive:
    def __init__(self, arrays: ClusterArrays, request: GangRequest) -> None:
        n = arrays.n_rows
        self.n_res = arrays.n_res
        self.free = arrays.free[:n].tolist()
        self.alloc = arrays.allocatable[:n].tolist()
        self.scarce = arrays.scarce.tolist()
        self.sched = arrays.schedulable[:n].tolist()
        self.domains = arrays.domains[:, :n].tolist()
        self.tree = list(request.tree)
        self.leaves = list(request.leaves)
        self.req = [[int(x) for x in leaf.request] for leaf in self.leaves]
        self.count = [int(leaf.count) for leaf in self.leaves]
        self.elig = [
            None if leaf.eligible is None else [bool(x) for x in leaf.eligible] for leaf in self.leaves
        ]
        self.bound = [
            [] if leaf.bound_rows is None else [int(x) for x in leaf.bound_rows] for leaf in self.leaves
        ]
        self.children = {
            t: [c for c in range(len(self.tree)) if self.tree[c].parent == t] for t in range(len(self.tree))
        }
        self.log: list[tuple[int, int]] = []
        self._placed: dict[int, list[int]] | None = None
        self._placed_len = -1
        self.chosen: dict[int, tuple[int, int]] = {}
        self.n_rows = n

    # tree facts

    def constrained(self, t):
        return self.tree[t].required_level >= 0 or self.tree[t].preferred_level >= 0

    def subtree(self, t):
        out = [t]
        for c in self.children[t]:
            out += self.subtree(c)
        return out

    def subtree_leaves(self, t):
        nodes = set(self.subtree(t))
        return [li for li, leaf in enumerate(self.leaves) if leaf.tree_node in nodes]

    def loose_and_below(self, t):
        loose = [li for li, leaf in enumerate(self.leaves) if leaf.tree_node == t]
        below = []
        todo = list(self.children[t])
        while todo:
            c = todo.pop()
            if self.constrained(c):
                below.append(c)
            else:
                loose += [li for li, leaf in enumerate(self.leaves) if leaf.tree_node == c]
                todo += self.children[c]
        return sorted(loose), sorted(below)

    def demand(self, t):
        return [
            sum(self.count[li] * self.req[li][j] for li in self.subtree_leaves(t)) for j in range(self.n_res)
        ]

    def needed(self, t):
        return sum(self.count[li] for li in self.subtree_leaves(t))

    def pinned(self, t, level):
        return {self.domains[level][r] for li in self.subtree_leaves(t) for r in self.bound[li]} - {-1}

    # capacity as the trial sees it

    def free_now(self, r):
        """free[r] minus this plan's placements there (the trial's view of the node)."""
        f = list(self.free[r])
        for li in self.placed_on().get(r, ()):
            for j in range(self.n_res):
                f[j] -= self.req[li][j]
        return f

    def placed_on(self):
        if self._placed is None or self._placed_len != len(self.log):
            self._placed = {}
            for row, li in self.log:
                self._placed.setdefault(row, []).append(li)
            self._placed_len = len(self.log)
        return self._placed

    def eligible(self, r, li):
        return self.sched[r] and (self.elig[li] is None or self.elig[li][r])

    def domain_table(self, t, scope, level):
        """{domain: (rows, summed free per column)} over rows eligible for some leaf of t."""
        group = self.subtree_leaves(t)
        dem = self.demand(t)
        table = {}
        for r in scope:
            d = self.domains[level][r]
            if d < 0 or not any(self.eligible(r, li) for li in group):
                continue
            rows, tot = table.setdefault(d, ([], [0] * self.n_res))
            rows.append(r)
            f = self.free_now(r)
            for j in range(self.n_res):
                if dem[j] > 0:
                    tot[j] += max(self.free[r][j], 0) - (self.free[r][j] - f[j])
        return table

    def ratio(self, tot, rows, dem):
        qs = [tot[j] / dem[j] for j in range(self.n_res) if dem[j] > 0]
        return min(qs) if qs else float(len(rows))

    def ordered(self, table, dem, pins, *, restrict, descending, include_unfit):
        keyed = []
        for d, (rows, tot) in table.items():
            fits = all(tot[j] >= dem[j] for j in range(self.n_res) if dem[j] > 0)
            if not fits and not include_unfit:
                continue
            if restrict and d not in pins:
                continue
            q = self.ratio(tot, rows, dem)
            keyed.append((0 if d in pins else 1, -q if descending else q, d))
        return [d for _, _, d in sorted(keyed)]

    # the walk

    def forget(self, mark):
        del self.log[mark:]
        self._placed = None

    def rollback(self, mark, t):
        self.forget(mark)
        for n in self.subtree(t):
            self.chosen.pop(n, None)

    def solve(self, t, scope):
        req = self.tree[t].required_level
        if self.needed(t) == 0:
            if req >= 0 and self.pinned(t, req):
                self.chosen[t] = (req, min(self.pinned(t, req)))
            return True
        if req < 0:
            return self.place_preferred(t, scope, -1)
        table = self.domain_table(t, scope, req)
        pins = self.pinned(t, req)
        for d in self.ordered(
            table, self.demand(t), pins, restrict=bool(pins), descending=False, include_unfit=False
        ):
            mark = len(self.log)
            if self.place_preferred(t, table[d][0], req):
                self.chosen[t] = (req, d)
                return True
            self.rollback(mark, t)
        return False

    def place_preferred(self, t, scope, required):
        pref = self.tree[t].preferred_level
        if pref < 0 or pref == required:
            return self.place_inside(t, scope, None)
        table = self.domain_table(t, scope, pref)
        pins = self.pinned(t, pref)
        dem = self.demand(t)
        for d in self.ordered(table, dem, pins, restrict=False, descending=False, include_unfit=False):
            mark = len(self.log)
            if self.place_inside(t, table[d][0], None):
                if required < 0:
                    self.chosen[t] = (pref, d)
                return True
            self.rollback(mark, t)
        spread = self.ordered(table, dem, pins, restrict=False, descending=True, include_unfit=True)
        rank = {d: i for i, d in enumerate(spread)}
        for level in self.tree[t].fallback_levels:
            ftable = self.domain_table(t, scope, level)
            fpins = self.pinned(t, level)
            for d in self.ordered(ftable, dem, fpins, restrict=False, descending=False, include_unfit=False):
                mark = len(self.log)
                if self.place_inside(t, ftable[d][0], (pref, rank)):
                    return True
                self.rollback(mark, t)
        return self.place_inside(t, scope, (pref, rank))

    def place_inside(self, t, scope, spill):
        loose, below = self.loose_and_below(t)
        for c in below:
            if not self.solve(c, scope):
                return False
        want = sum(self.count[li] for li in loose)
        return self.fill(scope, self.largest_first(loose), spill) == want

    def largest_first(self, leaves):
        live = [li for li in leaves if self.count[li] > 0]
        if len(live) < 2:
            return live
        scale = [max([self.alloc[r][j] for r in range(self.n_rows)], default=0) for j in range(self.n_res)]

        def size(li):
            return max((self.req[li][j] / scale[j] for j in range(self.n_res) if scale[j] > 0), default=0.0)

        return sorted(live, key=lambda li: (-size(li), li))

    def fill(self, scope, leaves, spill):
        """Greedy fill; returns pods placed (appended to the log)."""
        local = {r: self.free_now(r) for r in scope}
        placed = 0
        for li in leaves:
            need = self.count[li]
            req = self.req[li]
            keyed = []
            for r in scope:
                f = local[r]
                if not self.eligible(r, li) or any(f[j] < req[j] for j in range(self.n_res)):
                    continue
                u = 0.0
                for j in range(self.n_res):
                    if req[j] > 0 and self.alloc[r][j] > 0:
                        u += f[j] / self.alloc[r][j]
                if any(self.scarce[j] and req[j] == 0 and self.alloc[r][j] > 0 for j in range(self.n_res)):
                    u += self.n_res + 1.0
                rank = 0
                if spill is not None:
                    d = self.domains[spill[0]][r]
                    rank = spill[1].get(d, len(spill[1])) if d >= 0 else 1 << 40
                keyed.append((rank, u, r))
            for _, _, r in sorted(keyed):
                while need > 0 and all(local[r][j] >= req[j] for j in range(self.n_res)):
                    for j in range(self.n_res):
                        local[r][j] -= req[j]
                    self.log.append((r, li))
                    need -= 1
                    placed += 1
        return placed

    # the no-fit report

    def shortfall(self, t, scope):
        level = self.tree[t].required_level
        needed = self.needed(t)
        dem = self.demand(t)
        leaves = self.largest_first(self.subtree_leaves(t))
        if level >= 0:
            table = self.domain_table(t, scope, level)
            pins = self.pinned(t, level)
        else:
            group = self.subtree_leaves(t)
            rows = [r for r in scope if any(self.eligible(r, li) for li in group)]
            tot = [0] * self.n_res
            for r in rows:
                f = self.free_now(r)
                for j in range(self.n_res):
                    if dem[j] > 0:
                        tot[j] += max(self.free[r][j], 0) - (self.free[r][j] - f[j])
            table = {0: (rows, tot)} if rows else {}
            pins = set()
        best, best_fits = -1, -1
        for d in sorted(table):
            if pins and d not in pins:
                continue
            mark = len(self.log)
            fits = self.fill(table[d][0], leaves, None)
            self.forget(mark)
            if fits > best_fits:
                best, best_fits = d, fits
        if best < 0:
            return self.short(level, -1, 0, needed, dem, [0] * self.n_res)
        if best_fits >= needed:
            mark = len(self.log)
            for c in self.loose_and_below(t)[1]:
                if not self.solve(c, table[best][0]):
                    report = self.shortfall(c, table[best][0])
                    self.rollback(mark, t)
                    return report
            self.rollback(mark, t)
        return self.short(level, best if level >= 0 else -1, best_fits, needed, dem, table[best][1])

    def short(self, level, domain_id, fits, needed, dem, tot):
        resource, worst, short = -1, -math.inf, 0
        for j in range(self.n_res):
            if dem[j] > 0:
                gap = (dem[j] - tot[j]) / dem[j]
                if gap > worst:
                    resource, worst, short = j, gap, max(dem[j] - tot[j], 0)
        return Shortfall(level, domain_id, fits, needed, resource, short)


def plan_gang(arrays: ClusterArrays, request: GangRequest) -> Plan:
    """Same contract as extender.placement.plan_gang, in plain Python."""
    naive = _Naive(arrays, request)
    scope = list(range(arrays.n_rows))
    if naive.solve(0, scope):
        rows = tuple(
            np.array([r for r, li in naive.log if li == k], dtype=np.int32)
            for k in range(len(request.leaves))
        )
        return Plan(Outcome.PLACED, rows, dict(naive.chosen), None)
    naive.rollback(0, 0)
    report = naive.shortfall(0, scope)
    return Plan(Outcome.NO_FIT, tuple(np.zeros(0, np.int32) for _ in request.leaves), {}, report)
