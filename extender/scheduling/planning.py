"""Planning: turn a gang's members into a placement request, and a placement into an assignment.

Pure computation over the store and the ledger's current plans; nothing here holds capacity
(the ledger's `plan` and `move` do, with what this returns).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from extender.gang.entry import PlannedPod
from extender.model import podaffinity
from extender.model.group import GroupSpec
from extender.model.keys import PodKey
from extender.placement import api as placement
from extender.placement.layout import ClusterArrays
from extender.scheduling import messages, pooling, topology
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore, PodRecord


@dataclasses.dataclass(frozen=True)
class Member:
    """A gang member as the planner sees it."""

    rec: PodRecord
    leaf: str | None

    @property
    def key(self) -> PodKey:
        return self.rec.key


@dataclasses.dataclass(frozen=True)
class GangPlan:
    """A placement for the members needed now, or why none fits."""

    assignment: dict[PodKey, tuple[PlannedPod, dict[str, int]]]
    domain: str = ""
    reason: str = ""  # set when nothing fits, or when its size-class pool keeps it waiting
    pooled: pooling.Pooled | None = None  # the pool rule's plan, when the gang is pooled
    pool_wait: bool = False  # it would fit, but only outside its pool: it waits (no preemption)


def constraint_levels(store: ClusterStore, group: GroupSpec, leaf: str | None) -> list[int]:
    """Required levels on the pod's leaf and every ancestor up to the root."""
    return [store.arrays.level(k) for k in topology.required_keys(group, leaf, store)]


def placed_row(store: ClusterStore, ledger: GangLedger, rec: PodRecord) -> int:
    """Where a member is bound, confirmed bound, or held; -1 if nowhere."""
    if rec.bound_row >= 0:
        return rec.bound_row
    node = ledger.assumed_node(rec.key)
    if node is None:
        res = store.reservations.get(rec.key)
        return res.row if res is not None and store.row_names.get(res.row) == res.node else -1
    return store.node_rows.get(node, -1)


def placed_members(
    store: ClusterStore, ledger: GangLedger, group: GroupSpec, *, exclude: PodKey
) -> Iterator[tuple[PodRecord, int]]:
    """The group's live members that are bound, binding or planned, each with its row. A member
    being deleted or finished pins no domain, as planning counts it (seed 2083: a Terminating
    member's rack drew a planned sibling out of the rack its plan had chosen)."""
    for rec in store.group_members(group.key):
        if rec.key != exclude and rec.live:
            row = placed_row(store, ledger, rec)
            if row >= 0:
                yield rec, row


def member_rows(store: ClusterStore, ledger: GangLedger, group: GroupSpec, *, exclude: PodKey) -> list[int]:
    """Rows of the group's members that are bound, binding or planned."""
    return [row for _, row in placed_members(store, ledger, group, exclude=exclude)]


def domain_mask(
    store: ClusterStore,
    ledger: GangLedger,
    group: GroupSpec,
    leaf: str | None,
    rows: np.ndarray,
    *,
    exclude: PodKey,
) -> np.ndarray | None:
    """Rows allowed by the constraints on `leaf` and its ancestors, given members already placed.

    None when nothing constrains the pod. Each constraint pins the pod to the domain of a member
    placed under the same constraint: a subgroup's own to a member of that subgroup, the gang's to
    any member (a sibling subgroup's rack says nothing of this one's). A constrained level with no
    such member placed yet allows every domain; kube-scheduler's choice of node then fixes it for
    the rest. A member pins the constraints of the subgroups it sits under, read from its ancestry
    alone: the walk stops once every constraint is pinned, and resolves no other subgroup's topology
    (a JobSet's thousands of replica subgroups cost one member each, not one resolve each).
    """
    chain = topology.required_chain(group, leaf, store)
    if not chain:
        return None
    pins: dict[str | None, int] = {}  # subgroup -> the row of the first member placed under it
    wanted = {name for name, _ in chain}
    seen: set[str | None] = set()  # leaves already walked: their first member pinned what it could
    for rec, row in placed_members(store, ledger, group, exclude=exclude):
        other = store.membership(rec).subgroup
        if other in seen:
            continue
        seen.add(other)
        for name in topology.ancestry(group, other):
            if name in wanted:
                pins.setdefault(name, row)
        if len(pins) == len(wanted):
            break
    mask = np.ones(len(rows), dtype=bool)
    arrays = store.arrays
    for name, key in chain:
        lvl = arrays.level(key)
        pin = pins.get(name)
        if pin is not None:
            mask &= arrays.domains[lvl, rows] == arrays.domains[lvl, pin]
        else:
            mask &= arrays.domains[lvl, rows] >= 0
    return mask


