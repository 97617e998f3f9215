"""Scheduler: filter, prioritize, bind and preempt decisions over the cluster store.

How a gang travels (design-notes.md):
1. Until quorum pods exist, every node is rejected as unresolvable, saying how many exist.
2. The first member that finds quorum present plans the whole quorum at once; the plan's
   capacity is reserved in the store against every other pod and gang; pending siblings are
   nudged so kube-scheduler retries them now rather than after its backoff.
3. Filter then passes each planned member only its planned node; prioritize gives it 10.
4. Bind is the barrier: a member waits until every planned member has arrived (see
   gang.permits); the server then binds them all. Past the gang wait, all waiting binds fail,
   the reservation is released and the gang backs off.
Pods that are not gangs (basic policy, a quorum of one) are placed one by one; members beyond a
gang's quorum likewise, inside the gang's domain when a constraint requires it.

Everything here is synchronous. The server awaits the barrier and performs the writes listed in
a decision's `effects`.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extender.gang.permits import Arrival, GangPermits, Phase
from extender.model import resources
from extender.model.group import GroupSpec, Membership, MembershipState, Source, SubGroup
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.placement import api as placement
from extender.scheduling import topology
from extender.state.store import GROUPING_KINDS, ClusterStore, PodRecord, is_live, is_terminal

log = logging.getLogger(__name__)


class UnknownNodesError(ValueError):
    """kube-scheduler named nodes this service has never seen."""


class Verdict(enum.Enum):
    PASS = "pass"  # some nodes pass
    NO_FIT = "no-fit"  # nothing fits now; preemption might help
    WAITING = "waiting"  # gang quorum, group object or backoff: retry later
    REJECTED = "rejected"  # the pod itself is invalid for scheduling


@dataclasses.dataclass(frozen=True)
class Effect:
    """A write the server performs after answering: nudge, event, pod condition, group status."""

    kind: str  # "nudge" | "event" | "condition" | "group-status"
    namespace: str
    name: str
    data: dict[str, Any]


@dataclasses.dataclass
class FilterDecision:
    verdict: Verdict
    passed: list[str]
    reason: str = ""
    unresolvable: bool = True
    effects: list[Effect] = dataclasses.field(default_factory=list)


class BindVerdict(enum.Enum):
    NOW = "now"  # bind this pod alone, now
    WAIT = "wait"  # wait at the gang's barrier
    RELEASE = "release"  # the barrier is complete: bind every waiting member
    REFUSE = "refuse"  # answer an error


@dataclasses.dataclass
class BindDecision:
    verdict: BindVerdict
    gang: GroupKey | None = None
    message: str = ""
    members: list[tuple[PodKey, str]] = dataclasses.field(default_factory=list)  # RELEASE: (pod, node)


@dataclasses.dataclass(frozen=True)
class FilterCall:
    """One filter request, resolved: the pod, its gang and the nodes kube-scheduler offered."""

    pod: dict[str, Any]
    key: PodKey
    group: GroupSpec
    membership: Membership
    rows: np.ndarray  # int32[k] store rows of node_names
    node_names: Sequence[str]
    request: np.ndarray  # int64[n_res] the pod's requests


def _pod_identity(pod: dict[str, Any]) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or "")


class Scheduler:
    def __init__(self, store: ClusterStore, permits: GangPermits, *, reason_nodes: int = 16) -> None:
        self.store = store
        self.permits = permits
        self.reason_nodes = reason_nodes
        self._plan_specs: dict[GroupKey, GroupSpec] = {}
        # gang -> (signature, reason): a "does not fit" stays true until capacity is released, the
        # group or its members change, or kube-scheduler offers other nodes; every member's retry
        # would otherwise re-run the planner
        self._no_fit: dict[GroupKey, tuple[tuple[int, ...], str]] = {}
        self._rejected: set[PodKey] = set()  # pods whose last filter passed no node
        self.on_abort: Callable[[list[PodKey], str], None] = lambda pods, message: None
        """Called with the members waiting at a barrier that can no longer complete, and why; the
        server answers their bind calls with the message."""
        store.add_listener(self._on_change)

    # ================================================================= filter
    def rows_of(self, node_names: Sequence[str]) -> np.ndarray:
        rows = self.store.node_rows
        try:
            return np.fromiter(map(rows.__getitem__, node_names), dtype=np.int32, count=len(node_names))
        except KeyError:
            unknown = [n for n in node_names if n not in rows]
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise UnknownNodesError(
                f"{len(unknown)} node name(s) unknown to the extender's cluster cache: {shown}"
            ) from None

    def planned_node_for(self, pod: dict[str, Any]) -> str | None:
        """The node the plan holds for this pod, if the plan is for this very pod (same UID): a pod
        deleted and recreated under its name must not inherit its predecessor's place."""
        ns, name, uid = _pod_identity(pod)
        key = pod_key(ns, name)
        planned = self.permits.planned_node(key)
        if planned is None:
            return None
        rec = self.store.pods.get(key)
        if rec is None or (uid and rec.uid and rec.uid != uid):
            return None
        return planned

    def filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        decision = self._filter(pod, node_names)
        ns, name, _ = _pod_identity(pod)
        key = pod_key(ns, name)
        if decision.verdict is Verdict.PASS:
            self._rejected.discard(key)
        else:
            self._rejected.add(key)
        return decision

    def _filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        ns, name, _ = _pod_identity(pod)
        key = pod_key(ns, name)
        planned = self.planned_node_for(pod)
        if planned is not None and self._row_usable(planned) and planned in node_names:
            return FilterDecision(Verdict.PASS, [planned])  # the plan decides; no need to map names
        rows = self.rows_of(node_names)
        membership = self.store.membership_of(pod)
        state = membership.state
        if state is MembershipState.INVALID_SUBGROUP:
            cond = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": membership.message,
            }
            return FilterDecision(
                Verdict.REJECTED, [], membership.message, effects=[Effect("condition", ns, name, cond)]
            )
        if state is MembershipState.GROUP_MISSING:
            return FilterDecision(Verdict.WAITING, [], membership.message or "waiting for its group object")
        if state is MembershipState.INVALID or membership.group is None:
            return FilterDecision(Verdict.REJECTED, [], membership.message or "the pod's workload is invalid")
        call = FilterCall(pod, key, membership.group, membership, rows, node_names, self._pod_vector(pod))
        return self._filter_member(call)

    def _filter_member(self, call: FilterCall) -> FilterDecision:
        # _filter answered a usable planned node already; a plan held here for this name cannot be
        # carried out: its node is gone or not offered, or it was made for a pod since recreated
        key = call.key
        planned = self.permits.planned_node(key)
        gang = self.permits.gang_of(key)
        if planned is not None and gang is not None:
            if self.permits.entry(gang).releasing:
                return FilterDecision(Verdict.WAITING, [], f"gang {gang}: {key} is being bound to {planned}")
            if self.planned_node_for(call.pod) is None:
                self._drop_plan(gang, f"{key} was recreated after the plan was made")
            else:
                self._drop_plan(gang, f"planned node {planned} is no longer offered for {key}")
        if not call.group.is_gang():
            return self._filter_single(call)
        return self._filter_gang(call)

    def _row_usable(self, node: str) -> bool:
        row = self.store.node_rows.get(node)
        return row is not None and bool(self.store.arrays.schedulable[row])

    def _pod_vector(self, pod: dict[str, Any]) -> np.ndarray:
        """The pod's requests as a row of the arrays' columns; from the cache when it holds this pod."""
        ns, name, uid = _pod_identity(pod)
        rec = self.store.pods.get(pod_key(ns, name))
        if rec is not None and uid and rec.uid == uid:
            reqs = rec.requests  # the watch keeps these current (in-place resize included)
        else:
            try:
                reqs = resources.pod_requests(pod)
            except resources.QuantityError as exc:
                raise ValueError(f"Pod: {exc}") from None
        return self.store._vec_for(reqs)

    # ----------------------------------------------------------------- single pods
    def _filter_single(self, call: FilterCall) -> FilterDecision:
        key, group, rows, request = call.key, call.group, call.rows, call.request
        arrays = self.store.arrays
        usable = arrays.schedulable[rows] if len(rows) else np.zeros(0, dtype=bool)
        fits = placement.fit_mask(arrays, rows, request) & usable if len(rows) else usable
        try:
            allowed = self._domain_mask(group, call.membership.subgroup, rows, exclude=key)
        except topology.TopologyError as exc:
            return FilterDecision(Verdict.REJECTED, [], f"{self._label(group)}: {exc}")
        if allowed is not None:
            fits &= allowed
        if fits.all():
            passed = list(call.node_names)
        else:
            passed = [call.node_names[i] for i in np.flatnonzero(fits)]
        if passed:
            return FilterDecision(Verdict.PASS, passed)
        what = "pod" if group.source.value == "single-pod" else f"{self._label(group)} member"
        reason = f"{what} {key}: {self._shortfall_text(rows, request, allowed)}"
        return FilterDecision(Verdict.NO_FIT, [], reason, unresolvable=allowed is not None)

    def _domain_mask(
        self, group: GroupSpec, leaf: str | None, rows: np.ndarray, *, exclude: PodKey
    ) -> np.ndarray | None:
        """Rows allowed by the constraints on `leaf` and its ancestors, given members already placed.

        None when nothing constrains the pod. A constrained level with no member placed yet allows
        every domain; kube-scheduler's choice of node then fixes it for the rest.
        """
        levels = self._constraint_levels(group, leaf)
        if not levels:
            return None
        placed_rows = [r for r in self._member_rows(group, exclude=exclude) if r >= 0]
        mask = np.ones(len(rows), dtype=bool)
        arrays = self.store.arrays
        for lvl in levels:
            if not placed_rows:
                mask &= arrays.domains[lvl, rows] >= 0
                continue
            domain = arrays.domains[lvl, placed_rows[0]]
            mask &= arrays.domains[lvl, rows] == domain
        return mask

    def _constraint_levels(self, group: GroupSpec, leaf: str | None) -> list[int]:
        levels: list[int] = []
        chain: list[Any] = [group.topology]
        node = group.subgroup(leaf) if leaf else None
        while node is not None:
            chain.append(node.topology)
            node = group.subgroup(node.parent) if node.parent else None
        for c in chain:
            keys = topology.resolve(c, self.store)
            if keys.required:
                levels.append(self.store.arrays.level(keys.required))
        return levels

    def _member_rows(self, group: GroupSpec, *, exclude: PodKey) -> list[int]:
        """Rows of the group's members that are bound, binding or planned."""
        out = []
        for rec in self.store.group_members(group.key):
            if rec.key == exclude:
                continue
            if rec.bound_row >= 0:
                out.append(rec.bound_row)
            elif rec.key in self.store.reservations:
                out.append(self.store.reservations[rec.key].row)
        return out

    def _shortfall_text(self, rows: np.ndarray, request: np.ndarray, allowed: np.ndarray | None) -> str:
        """Which offered node comes closest, and what it lacks."""
        arrays = self.store.arrays
        if allowed is not None:
            rows = rows[allowed]
        if not len(rows):
            return "no offered node is in the group's topology domain"
        short = request[None, :] - arrays.free[rows]  # >0 where a node lacks that resource
        relative = np.where(request[None, :] > 0, short / np.maximum(request[None, :], 1), 0.0)
        closest = int(np.argmin(relative.max(axis=1)))
        col = int(np.argmax(relative[closest]))
        name = self.store.resources.names[col]
        node = self.store.row_names.get(int(rows[closest]), "?")
        amount = resources.units_text(name, int(short[closest, col]))
        return f"no offered node has room (closest {node}: {name} short {amount})"

    # ----------------------------------------------------------------- gangs
    def _label(self, group: GroupSpec) -> str:
        return f"gang {group.key}" if group.is_gang() else f"group {group.key}"

    def _filter_gang(self, call: FilterCall) -> FilterDecision:
        pod, key, group, membership = call.pod, call.key, call.group, call.membership
        entry = self.permits.entry(group.key)
        if entry.phase is Phase.BOUND:
            return self._filter_single(call)  # quorum is bound: a member beyond it, placed as it comes
        if entry.plan and key not in entry.plan:
            # a member beyond a quorum not bound yet: bound now, it could end up alone if the
            # quorum times out
            reason = f"gang {group.key}: waiting for its quorum to bind before placing {key}"
            return FilterDecision(Verdict.WAITING, [], reason)
        left = self.permits.in_backoff(group.key)
        if left > 0:
            return FilterDecision(
                Verdict.WAITING, [], f"gang {group.key}: {entry.last_reason} ({left:.0f}s left)"
            )
        members = [rec for rec in self.store.group_members(group.key) if is_live(rec.obj)]
        if key not in {m.key for m in members}:
            members.append(self._record_for(pod, key))
        counts: dict[str | None, int] = {}
        for rec in members:
            m = self.store.membership(rec) if rec.key in self.store.pods else membership
            counts[m.subgroup] = counts.get(m.subgroup, 0) + 1
        ready = group.ready_leaves(counts)
        need = group.quorum_upper_bound()
        if ready is None:
            reason = f"gang {group.key} waiting for pods: {len(members)} exist, {need} needed for quorum"
            entry.last_reason = reason
            ns, name = key.split("/", 1)
            waiting = Effect("event", ns, name, {"reason": "GangWaiting", "message": reason})
            return FilterDecision(Verdict.WAITING, [], reason, effects=[waiting])
        if membership.subgroup not in ready:
            return self._filter_single(call)
        sig = (
            self.store.release_gen,
            self.store.grouping_gen,
            hash(tuple(m.key for m in members)),
            hash(call.rows.tobytes()),
        )
        cached = self._no_fit.get(group.key)
        if cached is not None and cached[0] == sig:
            return FilterDecision(Verdict.NO_FIT, [], cached[1])
        try:
            decision = self._plan(call, members, ready)
        except topology.TopologyError as exc:
            reason = f"gang {group.key}: {exc}"
            entry.last_reason = reason
            return FilterDecision(Verdict.REJECTED, [], reason)
        if decision is None:
            return self._filter_single(call)
        if decision.verdict is Verdict.NO_FIT:
            self._no_fit[group.key] = (sig, decision.reason)
        else:
            self._no_fit.pop(group.key, None)
        return decision

    def _record_for(self, pod: dict[str, Any], key: PodKey) -> PodRecord:
        return PodRecord(key=key, obj=pod, requests=resources.pod_requests(pod))

    def _leaf_of(self, rec: PodRecord, fallback: Membership) -> str | None:
        if rec.key in self.store.pods:
            return self.store.membership(rec).subgroup
        return fallback.subgroup

    def _plan(
        self, call: FilterCall, members: list[PodRecord], ready: tuple[str | None, ...]
    ) -> FilterDecision | None:
        group, key, membership, rows = call.group, call.key, call.membership, call.rows
        store = self.store
        arrays = store.arrays
        # tree: index 0 is the root, subgroups follow in spec order
        index: dict[str | None, int] = {None: 0}
        for i, sg in enumerate(group.subgroups):
            index[sg.name] = i + 1
        tree = [self._tree_node(-1, group.topology, group)]
        for sg in group.subgroups:
            tree.append(self._tree_node(index[sg.parent], sg.topology, group))
        # kube-scheduler's node list is the eligible set for this pod's own template only; for
        # the other members, the nodes whose taints, labels and affinity admit them
        offered = np.zeros(arrays.n_rows, dtype=bool)
        offered[rows] = True
        leaves: list[placement.LeafDemand] = []
        chosen: list[list[PodKey]] = []
        descr: list[int] = []
        total_needed = 0
        for leaf in ready:
            leaf_members = [r for r in members if self._leaf_of(r, membership) == leaf]
            bound = [r for r in leaf_members if r.node_name or r.bound_row >= 0]
            pending = sorted(
                (r for r in leaf_members if not (r.node_name or r.bound_row >= 0)),
                key=lambda r: (r.key != key, r.key),
            )
            quorum = self._leaf_quorum(group, leaf)
            count = max(0, min(quorum - len(bound), len(pending)))
            take = pending[:count]
            total_needed += count
            bound_rows = np.array([r.bound_row for r in bound if r.bound_row >= 0], dtype=np.int32)
            # heterogeneous pods of one leaf (driver + workers in one PodGroup) become separate demands
            shapes: dict[bytes, list[PodRecord]] = {}
            for r in take:
                shapes.setdefault(store._vec_for(r.requests).tobytes(), []).append(r)
            first = True
            for raw, recs in sorted(shapes.items(), key=lambda kv: -int(np.frombuffer(kv[0], np.int64)[0])):
                vec = np.frombuffer(raw, dtype=np.int64).copy()
                is_mine = any(r.key == key for r in recs)
                leaves.append(
                    placement.LeafDemand(
                        tree_node=index[leaf],
                        request=vec,
                        count=len(recs),
                        eligible=offered if is_mine else store.eligible_mask(recs[0].obj),
                        bound_rows=bound_rows if first else None,
                    )
                )
                chosen.append([r.key for r in recs])
                descr.append(index[leaf])
                first = False
            if not take and len(bound_rows):
                leaves.append(
                    placement.LeafDemand(
                        tree_node=index[leaf],
                        request=np.zeros(arrays.free.shape[1], dtype=np.int64),
                        count=0,
                        bound_rows=bound_rows,
                    )
                )
                chosen.append([])
        if key not in {k for ks in chosen for k in ks}:
            return None  # the pod is beyond its leaf's quorum: the caller places it as a single member
        plan = placement.plan_gang(arrays, placement.GangRequest(tree=tuple(tree), leaves=tuple(leaves)))
        if plan.outcome is not placement.Outcome.PLACED:
            reason = self._no_fit_text(group, total_needed + self._bound_count(members), plan)
            self.permits.entry(group.key).last_reason = reason
            return FilterDecision(Verdict.NO_FIT, [], reason)
        assignment: dict[PodKey, str] = {}
        for pods_of_leaf, leaf_rows, demand in zip(chosen, plan.rows, leaves, strict=True):
            for pk, row in zip(pods_of_leaf, leaf_rows, strict=True):
                node = store.row_names[int(row)]
                assignment[pk] = node
                store.reserve(pk, int(row), demand.request)
        domain = self._domain_text(plan)
        self.permits.set_plan(group.key, assignment, domain=domain)
        self._plan_specs[group.key] = group
        effects = []
        for pk, node in assignment.items():
            if pk != key and pk in self._rejected:
                # only a pod we turned away sits in kube-scheduler's backoff or unschedulable queue;
                # the others are still in its active queue and need no API write
                effects.append(Effect("nudge", *pk.split("/", 1), {"value": f"{group.name}:{node}"}))
        # the gang's story is told once, on the member that planned it: an event per member per step
        # would be more writes than the binds themselves on an API server that is the bottleneck
        where = f" in {domain}" if domain else ""
        message = f"gang {group.key}: {len(assignment)} pods planned{where}"
        effects.append(Effect("event", *key.split("/", 1), {"reason": "GangPlanned", "message": message}))
        return FilterDecision(Verdict.PASS, [assignment[key]], effects=effects)

    def _bound_count(self, members: list[PodRecord]) -> int:
        return sum(1 for r in members if r.node_name)

    def _tree_node(self, parent: int, constraint: Any, group: GroupSpec) -> placement.TreeNode:
        keys = topology.resolve(constraint, self.store)
        arrays = self.store.arrays
        return placement.TreeNode(
            parent=parent,
            required_level=arrays.level(keys.required) if keys.required else -1,
            preferred_level=arrays.level(keys.preferred) if keys.preferred else -1,
            fallback_levels=tuple(arrays.level(k) for k in keys.fallback),
        )

    @staticmethod
    def _leaf_quorum(group: GroupSpec, leaf: str | None) -> int:
        if leaf is None:
            return group.min_member if group.min_member is not None else 1
        sg: SubGroup | None = group.subgroup(leaf)
        return (sg.min_member or 0) if sg else 0

    def _level_name(self, level: int) -> str:
        key = self.store.arrays.level_key(level)
        return key.rpartition("/")[2].removeprefix("gke-")

    def _domain_text(self, plan: placement.Plan) -> str:
        if not plan.domains:
            return ""
        node_idx = min(plan.domains)
        level, dom = plan.domains[node_idx]
        return f"{self._level_name(level)} {self.store.arrays.domain_name(level, dom)}"

    def _no_fit_text(self, group: GroupSpec, needed: int, plan: placement.Plan) -> str:
        sf = plan.shortfall
        scope = ""
        if group.topology is not None:
            keys = topology.resolve(group.topology, self.store)
            if keys.required:
                scope = f", {self._level_name(self.store.arrays.level(keys.required))}"
        head = f"gang {group.key} ({needed} pods{scope})"
        if sf is None:
            return f"{head}: does not fit"
        if sf.level >= 0 and sf.domain_id >= 0:
            domain = self.store.arrays.domain_name(sf.level, sf.domain_id)
            where = f"best {self._level_name(sf.level)} {domain} fits"
        else:
            where = "the offered nodes fit"
        text = f"{head}: {where} {sf.fits} of {sf.needed}"
        if 0 <= sf.resource < len(self.store.resources.names) and sf.short_units > 0:
            name = self.store.resources.names[sf.resource]
            text += f" ({name} short {resources.units_text(name, sf.short_units)})"
        return text

    def _group_status(self, group: GroupSpec, phase: str, reason: str) -> Effect | None:
        """The status to write on the group's own object, in that API's shape; None when it has none.

        KAI PodGroups (and this project's CRD) take a phase and the last reason. scheduling.k8s.io
        PodGroups carry only conditions: PodGroupScheduled (v1alpha2) or PodGroupInitiallyScheduled
        (later versions), written once the gang is bound, never turned back to False.
        """
        if group.source is Source.KAI_PODGROUP:
            target = ("scheduling.run.ai", "PodGroup")
            status: dict[str, Any] = {"phase": phase, "lastReason": reason}
        elif group.source is Source.K8S_PODGROUP and phase == "Running":
            target = ("scheduling.k8s.io", "PodGroup")
            obj = self.store.get(*target, group.namespace, group.name) or {}
            kind = (
                "PodGroupScheduled"
                if str(obj.get("apiVersion", "")).endswith("v1alpha2")
                else ("PodGroupInitiallyScheduled")
            )
            condition = {"type": kind, "status": "True", "reason": "Scheduled", "message": reason}
            status = {"conditions": [condition]}
        else:
            return None
        return Effect(
            "group-status",
            group.namespace,
            group.name,
            {"group": target[0], "kind": target[1], "status": status},
        )

    # ----------------------------------------------------------------- invalidation
    def _drop_plan(self, gang: GroupKey, reason: str) -> None:
        """Forget a plan that can no longer be carried out; members waiting at bind fail at once."""
        waiting = self.permits.entry(gang).waiting()
        for pk in self.permits.drop_plan(gang):
            self.store.unreserve(pk)
        self._plan_specs.pop(gang, None)
        self.permits.entry(gang).last_reason = f"replanning: {reason}"
        log.info("gang %s: plan dropped: %s", gang, reason)
        if waiting:
            self.on_abort(waiting, f"gang {gang}: {reason}; replanning")

    def _replannable(self, gang: GroupKey) -> bool:
        entry = self.permits.entry(gang)
        return entry.phase in (Phase.PLANNED, Phase.BINDING) and not entry.releasing

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == ("", "Node"):
            name = str(meta.get("name", ""))
            gone = event == "DELETED" or not self._row_usable(name)
            if gone:
                for gang, entry in list(self.permits.gangs.items()):
                    if self._replannable(gang) and name in entry.plan.values():
                        self._drop_plan(gang, f"planned node {name} was removed or cordoned")
        elif kind == ("", "Pod") and (event == "DELETED" or is_terminal(obj)):
            pk = pod_key(str(meta.get("namespace", "")), str(meta.get("name", "")))
            self._rejected.discard(pk)
            gang = self.permits.gang_of(pk)
            if gang is not None and self._replannable(gang) and event == "DELETED":
                self._drop_plan(gang, f"member {pk} was deleted")
            self._forget_if_gone(obj)
        elif kind in GROUPING_KINDS:
            for gang, spec in list(self._plan_specs.items()):
                entry = self.permits.entry(gang)
                if not self._replannable(gang) or not entry.plan:
                    continue
                rec = self.store.pods.get(next(iter(entry.plan)))
                fresh = self.store.membership(rec).group if rec else None
                if fresh != spec:
                    self._drop_plan(gang, "the group's definition changed")

    def _forget_if_gone(self, pod: dict[str, Any]) -> None:
        """A bound gang whose members are all gone or finished starts over at the quorum gate
        (a JobSet restart, a recreated Job, a reused PodGroup), and its entries are dropped."""
        membership = self.store.membership_of(pod)
        group = membership.group
        if group is None or group.key not in self.permits.gangs:
            return
        if self.permits.entry(group.key).phase is not Phase.BOUND:
            return
        if any(rec.node_name and is_live(rec.obj) for rec in self.store.group_members(group.key)):
            return
        self.permits.forget(group.key)
        self._no_fit.pop(group.key, None)
        self._plan_specs.pop(group.key, None)

    # ================================================================= prioritize
    def prioritize(self, pod: dict[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        rows = self.rows_of(node_names)
        ns, name, _ = _pod_identity(pod)
        planned = self.permits.planned_node(pod_key(ns, name))
        if planned is not None:
            return [(n, 10 if n == planned else 0) for n in node_names]
        request = self._pod_vector(pod)
        anchors = None
        membership = self.store.membership_of(pod)
        if membership.group is not None and membership.state is MembershipState.MEMBER:
            placed = self._member_rows(membership.group, exclude=pod_key(ns, name))
            if placed:
                anchors = np.array(placed, dtype=np.int32)
        levels = list(range(self.store.arrays.domains.shape[0]))
        scores = placement.score_nodes(
            self.store.arrays, rows, request, anchor_rows=anchors, anchor_levels=levels
        )
        return list(zip(node_names, (int(s) for s in scores), strict=True))

    # ================================================================= bind
    def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindDecision:
        key = pod_key(namespace, name)
        rec = self.store.pods.get(key)
        if rec is None:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} is not in the extender's cache")
        if uid and rec.uid and rec.uid != uid:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} has uid {rec.uid}, not {uid}")
        if node not in self.store.node_rows:
            return BindDecision(BindVerdict.REFUSE, message=f"node {node} is not in the extender's cache")
        if rec.node_name:
            if rec.node_name == node:
                return BindDecision(BindVerdict.NOW)
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} is already bound to {rec.node_name}")
        arrival, entry = self.permits.arrive(key, node)
        if arrival is Arrival.WRONG_NODE and entry is not None:
            return BindDecision(
                BindVerdict.REFUSE,
                gang=entry.key,
                message=f"gang {entry.key}: {key} is planned on {entry.plan.get(key)}, not {node}",
            )
        if arrival is Arrival.WAIT and entry is not None:
            return BindDecision(BindVerdict.WAIT, gang=entry.key)
        if arrival is Arrival.RELEASE and entry is not None:
            return BindDecision(
                BindVerdict.RELEASE,
                gang=entry.key,
                members=[(pk, entry.plan[pk]) for pk in entry.waiting()],
            )
        if arrival is Arrival.NOT_PLANNED:
            membership = self.store.membership(rec)
            group = membership.group
            if (
                group is not None
                and group.is_gang()
                and self.permits.entry(group.key).phase is not Phase.BOUND
            ):
                # a straggler of a plan that was dropped (timed out, replanned): bound alone it
                # would be a partial gang
                return BindDecision(
                    BindVerdict.REFUSE,
                    gang=group.key,
                    message=f"gang {group.key} has no plan for {key} (it will be planned again); "
                    "not binding it alone",
                )
        # a single pod or a member beyond a bound quorum; hold its capacity while it binds
        row = self.store.node_rows[node]
        vec = self.store._vec_for(rec.requests)
        if not bool(placement.fit_mask(self.store.arrays, np.array([row], dtype=np.int32), vec)[0]):
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} no longer fits on {node}")
        self.store.reserve(key, row, vec)
        return BindDecision(BindVerdict.NOW)

    def bind_failed(self, key: PodKey) -> None:
        """The API refused a single pod's binding: give its capacity back."""
        if self.permits.gang_of(key) is None:
            self.store.unreserve(key)

    def gang_bound(self, gang: GroupKey, pods: list[PodKey], failed: Sequence[PodKey] = ()) -> list[Effect]:
        """The barrier's binds are done: record it and say so on every bound member and the group.

        Members whose binding the API refused give their reservation back and are placed again
        like members beyond quorum.
        """
        domain = self.permits.entry(gang).domain
        self.permits.mark_released(gang, pods, failed)
        for pk in failed:
            self.store.unreserve(pk)
        self._plan_specs.pop(gang, None)
        message = f"gang {gang}: {len(pods)} pods bound together" + (f" in {domain}" if domain else "")
        effects = (
            [Effect("event", *pods[0].split("/", 1), {"reason": "GangBound", "message": message})]
            if pods
            else []
        )
        # members beyond quorum that were told to wait for it can be placed now: bring them back
        # from kube-scheduler's backoff rather than after it
        for rec in self.store.group_members(gang):
            if rec.key in self._rejected and not rec.node_name and rec.key not in pods:
                effects.append(Effect("nudge", *rec.key.split("/", 1), {"value": f"{gang}:bound"}))
        spec = self._spec_of(pods)
        status = self._group_status(spec, "Running", message) if spec is not None else None
        if status is not None:
            effects.append(status)
        return effects

    def _spec_of(self, pods: list[PodKey]) -> GroupSpec | None:
        for pk in pods:
            rec = self.store.pods.get(pk)
            if rec is not None:
                return self.store.membership(rec).group
        return None

    def expire(self) -> list[tuple[list[PodKey], str, list[Effect]]]:
        """Fail every gang whose barrier deadline passed.

        Returns, per gang, the members waiting at bind, the message to answer them with, and the
        writes that tell it: a Warning event on each waiting member, the group object's status.
        """
        out = []
        for entry in self.permits.expired():
            waiting = entry.waiting()
            total = len(entry.plan)
            spec = self._spec_of(list(entry.plan))
            msg = (
                f"gang {entry.key}: quorum did not reach bind within {self.permits.wait_s:g}s "
                f"({len(waiting)} of {total} planned pods arrived); reservation released"
            )
            for pk in self.permits.fail(entry.key, msg):
                self.store.unreserve(pk)
            self._plan_specs.pop(entry.key, None)
            log.warning("%s", msg)
            event = {"reason": "GangTimedOut", "message": msg, "type": "Warning"}
            effects = [Effect("event", *pk.split("/", 1), event) for pk in waiting]
            status = (
                self._group_status(spec, "Pending", self.permits.entry(entry.key).last_reason)
                if spec
                else None
            )
            if status is not None:
                effects.append(status)
            out.append((waiting, msg, effects))
        return out

    # ================================================================= preempt
    def preempt(self, pod: dict[str, Any], victims: dict[str, Any]) -> dict[str, Any]:
        """Candidates pass through unchanged; nodes this service does not know are dropped."""
        return {n: v for n, v in victims.items() if n in self.store.node_rows}

    # ================================================================= debug
    def describe(self, gang: GroupKey) -> dict[str, Any] | None:
        entry = self.permits.gangs.get(gang)
        members = self.store.group_members(gang)
        if entry is None and not members:
            return None
        spec = self.store.membership(members[0]).group if members else self._plan_specs.get(gang)
        return {
            "gang": gang,
            "phase": entry.phase.value if entry else Phase.PENDING.value,
            "quorum": spec.quorum_upper_bound() if spec else None,
            "policy": spec.policy.value if spec else None,
            "members": [
                {
                    "pod": r.key,
                    "subgroup": self.store.membership(r).subgroup,
                    "node": r.node_name,
                    "planned": entry.plan.get(r.key) if entry else None,
                    "waitingAtBind": bool(entry and r.key in entry.arrived),
                }
                for r in members
            ],
            "plan": dict(entry.plan) if entry else {},
            "domain": entry.domain if entry else "",
            "reservation": {
                pk: self.store.row_names.get(self.store.reservations[pk].row)
                for pk in (entry.plan if entry else {})
                if pk in self.store.reservations
            },
            "failures": entry.failures if entry else 0,
            "lastReason": entry.last_reason if entry else "",
        }

    def describe_all(self) -> list[dict[str, Any]]:
        keys = set(self.permits.gangs)
        return [d for k in sorted(keys) if (d := self.describe(k)) is not None]