def tree_node(store: ClusterStore, parent: int, constraint: Any) -> placement.TreeNode:
    keys = topology.resolve(constraint, store)
    arrays = store.arrays
    return placement.TreeNode(
        parent=parent,
        required_level=arrays.level(keys.required) if keys.required else -1,
        preferred_level=arrays.level(keys.preferred) if keys.preferred else -1,
        fallback_levels=tuple(arrays.level(k) for k in keys.fallback),
    )


def _placement_tree(
    store: ClusterStore, group: GroupSpec
) -> tuple[tuple[placement.TreeNode, ...], dict[str | None, int]]:
    """The gang's tree as the placement core needs it, and the node of it each leaf's members go
    under: the root and the subgroups with a topology constraint. A subgroup without one adds
    nothing to the placement (its members are loose in its nearest constrained ancestor, as the
    core would take them), so it is folded into that ancestor: a JobSet of thousands of replicas,
    each a subgroup, is a tree of one node."""
    resolved: dict[Any, placement.TreeNode] = {}  # the few constraints thousands of subgroups share

    def node(constraint: Any, parent: int) -> placement.TreeNode:
        hit = resolved.get(constraint)
        if hit is None:
            hit = resolved[constraint] = tree_node(store, -1, constraint)
        return placement.TreeNode(parent, hit.required_level, hit.preferred_level, hit.fallback_levels)

    tree = [node(group.topology, -1)]
    index: dict[str | None, int] = {None: 0}
    for sg in group.subgroups:  # parents come before their children
        at = index[sg.parent]
        own = node(sg.topology, at)
        if own.required_level >= 0 or own.preferred_level >= 0:
            at = len(tree)
            tree.append(own)
        index[sg.name] = at
    return tuple(tree), index


@dataclasses.dataclass(frozen=True)
class Demand:
    """What a gang asks of the placement core now: the request, and the members behind each leaf
    demand (in the request's order), or why nothing can fit (`unoffered`)."""

    request: placement.GangRequest
    chosen: tuple[tuple[Member, ...], ...]
    needed: int  # the members the quorum takes, bound ones included
    one_per_node: bool  # some member must be alone on its node (the slot column is used)
    spread_rows: tuple[int, ...]  # rows taken by placed members that must be alone
    unoffered: tuple[str, ...] = ()  # requested names no node offers


_NONE_REFUSED: frozenset[str] = frozenset()


def gang_demand(
    store: ClusterStore,
    ledger: GangLedger,
    group: GroupSpec,
    members: Sequence[Member],
    leaves: Sequence[str | None],
    *,
    me: PodKey | None,
    offered_rows: np.ndarray | None = None,
    avoid_refused: bool = True,
) -> Demand:
    """For each leaf in `leaves`, the members still needed for its quorum (bound and finished members
    count toward it), as one request: see `plan_members`. `me` None: no pod is being filtered (a hold
    is being chosen), every member goes where its own eligibility allows."""
    arrays = store.arrays
    tree, index = _placement_tree(store, group)
    offered = None
    if me is not None:
        offered = np.zeros(arrays.n_rows, dtype=bool)
        offered[offered_rows if offered_rows is not None else slice(None)] = True
    excluded = ledger.excluded(group.key) if avoid_refused else {}
    me_rec = next((m.rec for m in members if m.key == me), None) if me is not None else None
    # `me`'s own terms (the store hands out one mask per set of terms: identity tells them apart)
    mine: object = store.eligible_mask_of(me_rec) if me_rec is not None else object()
    my_vec = store.request_vector(me_rec.requests)[0] if me_rec is not None else None
    explained: np.ndarray | None = None  # see below: made once, for the smaller siblings of `me`
    admits: dict[int, np.ndarray | None] = {}  # id(mask) -> the mask, alive all call long
    slot = store.resources.find(podaffinity.ONE_PER_NODE)
    spread_rows: list[int] = []  # rows already taken by a member that must be alone
    demands: list[tuple[int, bytes, np.ndarray | None]] = []  # (tree node, request, eligible)
    chosen: list[list[Member]] = []
    merge: dict[tuple[int, bytes, int], int] = {}
    pinned: dict[int, list[np.ndarray]] = {}
    vectors: dict[int, tuple[np.ndarray, bytes, bool]] = {}  # by the requests mapping, all call long
    unoffered: set[str] = set()  # requested names no node offers: nothing can fit
    total_needed = 0
    bound_total = 0
    finished = store.finished_counts(group)
    by_leaf: dict[str | None, list[Member]] = {}
    for m in members:
        by_leaf.setdefault(m.leaf, []).append(m)
    for leaf in leaves:
        leaf_members = by_leaf.get(leaf, [])
        placed = [(m, placed_row(store, ledger, m.rec)) for m in leaf_members]
        is_bound = [bool(m.rec.node_name or ledger.is_assumed(m.key)) for m in leaf_members]
        bound = [row for (m, row), b in zip(placed, is_bound, strict=True) if b]
        spread_rows += [row for m, row in placed if row >= 0 and store.one_per_node_of(m.rec)]
        pending = sorted(
            (
                m
                for (m, _), b in zip(placed, is_bound, strict=True)
                if not b and not ledger.is_releasing(m.key)
            ),
            key=lambda m: (m.key != me, m.key),
        )
        # members that ran to completion count toward the quorum, as admission counts them
        # (GangLedger.bound_counts): planning more would hold room the queue never admitted
        count = max(0, min(group.leaf_quorum(leaf) - len(bound) - finished.get(leaf, 0), len(pending)))
        take = pending[:count]
        total_needed += count
        bound_total += len(bound)
        bound_rows = np.array([row for row in bound if row >= 0], dtype=np.int32)
        # pods of one leaf with different shapes (driver + workers), spreading, refused nodes or
        # nodes their own terms admit become separate demands: a member is never planned on a node
        # only a sibling's selector, affinity or tolerations (or the rows kube-scheduler passed for
        # `me`) admit, since a release binds it there without its own cycle
        shapes: dict[tuple[bytes, bool, frozenset[str], int], list[Member]] = {}
        for m in take:
            hit = vectors.get(id(m.rec.requests))  # pods that ask alike share one mapping
            if hit is None:
                vec, missing = store.request_vector(m.rec.requests)
                unoffered.update(missing)
                no_smaller = my_vec is not None and bool((vec >= my_vec).all())
                hit = vectors[id(m.rec.requests)] = (vec, vec.tobytes(), no_smaller)
            vec, raw, no_smaller = hit
            spread = slot is not None and store.one_per_node_of(m.rec)
            if spread:
                vec = vec.copy()
                vec[slot] = 1
                raw = vec.tobytes()
            refusals = excluded.get(m.key) if m.key != me else None
            refused = frozenset(refusals) if refusals else _NONE_REFUSED
            own = store.eligible_mask_of(m.rec)
            if m.key == me or (own is mine and no_smaller):
                # `me`, and the members whose terms are its own asking no less: the nodes kube-
                # scheduler's filters passed `me` (its cache may know of pods this one has not seen yet)
                own = offered
            elif own is mine and offered is not None and my_vec is not None:
                # a smaller member of `me`'s terms: the offered nodes, and those this cache too sees
                # without room for `me`, where kube-scheduler's refusal says nothing of the smaller one
                # (seed 128: a 2-cpu member kept off the node its hold chose). A node with room for `me`
                # that was not offered, kube-scheduler knows something of (a nominated pod, a pod this
                # cache has not seen): no member of those terms goes there
                if explained is None:
                    # as kube-scheduler sees the room: the holds of gangs ranked before this one are
                    # this service's, given back (a plan runs with them taken out of `arrays`)
                    rows = arrays.n_rows
                    free = ledger.holds.unheld_free(arrays)[:rows]
                    explained = offered | ~(free >= my_vec).all(axis=1)
                    if isinstance(mine, np.ndarray):
                        explained &= mine
                own = explained
            admits[id(own)] = own
            shapes.setdefault((raw, spread, refused, id(own)), []).append(m)
        for (raw, _spread, refused, own_id), recs in shapes.items():
            eligible = admits[own_id]
            if recs[0].key != me:
                if refused:
                    eligible = np.ones(arrays.n_rows, dtype=bool) if eligible is None else eligible.copy()
                    for node in refused:
                        row = store.node_rows.get(node)
                        if row is not None:
                            eligible[row] = False
            # members of one shape and eligibility under one node of the tree are one demand, whichever
            # unconstrained subgroup they come from (a JobSet's replicas): the placement core sees
            # them as one pool either way. Eligibility is told apart by identity: the store hands out
            # one mask per set of terms, `me`'s shape has the offered rows, a refusal its own copy
            merged = (index[leaf], raw, 0 if eligible is None else id(eligible))
            at = merge.get(merged)
            if at is None:
                at = merge[merged] = len(demands)
                demands.append((index[leaf], raw, eligible))
                chosen.append([])
            chosen[at].extend(recs)
        if len(bound_rows):
            pinned.setdefault(index[leaf], []).append(bound_rows)
    leaf_demands = [
        placement.LeafDemand(
            tree_node=node,
            request=np.frombuffer(raw, dtype=np.int64).copy(),
            count=len(recs),
            eligible=eligible,
        )
        for (node, raw, eligible), recs in zip(demands, chosen, strict=True)
    ]
    order = sorted(
        range(len(leaf_demands)), key=lambda i: (leaf_demands[i].tree_node, -int(leaf_demands[i].request[0]))
    )
    leaf_demands = [leaf_demands[i] for i in order]
    chosen = [chosen[i] for i in order]
    # where members are bound pins their node of the tree; a demand of none carries it
    for node, rows in pinned.items():
        leaf_demands.append(
            placement.LeafDemand(
                tree_node=node,
                request=np.zeros(arrays.n_res, dtype=np.int64),
                count=0,
                bound_rows=np.concatenate(rows),
            )
        )
        chosen.append([])
    return Demand(
        request=placement.GangRequest(tree=tree, leaves=tuple(leaf_demands)),
        chosen=tuple(tuple(recs) for recs in chosen),
        needed=total_needed + bound_total,
        one_per_node=slot is not None and any(d.request[slot] for d in leaf_demands),
        spread_rows=tuple(spread_rows),
        unoffered=tuple(sorted(unoffered)),
    )


def plan_members(
    store: ClusterStore,
    ledger: GangLedger,
    group: GroupSpec,
    members: Sequence[Member],
    leaves: Sequence[str | None],
    *,
    me: PodKey,
    offered_rows: np.ndarray,
    avoid_refused: bool = True,
    arrays: ClusterArrays | None = None,
    pools: pooling.PoolMap | None = None,
) -> GangPlan | None:
    """Place, for each leaf in `leaves`, the members still needed for its quorum (bound and finished
    members count toward it).

    `me` (the pod being filtered) goes first in its leaf and is placed only on `offered_rows`
    (kube-scheduler's filters passed them); other members on the nodes whose taints, labels and
    affinity admit them, minus nodes kube-scheduler refused them before (`avoid_refused`: a hint
    for convergence, dropped by the caller when it is what stands in the way). Members whose required
    anti-affinity keeps them apart get one node each. None when `me` is not needed (its leaf's
    quorum is bound already). `arrays` replaces the store's for the fit only (a preemptor's trial
    with its victims' capacity given back, or the cluster with other gangs' holds taken out); names,
    labels and eligibility are the store's. `pools`: plan by the size-class pool rule (a gang that
    fits only outside its pool gets `pool_wait` and a reason, no plan).
    """
    arrays = store.arrays if arrays is None else arrays
    demand = gang_demand(
        store, ledger, group, members, leaves, me=me, offered_rows=offered_rows, avoid_refused=avoid_refused
    )
    if me not in {m.key for recs in demand.chosen for m in recs}:
        return None
    if arrays.domains is not store.arrays.domains:
        # the demand may have registered a topology level named first now (a subgroup's own): a
        # view made before it lacks that level's row, and a view's labels are the store's anyway
        arrays = copy.copy(arrays)
        arrays.domains = store.arrays.domains
    if demand.unoffered:
        reason = f"gang {group.key} ({demand.needed} pods): {messages.unoffered_text(list(demand.unoffered))}"
        return GangPlan({}, reason=reason)
    slot = store.resources.find(podaffinity.ONE_PER_NODE)
    pooled = None
    if demand.one_per_node and slot is not None:
        plan = _plan_one_per_node(arrays, demand.request, slot, list(demand.spread_rows))
    elif pools is not None and (pooled := pools.plan(arrays, demand.request, group.key)) is not None:
        plan = pooled.plan
        if pooled.waits:
            reason = pools.text(pooled, group.key, demand.needed)
            return GangPlan({}, reason=reason, pooled=pooled, pool_wait=True)
    else:
        plan = placement.plan_gang(arrays, demand.request)
    if plan.outcome is not placement.Outcome.PLACED:
        return GangPlan({}, reason=messages.no_fit_text(store, group, demand.needed, plan))
    assignment: dict[PodKey, tuple[PlannedPod, dict[str, int]]] = {}
    names = store.row_names
    for recs, rows in zip(demand.chosen, plan.rows, strict=True):
        for m, row in zip(recs, rows.tolist(), strict=True):
            # the record's own requests mapping (shared by pods that ask alike, never written): the
            # hold works its vector out once per mapping
            assignment[m.key] = (PlannedPod(names[row], m.rec.uid, m.leaf), m.rec.requests)
    return GangPlan(assignment, domain=messages.domain_text(store, plan), pooled=pooled)


def _plan_one_per_node(
    arrays: ClusterArrays, request: placement.GangRequest, slot: int, taken_rows: list[int]
) -> placement.Plan:
    """Plan with one free 'slot' per node for members that must be alone, restored afterwards.

    The slot column is zero outside this call, so nothing else ever sees it.
    """
    free = arrays.free
    n = arrays.n_rows
    try:
        free[:n, slot] = 1
        if taken_rows:
            free[np.array(taken_rows, dtype=np.int64), slot] = 0
        return placement.plan_gang(arrays, request)
    finally:
        free[:, slot] = 0


def with_slots(store: ClusterStore, demands: Sequence[Demand]) -> ClusterArrays:
    """The store's arrays as a hold's pass sees them when some of `demands` have members that must be
    alone: a copy whose slot column offers one per node, free and once drained, but on the rows
    their placed members take (any of them: conservative where two such gangs wait at once). The
    store's own arrays otherwise (nothing is copied)."""
    arrays = store.arrays
    slot = store.resources.find(podaffinity.ONE_PER_NODE)
    if slot is None or not any(d.one_per_node for d in demands):
        return arrays
    view = copy.copy(arrays)
    view.free = arrays.free.copy()
    view.allocatable = arrays.allocatable.copy()
    view.free[: arrays.n_rows, slot] = 1
    view.allocatable[: arrays.n_rows, slot] = 1
    taken = np.array(sorted({r for d in demands for r in d.spread_rows}), dtype=np.int64)
    view.free[taken, slot] = 0
    view.allocatable[taken, slot] = 0
    return view


def without_slots(store: ClusterStore, amounts: np.ndarray) -> np.ndarray:
    """A hold's amounts with the slot column cleared: outside a plan nothing offers it, so a held
    row counts as drained by the resources its pods request."""
    slot = store.resources.find(podaffinity.ONE_PER_NODE)
    if slot is None or slot >= amounts.shape[1] or not amounts[:, slot].any():
        return amounts
    out = amounts.copy()
    out[:, slot] = 0
    return out


def repair(
    store: ClusterStore,
    ledger: GangLedger,
    group: GroupSpec,
    member: Member,
    offered_rows: np.ndarray,
) -> str | None:
    """Another node for one planned member whose node kube-scheduler did not offer, keeping the
    rest of the plan: offered, usable, with room, inside every constrained domain the plan
    occupies, and not beside a member it must stay apart from. None when there is none."""
    arrays = store.arrays
    planned = ledger.planned(member.key)
    if planned is None or not len(offered_rows):
        return None
    rows = offered_rows[arrays.schedulable[offered_rows]]
    if not len(rows):
        return None
    vec, missing = store.request_vector(member.rec.requests)
    if missing:
        return None
    ok = placement.fit_mask(arrays, rows, vec)
    allowed = domain_mask(store, ledger, group, member.leaf, rows, exclude=member.key)
    if allowed is not None:
        ok &= allowed
    if store.one_per_node_of(member.rec):
        taken = {
            placed_row(store, ledger, rec)
            for rec in store.group_members(group.key)
            if rec.key != member.key and store.one_per_node_of(rec)
        }
        ok &= np.array([int(r) not in taken for r in rows], dtype=bool)
    refused = ledger.excluded(group.key).get(member.key, set())
    if refused:
        ok &= np.array([store.row_names.get(int(r)) not in refused for r in rows], dtype=bool)
    candidates = rows[ok]
    if not len(candidates):
        return None
    scores = placement.score_nodes(arrays, candidates, vec)
    return store.row_names[int(candidates[int(np.argmax(scores))])]
