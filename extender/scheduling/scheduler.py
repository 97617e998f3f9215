"""Scheduler: the verbs (filter, prioritize, bind, preempt) over the cluster store and the ledger.

How a gang travels (design-notes.md):
1. Until quorum pods exist, every node is rejected as unresolvable, saying how many exist.
2. The first member that finds quorum present plans the whole quorum at once (planning.py); the
   ledger holds the plan's capacity against every other pod and gang; pending siblings are
   nudged so kube-scheduler retries them now rather than after its backoff.
3. Filter then passes each planned member only its planned node. When kube-scheduler does not
   offer it (its own filters refused it), the member is moved inside the plan's domain, or the
   plan is dropped and that node avoided next time, so replanning converges.
4. Bind is the barrier: a member waits until every planned member has arrived; the server then
   binds them all and reports the outcome to the ledger. Past the gang wait, waiting binds fail,
   the capacity is given back and the gang backs off.
Bound is counted in the cluster: once quorum members are bound, members beyond it are placed as
they come, inside the gang's domain when a constraint requires it; a subgroup that has not bound
its own minMember yet is planned as a unit, never pod by pod. Pods that are not gangs (basic
policy, a quorum of one) are placed one by one.

Everything here is synchronous. The server awaits the barrier and performs the writes listed in
a decision's `effects`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extender.gang.entry import Arrival, Phase
from extender.grouping.membership import single_pod_group
from extender.grouping.owners import walk_owners
from extender.model import resources
from extender.model.group import GroupSpec, Membership, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.model.priority import may_preempt, pod_priority
from extender.model.queue import QUEUE_API_GROUP, QUEUE_KIND
from extender.placement import api as placement
from extender.scheduling import messages, planning, preemption, preemptor, queues, topology
from extender.scheduling.decisions import (
    ARRIVAL_VERDICT,
    BindDecision,
    BindVerdict,
    Effect,
    FilterDecision,
    UnknownNodesError,
    Verdict,
    pod_ref,
)
from extender.scheduling.ledger import Expiry, GangLedger, Preemption, Victim
from extender.scheduling.reasons import ReasonsTold
from extender.scheduling.settling import SettlingRows
from extender.scheduling.status import group_status
from extender.state.store import NODE, POD, ClusterStore, PodRecord, is_live, is_terminal, kind_of

log = logging.getLogger(__name__)

RECLAIM_ABOVE = 2**62
"""The priority a reclaim evicts below: every priority, since reclaim is between queues, not priorities."""
CACHE_WAIT_S = 300.0
"""How long a pod whose bind was refused for want of it in the cache is waited for (quorum_arrived)."""
RECLAIM_LOOK_S = 5.0
"""How often reclaims_tick takes one waiting gang through its filter path: a plan over every node."""
QUEUE_STATUS_INTERVAL_S = 5.0
"""How often Queue status (allocated, requested) is brought up to date: usage moves with every bind,
and a write per bind would double the API server's load."""

# The workloads whose gang's story is also told on them (the pods' top owner), by (API group, kind).
WORKLOAD_KINDS = frozenset({("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("kubeflow.org", "PyTorchJob")})
# Where a gang's group object lives, by where its definition comes from; a derived gang's is the
# KAI PodGroup a podgrouper created under the gang's name, when there is one.
_GROUP_OBJECTS: dict[Source, tuple[tuple[str, str], ...]] = {
    Source.KAI_PODGROUP: (("scheduling.run.ai", "PodGroup"),),
    Source.K8S_PODGROUP: (("scheduling.k8s.io", "PodGroup"),),
    Source.KAI_DERIVED: (("scheduling.run.ai", "PodGroup"),),
    Source.JOBSET_SCHEDULING: (("scheduling.k8s.io", "PodGroup"), ("scheduling.run.ai", "PodGroup")),
}


@dataclasses.dataclass(frozen=True)
class FilterCall:
    """One filter request, resolved: the pod, its gang and the nodes kube-scheduler offered."""

    pod: dict[str, Any]
    key: PodKey
    uid: str
    group: GroupSpec
    membership: Membership
    rows: np.ndarray  # int32[k] store rows of node_names
    node_names: Sequence[str]
    requests: dict[str, int]


def _marked_unschedulable(pod: dict[str, Any]) -> bool:
    """kube-scheduler wrote PodScheduled=False on the pod: its last attempt failed (a filter, ours or
    its own, or a bind), so it waits in the backoff or unschedulable queue."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False":
            return True
    return False


def _pod_identity(pod: dict[str, Any]) -> tuple[PodKey, str]:
    meta = pod.get("metadata") or {}
    key = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    return key, str(meta.get("uid") or "")


class Scheduler:
    def __init__(
        self,
        store: ClusterStore,
        ledger: GangLedger,
        *,
        reason_nodes: int = 16,
        native_gang_scheduling: bool = False,
        preemption_hold_s: float = 60.0,
        default_queue: str = "default-queue",
        settle_s: float = 5.0,
        exact_refusals_max: int = 64,
        bind_fence_s: float = 0.0,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.bind_fence_s = bind_fence_s
        self.fence_until = ledger.clock() + bind_fence_s
        """No bind before this (the ledger's clock): see ClusterSource.bind_fence_s."""
        self.reason_nodes = reason_nodes
        self.native_gang_scheduling = native_gang_scheduling
        self._arrivals_seen = (-1, -1)  # (pods_added, grouping_gen) at the last quorum_arrived look
        self.told = ReasonsTold()
        self.bind_times_s: list[float] = []
        """Seconds from each gang's first member seen to its quorum bound, for the server to take."""
        self.preemption_hold_s = preemption_hold_s
        self.preemption_outcomes: collections.Counter[str] = collections.Counter()
        """Preemptions by outcome (planned, no-domain, completed, expired), for the server to take."""
        self.preemption_victims: collections.Counter[str] = collections.Counter()
        """Victims evicted by preemptors, by kind (gang, pod), for the server to take."""
        self.preempt_effects: list[Effect] = []
        """Writes decided by the preempt verb (it answers candidates only), for the server to run."""
        self.evictions = preemption.Evictions()
        """What kube-scheduler evicts for each preemptor, so its retry is not turned away by a cache
        that has not yet seen the victims go."""
        self.default_queue = default_queue
        """The queue of a gang that names none (no PodGroup spec.queue, no kai.scheduler/queue label)."""
        self.queue_holds: dict[GroupKey, tuple[str, str]] = {}
        """Gangs (and plain pods) waiting for their queue: key -> (queue, why); see queues.py."""
        self._queue_snapshot: tuple[tuple[int, int, int], queues.QueueSnapshot | None] = ((-1, -1, -1), None)
        self._pod_no_fit: dict[GroupKey, tuple[PodKey, int]] = {}
        """Plain pods (groups of one), and gangs whose quorum is bound, whose last filter of a pod placed
        on its own found no offered node to fit it: key -> (the pod, store.release_gen then). Rebuilt
        by filtering again; read by _stuck."""
        self._no_fit_gen = 0  # bumps when _pod_no_fit, or who the preempt verb acts for, changes
        self._queue_errors: dict[str, str] = {}  # the malformed Queues last said, so each is logged once
        self.queue_book = queues.QueueBook(store, default_queue)
        self._held_need: dict[GroupKey, dict[str, int]] = {}
        self._admit_looked: dict[GroupKey, int] = {}  # gang -> store.change_gen at _preempt_to_admit's look
        self._holds_checked = (-1, -1, -1)  # (change_gen, ledger.gen, _no_fit_gen) at the last look
        self._queue_status_next_s = 0.0
        self._reclaim_looked: dict[GroupKey, float] = {}  # gang -> when reclaims_tick last took it
        self.settling = SettlingRows(settle_s=settle_s, clock=ledger.clock)
        self.exact_refusals_max = exact_refusals_max
        self._all_rows = np.zeros(0, dtype=np.int32)  # 0..n_rows-1, for a fit over the whole cache
        store.add_listener(self._on_change)
        for row in sorted(store.row_names):
            # in the store before this listener (an embedded cluster, attached first): its bindings
            # may be moments old, as new to kube-scheduler's cache as a watch event's
            self.settling.mark(row)

    def _gated_natively(self, pod: dict[str, Any]) -> bool:
        """kube-scheduler's own GangScheduling plugin gates this pod (see GangSettings): one gate only."""
        if not self.native_gang_scheduling:
            return False
        group = (pod.get("spec") or {}).get("schedulingGroup")
        return isinstance(group, dict) and bool(group.get("podGroupName"))

    # ================================================================= filter
    def rows_of(self, node_names: Sequence[str]) -> np.ndarray:
        rows = self.store.node_rows
        try:
            return np.fromiter(map(rows.__getitem__, node_names), dtype=np.int32, count=len(node_names))
        except KeyError:
            raise self._unknown_nodes(node_names) from None

    def _unknown_nodes(self, node_names: Sequence[str]) -> UnknownNodesError:
        unknown = [n for n in node_names if n not in self.store.node_rows]
        shown = ", ".join(repr(n[:64]) for n in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        return UnknownNodesError(
            f"{len(unknown)} node name(s) unknown to the extender's cluster cache: {shown}{more}"
        )

    def plain_refusals(self, pod: dict[str, Any]) -> np.ndarray | None:
        """For a plain pod: the rows it must not have; every other known node passes. None: the
        general path decides (a gang, a plan, a topology, a preemptor's forgiveness, a resource no
        node offers, anything unusual).

        The rows where the pod does not fit (or that are not schedulable) are found over the whole
        cache at once, without mapping offered names to rows. When they are few (up to
        `exact_refusals_max`) they are all refused: exactly what `_filter_single` refuses. When they
        are many (a full cluster), only those where this cache can know more than kube-scheduler's,
        whose own fit ran on its cache before this call, are refused: rows holding reservations
        (plans, binds, preemptions), not schedulable here, or whose room changed within the settle
        time (`settling`); kube-scheduler did not offer the others.
        """
        key, uid = _pod_identity(pod)
        if not self._gated_natively(pod):
            m = self.store.membership_of(pod)
            group = m.group if m.state is MembershipState.MEMBER else None
            if group is None or group.source is not Source.SINGLE_POD:
                return None
        ledger = self.ledger
        if ledger.planned(key) is not None or ledger.gang_of(key) is not None or uid in self.evictions:
            return None
        if queues.in_use(self.store):
            return None  # queues in use: a plain pod counts against its queue's limits (_filter_single)
        request, missing = self.store.request_vector(self._requests(pod, key, uid))
        if missing:
            return None
        arrays = self.store.arrays
        n = arrays.n_rows
        if len(self._all_rows) != n:
            self._all_rows = np.arange(n, dtype=np.int32)
        fits = placement.fit_mask(arrays, self._all_rows, request)
        refused = np.flatnonzero(~(fits & arrays.schedulable[:n]))
        if len(refused) > self.exact_refusals_max:
            refused = refused[~arrays.schedulable[refused] | np.isin(refused, self._constrained_rows())]
        return refused

    def plain_passed(self, pod: dict[str, Any]) -> None:
        """A plain pod passed on `plain_refusals`: what `filter` notes of a pass."""
        key = _pod_identity(pod)[0]
        self.ledger.note_answer(key, turned_away=False)
        self.told.forget_pod(key)

    def _constrained_rows(self) -> np.ndarray:
        """Rows where this cache may know more than kube-scheduler's: held, settling (cordoned rows
        are refused whatever their number)."""
        held = [res.row for res in self.store.reservations.values()]
        return np.concatenate([np.asarray(held, dtype=np.int64), self.settling.rows()])

    def node_usable(self, node: str) -> bool:
        row = self.store.node_rows.get(node)
        return row is not None and bool(self.store.arrays.schedulable[row])

    def planned_node_for(self, pod: dict[str, Any]) -> str | None:
        """The node the plan holds for this very pod (same uid as the plan and the cache)."""
        key, uid = _pod_identity(pod)
        planned = self.ledger.planned_node(key, uid)
        if planned is None:
            return None
        rec = self.store.pods.get(key)
        if rec is not None and uid and rec.uid and rec.uid != uid:
            return None
        return planned

    def filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        decision = self._filter(pod, node_names)
        key = _pod_identity(pod)[0]
        self.ledger.note_answer(key, turned_away=decision.verdict is not Verdict.PASS)
        gang = self._gang_of_pod(pod)
        if decision.verdict is Verdict.PASS:
            self.told.forget_pod(key)  # sent to bind: kube-scheduler tells it what comes of that
        elif gang is not None:
            self.told.told(key, decision.reason)  # kube-scheduler writes it on the pod
        if gang is not None:
            decision.effects += self._tell_gang(gang, skip=(key,))
        return decision

    def _gang_of_pod(self, pod: dict[str, Any]) -> GroupKey | None:
        if self._gated_natively(pod):
            return None
        m = self.store.membership_of(pod)
        if m.state is not MembershipState.MEMBER or m.group is None or not m.group.is_gang():
            return None
        return m.group.key

    def _filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        key, uid = _pod_identity(pod)
        planned = self.planned_node_for(pod)
        if planned is not None and self.node_usable(planned) and planned in node_names:
            return FilterDecision(Verdict.PASS, [planned])  # the plan decides; no need to map names
        rows = self.rows_of(node_names)
        membership = self.store.membership_of(pod)
        if self._gated_natively(pod):
            membership = Membership(MembershipState.MEMBER, single_pod_group(pod))
        state = membership.state
        ns, name = pod_ref(key)
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
            self.ledger.await_group(key)
            return FilterDecision(Verdict.WAITING, [], membership.message or "waiting for its group object")
        if state is MembershipState.INVALID or membership.group is None:
            return FilterDecision(Verdict.REJECTED, [], membership.message or "the pod's workload is invalid")
        call = FilterCall(
            pod, key, uid, membership.group, membership, rows, node_names, self._requests(pod, key, uid)
        )
        settled = self._settle_stale_plan(call)
        if settled is not None:
            return settled
        if not call.group.is_gang():
            return self._filter_single(call)
        return self._filter_gang(call)

    def _requests(self, pod: dict[str, Any], key: PodKey, uid: str) -> dict[str, int]:
        """The pod's requests; from the cache when it holds this very pod (the watch keeps them
        current, in-place resize included)."""
        rec = self.store.pods.get(key)
        if rec is not None and uid and rec.uid == uid:
            return rec.requests
        return resources.pod_requests(pod)  # the wire layer validated the quantities

    def _settle_stale_plan(self, call: FilterCall) -> FilterDecision | None:
        """A plan held for this name that the answer above could not use: its node is gone or not
        offered, or it was made for a pod since recreated. Move the member (the answer), or drop
        the plan (None: the caller plans afresh)."""
        key = call.key
        planned = self.ledger.planned(key)
        gang = self.ledger.gang_of(key)
        if planned is None or gang is None:
            return None
        if self.ledger.is_releasing(key):
            return FilterDecision(Verdict.WAITING, [], f"gang {gang}: {key} is being bound to {planned.node}")
        if self.planned_node_for(call.pod) is None:
            self.ledger.discard(gang, f"{key} was recreated after the plan was made")
            return None
        rec = self.store.pods.get(key) or PodRecord(key=key, obj=call.pod, requests=call.requests)
        member = planning.Member(rec, call.membership.subgroup)
        node = planning.repair(self.store, self.ledger, call.group, member, call.rows)
        if node is not None:
            log.info("gang %s: %s moved from %s to %s (not offered)", gang, key, planned.node, node)
            self.ledger.move(gang, key, node, member.rec.requests)
            return FilterDecision(Verdict.PASS, [node])
        self.ledger.exclude_and_discard(
            gang, key, planned.node, f"planned node {planned.node} is no longer offered for {key}"
        )
        return None

    # ----------------------------------------------------------------- single pods
    def _filter_single(self, call: FilterCall) -> FilterDecision:
        return self._note_pod_fit(call, self._fit_single(call))

    def _fit_single(self, call: FilterCall) -> FilterDecision:
        key, group, rows = call.key, call.group, call.rows
        what = "pod" if group.source.value == "single-pod" else f"{messages.label(group)} member"
        held = self._queue_wait(call, call.requests, "pod" if what == "pod" else "member")
        if held is not None:
            return FilterDecision(Verdict.WAITING, [], f"{what} {key}: {held}")
        request, missing = self.store.request_vector(call.requests)
        if missing:
            return FilterDecision(Verdict.NO_FIT, [], f"{what} {key}: {messages.unoffered_text(missing)}")
        arrays = self.store.arrays
        usable = arrays.schedulable[rows] if len(rows) else np.zeros(0, dtype=bool)
        fits = placement.fit_mask(arrays, rows, request) & usable if len(rows) else usable
        try:
            allowed = planning.domain_mask(
                self.store, self.ledger, group, call.membership.subgroup, rows, exclude=key
            )
        except topology.TopologyError as exc:
            return FilterDecision(Verdict.REJECTED, [], f"{messages.label(group)}: {exc}")
        if allowed is not None:
            fits &= allowed
        if not fits.all() and call.uid in self.evictions:
            for i in np.flatnonzero(~fits):
                node = call.node_names[i]
                ok = bool(usable[i]) and (allowed is None or bool(allowed[i]))
                fits[i] = ok and self._fits_once_evicted(call.pod, call.uid, node, request)
        passed = list(call.node_names) if fits.all() else [call.node_names[i] for i in np.flatnonzero(fits)]
        if passed:
            return FilterDecision(Verdict.PASS, passed)
        reason = f"{what} {key}: {messages.shortfall_text(self.store, rows, request, allowed)}"
        return FilterDecision(Verdict.NO_FIT, [], reason, unresolvable=allowed is not None)

    # ----------------------------------------------------------------- gangs
    def _filter_gang(self, call: FilterCall) -> FilterDecision:
        key, group, leaf = call.key, call.group, call.membership.subgroup
        ledger = self.ledger
        members = [
            planning.Member(rec, self.store.membership(rec).subgroup)
            for rec in self.store.group_members(group.key)
            if is_live(rec.obj)
        ]
        if key not in {m.key for m in members}:
            members.append(planning.Member(PodRecord(key=key, obj=call.pod, requests=call.requests), leaf))
        bound = ledger.bound_counts(group)
        if ledger.placed_as_it_comes(group, leaf, bound):
            return self._filter_single(call)  # beyond quorum: placed as it comes, inside the domain
        quorum_bound = ledger.quorum_bound(group, bound)
        leaf_need = group.leaf_quorum(leaf)
        entry = ledger.entry(group.key)
        if entry is not None and entry.plan and key not in entry.plan:
            what = "the members planned now" if quorum_bound else "its quorum"
            return FilterDecision(
                Verdict.WAITING, [], f"gang {group.key}: waiting for {what} to bind before placing {key}"
            )
        left = ledger.backoff_left(group.key)
        if left > 0 and entry is not None:
            # the gang's own reason (it says how long the backoff is), never a countdown: what the pod
            # is told must stand still while the gang does, or every retry would rewrite its siblings
            return FilterDecision(Verdict.WAITING, [], self._gang_message(group.key, entry.last_reason))
        counts = self.store.finished_counts(group)  # they ran: the quorum counts them as KAI does
        finished = sum(counts.values())
        for m in members:
            counts[m.leaf] = counts.get(m.leaf, 0) + 1
        if quorum_bound:
            # the gang is bound but this subgroup is not: its own minMember binds together
            if counts.get(leaf, 0) < leaf_need:
                have = counts.get(leaf, 0)
                reason = f"gang {group.key} subgroup {leaf} waiting for pods: "
                reason += f"{have} exist, {leaf_need} needed"
                return FilterDecision(Verdict.WAITING, [], reason)
            leaves: tuple[str | None, ...] = tuple(
                lf
                for lf, n in sorted(counts.items(), key=lambda kv: str(kv[0]))
                if n >= group.leaf_quorum(lf) > bound.get(lf, 0)
            )
        else:
            ready = group.ready_leaves(counts)
            if ready is None:
                need = group.quorum_upper_bound()
                have = f"{len(members)} exist" + (f" and {finished} finished" if finished else "")
                reason = f"gang {group.key} waiting for pods: {have}, {need} needed for quorum"
                ledger.set_reason(group.key, reason)
                self.told.counting(group.key, reason)
                ledger.await_pods(group)
                waiting = self._story(group, key, "GangWaiting", reason)
                return FilterDecision(Verdict.WAITING, [], reason, effects=waiting)
            if leaf not in ready:
                reason = (
                    f"gang {group.key} subgroup {leaf} is not ready: {counts.get(leaf, 0)} pods exist, "
                    f"{leaf_need} needed (or its parent group is short of ready subgroups)"
                )
                return FilterDecision(Verdict.WAITING, [], reason)
            leaves = ready
        preempted = None
        pending = ledger.preemption(group.key)
        queued = self.queue_snapshot() is not None  # no Queue objects: nothing to sum
        if pending is None and queued:
            need = self._gang_need(call, members, leaves, bound)
            held = self._queue_wait(call, need, "gang")
            if held is not None:
                started = self._preempt_to_admit(call, members, leaves, need)
                if started is not None:
                    return started
                reason = self._gang_message(group.key, held)
                ledger.set_reason(group.key, reason)
                return FilterDecision(Verdict.WAITING, [], reason)
        if pending is not None:
            if not ledger.victims_gone(group.key):
                return FilterDecision(Verdict.WAITING, [], self._gang_message(group.key, pending.reason))
            if queued:
                # planned into the room held for it: admitted again (limits hold on every step), that
                # room, charged to its queue until now, counted out as the plan replaces it
                own = pending.queue == self.gang_queue(group, call.pod)[0]
                credit = pending.held_room() if own else {}
                need = self._gang_need(call, members, leaves, bound)
                held = self._queue_wait(call, need, "gang", fair_share=False, credit=credit)
                if held is not None:
                    ledger.end_preemption(group.key)  # room it may not use goes back to everyone
                    reason = self._gang_message(group.key, held)
                    ledger.set_reason(group.key, reason)
                    return FilterDecision(Verdict.WAITING, [], reason)
            preempted = ledger.end_preemption(group.key)  # its room is the gang's to plan into now
        signature = (
            self.store.release_gen,  # first: _stuck reads it
            self.store.grouping_gen,
            hash(tuple(m.key for m in members)),
            hash(call.rows.tobytes()),
        )
        cached = ledger.cached_no_fit(group.key, signature)
        if cached is not None:
            return FilterDecision(Verdict.NO_FIT, [], cached)
        try:
            result = planning.plan_members(
                self.store, ledger, group, members, leaves, me=key, offered_rows=call.rows
            )
            if result is not None and result.reason and ledger.excluded(group.key):
                # nodes refused once may be fine now; they are only a hint, never the reason a gang
                # that fits stays unplanned
                retry = planning.plan_members(
                    self.store,
                    ledger,
                    group,
                    members,
                    leaves,
                    me=key,
                    offered_rows=call.rows,
                    avoid_refused=False,
                )
                if retry is not None and not retry.reason:
                    ledger.forget_refusals(group.key)
                    result = retry
        except topology.TopologyError as exc:
            reason = f"gang {group.key}: {exc}"
            ledger.set_reason(group.key, reason)
            return FilterDecision(Verdict.REJECTED, [], reason)
        if result is None:
            if quorum_bound:
                return self._filter_single(call)
            return FilterDecision(
                Verdict.WAITING, [], f"gang {group.key}: waiting for its quorum to bind before placing {key}"
            )
        if result.reason:
            reason = result.reason
            if preempted is not None:
                # the victims are gone but the gang does not fit yet (kube-scheduler has not offered the
                # freed nodes, say): the room stays held for it until the hold ends; never preempt again
                preempted.held.clear()
                ledger.start_preemption(preempted)
                return FilterDecision(Verdict.WAITING, [], self._gang_message(group.key, preempted.reason))
            started, reason = self._preempt(call, members, leaves, reason)
            if started is None:
                started = self._reclaim(call, members, leaves)
            if started is not None:
                return started
            ledger.remember_no_fit(group.key, signature, reason)
            return FilterDecision(Verdict.NO_FIT, [], reason)
        ledger.plan(group, result.assignment, domain=result.domain)
        if preempted is not None:
            self.preemption_outcomes["completed"] += 1
        effects = []
        for pk, (planned, _) in result.assignment.items():
            if pk != key and self._turned_away(pk):
                # only a pod we turned away sits in kube-scheduler's backoff or unschedulable queue;
                # the others are still in its active queue and need no API write
                effects.append(Effect("nudge", *pod_ref(pk), {"value": f"{group.name}:{planned.node}"}))
        # the gang's story is told once, on the member that planned it: an event per member per step
        # would be more writes than the binds themselves on an API server that is the bottleneck
        where = f" in {result.domain}" if result.domain else ""
        message = f"gang {group.key}: {len(result.assignment)} pods planned{where}"
        log.info(
            "%s",
            message,
            extra={"pod": key, "gang": group.key, "domain": result.domain, "members": len(result.assignment)},
        )
        effects += self._story(group, key, "GangPlanned", message)
        return FilterDecision(Verdict.PASS, [result.assignment[key][0].node], effects=effects)

    # ----------------------------------------------------------------- queues
    def queue_snapshot(self) -> queues.QueueSnapshot | None:
        """Every queue's usage and fair share, recomputed only when the store changed; None when the
        cluster has no Queue objects (then nothing is enforced)."""
        gen, snap = self._queue_snapshot
        now_gen = (self.store.change_gen, self.ledger.gen, self._no_fit_gen)
        if gen != now_gen:
            planned = [g for g, e in self.ledger.gangs.items() if e.plan]
            # the room held for a preemptor is its queue's: the victims' charge left with them
            holding = {
                g: (p.queue, p.held_room())
                for g, p in self.ledger.preemptions.items()
                if p.queue is not None and p.held
            }
            snap = self.queue_book.snapshot(
                planned,
                holding,
                victims=self.ledger.victims_in_flight(),
                stuck=self._stuck(),
                incoming=self.ledger.incoming(),
                idle=self._pod_idle,
            )
            self._queue_snapshot = (now_gen, snap)
            self._log_queue_errors(snap.tree.errors if snap is not None else {})
            for gang in [g for g in self.queue_holds if not self.store.group_members(g)]:
                del self.queue_holds[gang]  # gone: bounded memory
                self._held_need.pop(gang, None)
            for gang in [g for g in self._admit_looked if g not in self.queue_holds]:
                del self._admit_looked[gang]
            for single in [g for g, (pk, _) in self._pod_no_fit.items() if pk not in self.store.pods]:
                del self._pod_no_fit[single]  # gone: bounded memory
        return snap

    def _stuck(self) -> list[GroupKey]:
        """Gangs whose last plan found no fit, preemption or reclaim, with no capacity grown since
        (the no-fit signature `_filter_gang` remembers starts with the store's release_gen), and
        plain pods whose last filter found no offered node to fit them, with no capacity grown since,
        that kube-scheduler's preemption is not freeing room for (not nominated to a node, no victims
        of the preempt verb's on their way out for them): they could use no room held for them
        (queues.admission). A grouping change elsewhere (any group object written) does not make
        them fit."""
        release_gen = self.store.release_gen
        stuck = [
            key
            for key, e in self.ledger.gangs.items()
            if e.no_fit is not None and not e.plan and e.no_fit[0][0] == release_gen
        ]
        for key, (pk, gen) in self._pod_no_fit.items():
            rec = self.store.pods.get(pk)
            if gen == release_gen and rec is not None and not self._room_coming(rec):
                stuck.append(key)
        return stuck

    def _pod_idle(self, key: GroupKey) -> bool:
        """Whether the plain pod of group `key`, pending, could use no room as the cluster is now: it
        asks for a resource no node has, or no schedulable node has room for it,
        and kube-scheduler's preemption is not freeing any for it (queues.QueueSnapshot.idle). Its
        own filters passing no node, kube-scheduler may never ask this service to say so."""
        pending = [r for r in self._group_pods(key) if not r.node_name and is_live(r.obj)]
        if len(pending) != 1 or self._room_coming(pending[0]):
            return False
        request, missing = self.store.request_vector(pending[0].requests)
        if missing:
            return True
        arrays = self.store.arrays
        rows = np.flatnonzero(arrays.schedulable[: arrays.n_rows]).astype(np.int32)
        return not (len(rows) and bool(placement.fit_mask(arrays, rows, request).any()))

    def _group_pods(self, key: GroupKey) -> list[PodRecord]:
        members = self.store.group_members(key)
        if members:
            return list(members)
        rec = self.store.pods.get(key)  # a plain pod's group is keyed as the pod is
        return [rec] if rec is not None else []

    def _room_coming(self, rec: PodRecord) -> bool:
        """kube-scheduler's preemption may be freeing room for the pod: it is nominated to a node, or
        the preempt verb's victims are leaving for it."""
        return rec.uid in self.evictions or bool((rec.obj.get("status") or {}).get("nominatedNodeName"))

    def _note_pod_fit(self, call: FilterCall, decision: FilterDecision) -> FilterDecision:
        """Remember whether a plain pod, or a gang member beyond its bound quorum (placed as it comes,
        inside the gang's domain), fit nowhere (for _stuck); the decision, unchanged. A gang whose
        quorum is bound waits only for such members: when they fit nowhere it could use no room held
        for it either."""
        if decision.verdict is Verdict.NO_FIT:
            mark = (call.key, self.store.release_gen)
            if self._pod_no_fit.get(call.group.key) != mark:
                self._pod_no_fit[call.group.key] = mark
                self._no_fit_gen += 1
        elif self._pod_no_fit.pop(call.group.key, None) is not None:
            self._no_fit_gen += 1
        return decision

    def _log_queue_errors(self, errors: dict[str, str]) -> None:
        """Say each malformed Queue once, when its fault appears (it fails closed: see read_tree)."""
        for name, why in sorted(errors.items()):
            if self._queue_errors.get(name) != why:
                log.warning("queue %s is malformed: %s; what cannot be read admits nothing", name, why)
        self._queue_errors = dict(errors)

    def queue_name(self, group: GroupSpec, pod: dict[str, Any]) -> str:
        """The queue `pod` is charged to as its gang and labels name it (see gang_queue for a gang's)."""
        return queues.queue_of(self.store, group, pod, self.default_queue)

    def gang_queue(
        self, group: GroupSpec, pod: dict[str, Any], snap: queues.QueueSnapshot | None = None
    ) -> tuple[str | None, str]:
        """The one queue of `pod`'s gang, or (None, why) when its members name different queues."""
        snap = snap if snap is not None else self.queue_snapshot()
        if snap is None:
            return self.queue_name(group, pod), ""
        return queues.gang_queue(snap, self.store, group, pod, self.default_queue)

    def _queue_wait(
        self,
        call: FilterCall,
        need: dict[str, int],
        what: str,
        *,
        fair_share: bool = True,
        credit: dict[str, int] | None = None,
    ) -> str | None:
        """Why the gang (or pod) must wait for its queue (queues.admission), or None to go on."""
        snap = self.queue_snapshot()
        reason = queue = None
        if snap is not None:
            queue, reason = self.gang_queue(call.group, call.pod, snap)
            if queue is not None:
                reason = queues.admission(
                    snap, queue, need, call.group.key, what=what, fair_share=fair_share, credit=credit
                )
        if not reason:
            self.queue_holds.pop(call.group.key, None)
            self._held_need.pop(call.group.key, None)
            return None
        self.queue_holds[call.group.key] = (queue or "", reason)
        self._held_need[call.group.key] = dict(need)
        return reason

    def _queue_limit_at_bind(
        self, rec: PodRecord, group: GroupSpec | None, *, held: bool = False
    ) -> str | None:
        """Why binding `rec` would take its queue (or an ancestor) past a limit, or None. `held`: its
        own hold is counted in the usage already (a bind that waited out the fence holding room)."""
        snap = self.queue_snapshot()
        if snap is None:
            return None
        group = group if group is not None else single_pod_group(rec.obj)
        queue, conflict = self.gang_queue(group, rec.obj, snap)
        if queue is None:
            return f"{messages.label(group)}: {conflict}"
        what = "pod" if group.source is Source.SINGLE_POD else "member"
        credit = rec.requests if held else None
        return queues.admission(
            snap, queue, rec.requests, group.key, what=what, fair_share=False, credit=credit
        )

    def queue_holds_over(self) -> list[Effect]:
        """Bring back the turned-away members of gangs (and pods) held for their queue once admission
        passes: kube-scheduler retries a parked pod only on some cluster events, and usage dropping
        below a limit, or another queue's gang being planned, is not always one of them. Looked at
        only when the store changed (the ticker's pass)."""
        gen = (self.store.change_gen, self.ledger.gen, self._no_fit_gen)
        if not self.queue_holds or self._holds_checked == gen:
            return []
        self._holds_checked = gen
        snap = self.queue_snapshot()
        effects = []
        for gang, (queue, _) in list(self.queue_holds.items()):
            need = self._held_need.get(gang, {})
            if snap is not None:
                counted, conflict = snap.group_queue(gang)
                if conflict:
                    continue  # its members still name different queues
                queue = counted or queue
                if queues.admission(snap, queue, need, gang) is not None:
                    continue
            del self.queue_holds[gang]
            self._held_need.pop(gang, None)
            effects += self._nudge_turned_away(gang, "queue")
        return effects

    def _gang_need(
        self,
        call: FilterCall,
        members: Sequence[planning.Member],
        leaves: Sequence[str | None],
        bound: dict[str | None, int],
    ) -> dict[str, int]:
        """What planning the gang now would hold: the unbound members each leaf needs for its quorum
        (the pod being filtered first, as plan_members takes them)."""
        need: dict[str, int] = {}
        for leaf in leaves:
            pending = sorted(
                (
                    m
                    for m in members
                    if m.leaf == leaf and not (m.rec.node_name or m.key in self.ledger.assumed)
                ),
                key=lambda m: (m.key != call.key, m.key),
            )
            for m in pending[: max(0, call.group.leaf_quorum(leaf) - bound.get(leaf, 0))]:
                for r, v in m.rec.requests.items():
                    need[r] = need.get(r, 0) + v
        return need

    def queue_status(self) -> list[Effect]:
        """The status writes of the Queues whose allocated or requested is not what the object says,
        at most every QUEUE_STATUS_INTERVAL_S (the ticker's pass)."""
        now = self.ledger.clock()
        if now < self._queue_status_next_s:
            return []
        self._queue_status_next_s = now + QUEUE_STATUS_INTERVAL_S
        snap = self.queue_snapshot()
        if snap is None:
            return []
        effects = []
        for name in sorted(snap.tree.queues):
            obj = self.store.get(QUEUE_API_GROUP, QUEUE_KIND, None, name)
            status = queues.status_of(snap, name)
            shown = (obj or {}).get("status") or {}
            if obj is None or all(shown.get(field) == value for field, value in status.items()):
                continue
            data = {"group": QUEUE_API_GROUP, "kind": QUEUE_KIND, "status": status}
            effects.append(Effect("group-status", "", name, data))
        return effects

    def describe_queues(self) -> dict[str, Any]:
        """Every queue's spec, usage, fair share and the gangs it holds, for /debug/queues."""
        snap = self.queue_snapshot()
        if snap is None:
            return {"enforced": False, "defaultQueue": self.default_queue, "queues": []}
        return {
            "enforced": True,
            "defaultQueue": self.default_queue,
            "queues": queues.describe(snap, self.queue_holds),
            "unknownQueues": dict(sorted(snap.unknown.items())),
        }

    # ----------------------------------------------------------------- a gang as preemptor
    def _preempt_to_admit(
        self,
        call: FilterCall,
        members: Sequence[planning.Member],
        leaves: Sequence[str | None],
        need: dict[str, int],
    ) -> FilterDecision | None:
        """A gang its queue holds (a limit of the queue or an ancestor, its fair share) that may
        preempt: evict lower-priority gangs and pods of its own queue, enough that with them gone it
        is admitted and fits (KAI preempts within a queue, the queue's limits kept on the way), and
        hold their room for it. None when no such eviction admits it; tried once per cache change."""
        snap = self.queue_snapshot()
        if snap is None:
            return None
        queue, _ = self.gang_queue(call.group, call.pod, snap)
        if queue is None or queues.admission(snap, queue, {}, call.group.key) is not None:
            return None  # no one queue, or one that takes no workloads: no eviction admits it
        if self._admit_looked.get(call.group.key) == self.store.change_gen:
            return None  # nothing changed since the last look: the answer is the same
        self._admit_looked[call.group.key] = self.store.change_gen

        def enough(units: Sequence[preemptor.Unit]) -> bool:
            credit: dict[str, int] = {}
            for u in units:
                for v in u.victims:
                    if v.node:  # a victim holding room is charged to the queue; a pending one is not
                        for r, n in v.requests.items():
                            credit[r] = credit.get(r, 0) + n
            return queues.admission(snap, queue, need, call.group.key, credit=credit) is None

        started, _ = self._preempt(call, members, leaves, "", enough=enough)
        return started

    def _preempt(
        self,
        call: FilterCall,
        members: Sequence[planning.Member],
        leaves: Sequence[str | None],
        no_fit: str,
        *,
        enough: Callable[[Sequence[preemptor.Unit]], bool] | None = None,
    ) -> tuple[FilterDecision | None, str]:
        """A gang that fits nowhere and may preempt: evict the cheapest lower-priority victims in one
        domain and hold that room for it (the decision), or say why no domain can be freed (the
        reason). Pods of priority 0 or below, and preemptionPolicy Never, never preempt. `enough`:
        the victims must also satisfy it (its queue admits the gang once they are gone)."""
        group = call.group
        me = next((m for m in members if m.key == call.key), None)
        if me is None or not may_preempt(call.pod):
            return None, no_fit
        # the gang's lowest member priority: no victim may be equal to or above any of its members
        priority = min(
            pod_priority(m.rec.obj) if m.key != call.key else pod_priority(call.pod) for m in members
        )
        if priority <= 0:
            return None, no_fit
        admit = None
        if self.queue_snapshot() is not None:
            # KAI: preemption is within a queue, by priority; across queues only reclaim evicts
            queue = self.gang_queue(group, call.pod)[0]
            if queue is None:
                return None, no_fit  # no one queue: not admitted, so it evicts no one

            def admit(u: preemptor.Unit) -> bool:
                return self._queue_of_unit(u) == queue

        try:
            plan = preemptor.plan_preemption(
                self.store,
                self.ledger,
                group,
                members,
                leaves,
                me=me,
                priority=priority,
                admit=admit,
                enough=enough,
            )
        except topology.TopologyError:
            return None, no_fit
        if plan is not None and not plan.units:
            return None, no_fit  # it fits without evicting anyone, on nodes kube-scheduler did not offer
        if plan is None:
            if enough is not None:
                return None, no_fit  # a queue's wait, not a gang that fits nowhere: no outcome to count
            self.preemption_outcomes["no-domain"] += 1
            levels = planning.constraint_levels(self.store, group, None)
            scope = f"no {messages.level_name(self.store, levels[0])}" if levels else "not the cluster"
            return None, (
                f"{no_fit}; {scope} can be freed enough by evicting pods of priority below {priority}: "
                "waiting, nothing evicted"
            )
        reason = preemptor.reason_text(group.key, plan)
        where = f" in {plan.domain}" if plan.domain else ""

        def why(v: Victim) -> str:
            return f"preempted by gang {group.key} (priority {priority}) to make room{where}"

        return self._evict_for(call, plan, priority, reason, why, "planned"), reason

    def _evict_for(
        self,
        call: FilterCall,
        plan: preemptor.PreemptionPlan,
        priority: int,
        reason: str,
        why: Callable[[Victim], str],
        outcome: str,
    ) -> FilterDecision:
        """Start evicting a preemption's (or a reclaim's) victims, whole gangs together, and hold the room
        each one frees for the gang: the waiting answer, with the evictions and the gang's story."""
        group = call.group
        queue = self.gang_queue(group, call.pod)[0] if self.queue_snapshot() is not None else None
        record = Preemption(
            queue=queue,
            gang=group.key,
            domain=plan.domain,
            victims={v.pod: v for v in plan.victims},
            gangs=plan.gangs,
            priority=priority,
            hold_until=self.ledger.clock() + self.preemption_hold_s,
            where=plan.where,
            reason=reason,
            hold_s=self.preemption_hold_s,
        )
        self.ledger.start_preemption(record)
        self.preemption_outcomes[outcome] += 1
        self.preemption_victims["gang"] += len(plan.gangs)
        self.preemption_victims["pod"] += len(plan.plain_pods)
        effects = []
        for v in plan.victims:
            text = why(v)
            if v.gang is not None:
                text += f"; evicted with its whole gang {v.gang}, never part of it"
            data = {"uid": v.uid, "reason": text, "gang": v.gang or ""}
            effects.append(Effect("evict", *pod_ref(v.pod), data))
        log.info(
            "%s",
            reason,
            extra={"pod": call.key, "gang": group.key, "domain": plan.domain, "members": len(plan.victims)},
        )
        effects += self._story(
            group, call.key, "GangReclaiming" if outcome == "reclaim" else "GangPreempting", reason
        )
        return FilterDecision(Verdict.WAITING, [], reason, effects=effects)

    def _queue_of_unit(self, u: preemptor.Unit) -> str:
        """The queue whose usage a preemption or reclaim unit's eviction lowers."""
        rec = self.store.pods.get(u.victims[0].pod)
        if rec is None:
            return ""
        m = self.store.membership(rec)
        return self.queue_name(m.group or single_pod_group(rec.obj), rec.obj)

    def _reclaim(
        self, call: FilterCall, members: Sequence[planning.Member], leaves: Sequence[str | None]
    ) -> FilterDecision | None:
        """A gang that fits nowhere, of a queue that stays within its fair share with it: evict whole
        gangs (and pods) of other queues over their fair share, never taking one below its quota
        (queues.reclaimable), and hold the room for it, as a preemption does. Priority plays no part:
        reclaim is between queues. None when queues are not in use or nothing may be reclaimed."""
        snap = self.queue_snapshot()
        me = next((m for m in members if m.key == call.key), None)
        if snap is None or me is None:
            return None
        group = call.group
        queue = self.queue_name(group, call.pod)
        need = self._gang_need(call, members, leaves, self.ledger.bound_counts(group))
        if not queues.may_reclaim(snap, queue, need):
            return None

        def freed(units: Sequence[preemptor.Unit]) -> dict[str, int]:
            total: dict[str, int] = {}
            for u in units:
                for v in u.victims:
                    if v.node:
                        for r, n in v.requests.items():
                            total[r] = total.get(r, 0) + n
            return total

        def admit(u: preemptor.Unit) -> bool:
            return queues.reclaimable(snap, queue, need, {self._queue_of_unit(u): freed([u])})

        try:
            plan = preemptor.plan_preemption(
                self.store, self.ledger, group, members, leaves, me=me, priority=RECLAIM_ABOVE, admit=admit
            )
        except topology.TopologyError:
            return None
        if plan is None or not plan.units:
            return None
        by_queue: dict[str, list[preemptor.Unit]] = {}
        for u in plan.units:
            by_queue.setdefault(self._queue_of_unit(u), []).append(u)
        if not queues.reclaimable(snap, queue, need, {vq: freed(us) for vq, us in by_queue.items()}):
            return None  # each unit alone keeps every queue at its quota, not all of them together
        where = f" in {plan.domain}" if plan.domain else ""
        shown = ", ".join(plan.gangs[:3]) + (
            f" and {len(plan.gangs) - 3} more" if len(plan.gangs) > 3 else ""
        )
        what = f"{len(plan.gangs)} gang(s) ({shown})" if plan.gangs else ""
        if plan.plain_pods:
            what += (" and " if what else "") + f"{len(plan.plain_pods)} pod(s)"
        reason = (
            f"gang {group.key}: queue {queue} is below its fair share: reclaiming {what}{where} from "
            f"queue(s) {', '.join(sorted(by_queue))} over theirs; waiting for them to go"
        )

        def why(v: Victim) -> str:
            return f"reclaimed for gang {group.key} of queue {queue}, below its fair share{where}"

        priority = min(
            pod_priority(m.rec.obj) if m.key != call.key else pod_priority(call.pod) for m in members
        )
        return self._evict_for(call, plan, priority, reason, why, "reclaim")

    def preemptions_tick(self) -> list[Effect]:
        """Give up preemptions whose hold ended, and bring back the members of a preemptor whose
        victims are all gone (kube-scheduler does not retry a pod because others were deleted)."""
        effects: list[Effect] = []
        for p in self.ledger.expire_preemptions():
            self.preemption_outcomes["expired"] += 1
            log.warning("gang %s: preemption hold in %s expired", p.gang, p.domain or "the cluster")
            effects += self._tell_gang(p.gang)
        for gang, p in list(self.ledger.preemptions.items()):
            if not p.nudged and self.ledger.victims_gone(gang):
                p.nudged = True
                effects += self._nudge_turned_away(gang, "preempted")
        return effects

    def preempt_as_gang(self, pod: dict[str, Any]) -> list[Effect] | None:
        """kube-scheduler found no node for a member of a gang that may preempt (its own filters
        passed none, so this service's filter was never asked) and asks the preempt verb. The gang
        preempts as a whole, through the filter's own path over every node: a plan, a preemption
        started or waited on, or the reason none can be. The effects to run; None when the pod is
        not such a gang member (kube-scheduler's per-pod candidates then stand)."""
        if self._gang_of_pod(pod) is None or pod_priority(pod) <= 0 or not may_preempt(pod):
            return None
        return self._plan_everywhere(pod)

    def _plan_everywhere(self, pod: dict[str, Any]) -> list[Effect]:
        """The gang member's filter over every schedulable node: a plan, a preemption or reclaim started
        or waited on, or the reason none can be; the effects to run."""
        arrays = self.store.arrays
        names = [n for r, n in sorted(self.store.row_names.items()) if arrays.schedulable[r]]
        decision = self.filter(pod, names)
        if decision.verdict is Verdict.PASS:
            # planned: kube-scheduler parks the pod after an empty answer, so bring it back now
            key = _pod_identity(pod)[0]
            decision.effects.append(Effect("nudge", *pod_ref(key), {"value": "planned"}))
        return decision.effects

    def reclaims_tick(self) -> list[Effect]:
        """Reclaim for gangs kube-scheduler never brings here. A gang whose pods each fit no node fails
        kube-scheduler's own filters before the extender is asked, and at a priority that preempts no
        one the preempt verb is never called either: on a cluster another queue fills, a queue below
        its fair share would wait for ever. So, at most every RECLAIM_LOOK_S per gang, a ready gang
        that kube-scheduler marked unschedulable, holds no plan, and whose queue may reclaim is taken
        through its own filter path over every node, as the preempt verb does for a gang."""
        snap = self.queue_snapshot()
        if snap is None:
            return []
        now = self.ledger.clock()
        effects: list[Effect] = []
        for gang, tally in list(snap.groups.items()):
            if not tally.pending or not tally.spec.is_gang() or gang in snap.planned or len(tally.queues) > 1:
                continue  # nothing pending, planned, or of no one queue (not admitted)
            looked = self._reclaim_looked.get(gang)
            if gang in self.ledger.preemptions or (looked is not None and now - looked < RECLAIM_LOOK_S):
                continue
            usable = tally.ready_need()  # a leaf short of pods binds nothing: nothing to reclaim for it
            if usable is None or not usable[0] or not queues.may_reclaim(snap, tally.queue, usable[1]):
                continue
            pod = next(
                (
                    r.obj
                    for r in self.store.group_members(gang)
                    if not r.node_name and is_live(r.obj) and _marked_unschedulable(r.obj)
                ),
                None,
            )
            if pod is None:
                continue
            self._reclaim_looked[gang] = now
            effects += self._plan_everywhere(pod)
        for gang in [g for g in self._reclaim_looked if g not in snap.groups]:
            del self._reclaim_looked[gang]  # gone or all bound: bounded memory
        return effects

    def take_preemption_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        out = (dict(self.preemption_outcomes), dict(self.preemption_victims))
        self.preemption_outcomes.clear()
        self.preemption_victims.clear()
        return out

    # ================================================================= prioritize
    def prioritize(self, pod: dict[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        rows = self.rows_of(node_names)
        key, uid = _pod_identity(pod)
        planned = self.ledger.planned_node(key, uid)
        if planned is not None:
            return [(n, 10 if n == planned else 0) for n in node_names]
        request = self.store.vector(self._requests(pod, key, uid))
        anchors = None
        membership = self.store.membership_of(pod)
        if membership.group is not None and membership.state is MembershipState.MEMBER:
            placed = planning.member_rows(self.store, self.ledger, membership.group, exclude=key)
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
            self.ledger.await_cache(key)  # kube-scheduler parks it after the error: bring it back
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} is not in the extender's cache")
        if uid and rec.uid and rec.uid != uid:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} has uid {rec.uid}, not {uid}")
        if node not in self.store.node_rows:
            return BindDecision(BindVerdict.REFUSE, message=f"node {node} is not in the extender's cache")
        if rec.node_name:
            if rec.node_name == node:
                return BindDecision(BindVerdict.DONE)
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key} is already bound to {rec.node_name}")
        if self.ledger.assumed.get(key) == node:
            return BindDecision(BindVerdict.DONE)  # the API bound it; the watch has not shown it yet
        fence_left_s = self.fence_left_s()
        if fence_left_s > 0 and self.ledger.planned(key) is not None:
            # A planned member arrives once the fence is over, on the cache as it is then: its plan
            # holds the room meanwhile, and a predecessor's binding that lands on it drops the plan
            return BindDecision(
                BindVerdict.FENCED,
                message=self.fence_reason(key),
                wait_s=fence_left_s,
            )
        over = self._plan_past_queue_limit(key)
        if over is not None:
            gang, why = over
            self.ledger.discard(gang, why)
            return BindDecision(BindVerdict.REFUSE, gang=gang, message=f"gang {gang}: {why}; replanning")
        arrival, entry, members = self.ledger.arrive(key, node, uid)
        if arrival is Arrival.WRONG_NODE and entry is not None:
            planned = entry.plan[key].node
            return BindDecision(
                BindVerdict.REFUSE,
                gang=entry.key,
                message=f"gang {entry.key}: {key} is planned on {planned}, not {node}",
            )
        if arrival in ARRIVAL_VERDICT and entry is not None:
            return BindDecision(ARRIVAL_VERDICT[arrival], gang=entry.key, members=members)
        membership = self.store.membership(rec)
        group = membership.group
        if membership.state is not MembershipState.MEMBER and not self._gated_natively(rec.obj):
            # its filter passed while it was in a gang (a plan since dropped): waiting for a group, or
            # invalid, it is nobody's to bind alone
            why = membership.message or "it is in no gang"
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key}: {why}; not binding it")
        if (
            group is not None
            and group.is_gang()
            and membership.state is MembershipState.MEMBER
            and not self._gated_natively(rec.obj)
        ):
            if not self.ledger.placed_as_it_comes(
                group, membership.subgroup, self.ledger.bound_counts(group)
            ):
                # a straggler of a plan that was dropped (timed out, replanned), or a member of a
                # subgroup not bound yet: bound alone it would be a partial gang
                return BindDecision(
                    BindVerdict.REFUSE,
                    gang=group.key,
                    message=f"gang {group.key} has no plan for {key} (it will be planned again); "
                    "not binding it alone",
                )
            outside = self._outside_domain(group, membership.subgroup, key, node)
            if outside:
                return BindDecision(BindVerdict.REFUSE, gang=group.key, message=outside)
        # a single pod or a member beyond a bound quorum: hold its capacity while it binds. Its queue's
        # limit is checked again here: kube-scheduler filters the next pod before this one's bind
        # arrives, so two pods may each have passed filter within the limit that only one fits
        over = self._queue_limit_at_bind(rec, group)
        if over is not None:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key}: {over}")
        request, missing = self.store.request_vector(rec.requests)
        if missing:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key}: {messages.unoffered_text(missing)}")
        held = self.store.reservations.get(key)
        if held is None or held.node != node:
            row = np.array([self.store.node_rows[node]], dtype=np.int32)
            if not bool(placement.fit_mask(self.store.arrays, row, request)[0]) and not (
                self._fits_once_evicted(rec.obj, rec.uid, node, request)
            ):
                return BindDecision(BindVerdict.REFUSE, message=f"pod {key} no longer fits on {node}")
        self.ledger.hold(key, node, rec.requests)
        self.evictions.forget(rec.uid)
        fence_left_s = self.fence_left_s()
        if fence_left_s > 0:  # the hold keeps the room while the POST waits (see fence_over)
            return BindDecision(BindVerdict.NOW, message=self.fence_reason(key), wait_s=fence_left_s)
        return BindDecision(BindVerdict.NOW)

    def _plan_past_queue_limit(self, key: PodKey) -> tuple[GroupKey, str] | None:
        """(gang, why) when `key` is planned, its gang's release has not begun, and the gang's queue
        (or an ancestor) is past its limit with the plan's room counted: bound, the gang would grow
        it. Pods bound beside the plan since it was admitted do that (a predecessor's bindings
        landing within the start-up fence, which no plan saw coming)."""
        gang = self.ledger.gang_of(key)
        if gang is None or self.ledger.planned(key) is None or self.ledger.is_releasing(key):
            return None
        snap = self.queue_snapshot()
        if snap is None:
            return None
        queue, conflict = snap.group_queue(gang)
        if queue is None or conflict:
            return None
        why = queues.past_limit(snap, queue)
        return (gang, f"{why}: pods were bound in the queue while the gang waited to bind") if why else None

    def _give_back_fenced_holds(self, row: int) -> None:
        """Within the fence no single pod's POST has gone out: where a binding that landed meanwhile
        (a predecessor's) over-fills a row, the single pods holding room there give it back now (the
        ledger drops the plans), and fence_over refuses them."""
        if not bool((self.store.arrays.free[row] < 0).any()):
            return
        for pk in [pk for pk, res in self.store.reservations.items() if res.row == row]:
            if pk in self.ledger.binding:
                self.store.unhold(pk)

    def _give_back_room_over_queue_limits(self, pk: PodKey) -> None:
        """The queue rule beside the ledger's node rule (`_drop_plans_overcommitted_by`): a pod this
        process did not bind (a killed predecessor's release landing late, a pod another scheduler
        placed) was not counted when this process admitted the room it holds. Where its landing puts
        its queue, or an ancestor, above a limit, the plans charged to those queues and their
        descendants are dropped (their binds answered, the gangs replan under admission), and so are
        the holds of single pods still waiting out the fence (fence_over refuses them); a release
        already in flight is past recall, and a single pod's POST sent is too."""
        if not self.store.reservations:  # nothing held to give back (a list of 150,000 bound pods)
            return
        if pk in self.ledger.binding or self.ledger.is_releasing(pk):
            return  # bound by this process: admitted with its room held, it adds nothing at landing
        if self.queue_book.counted_allocated(pk):
            return  # counted already (a status write of a pod bound before): nothing landed
        snap = self.queue_snapshot()
        queue = self.queue_book.charged_to(pk) if snap is not None else None
        if snap is None or queue is None:
            return
        over = queues.over_limit(snap, queue)
        if not over:
            return
        why = f"queue {over[-1]} was filled above its limit by pods bound since the plan ({pk} among them)"
        for gang, e in list(self.ledger.gangs.items()):
            if e.plan and not e.releasing and queues.under(snap, snap.group_queue(gang)[0], over):
                self.ledger.discard(gang, why)
        if self.fence_until > self.ledger.clock():
            for held in [h for h in self.ledger.binding if h in self.store.reservations]:
                if queues.under(snap, self.queue_book.charged_to(held), over):
                    self.store.unhold(held)

    def fence_over(self, key: PodKey, node: str) -> str:
        """A single pod held room on `node` while its POST waited out the start-up fence: "" when it
        may be bound now, else why not (a predecessor's binding landed there meanwhile and the room
        is gone, or landed in its queue and the room under the queue's limit is; the caller gives
        the hold back). A pod bound meanwhile is left to the POST, which
        finds it bound (success on the same node, an error elsewhere)."""
        rec = self.store.pods.get(key)
        row = self.store.node_rows.get(node)
        if rec is None or row is None:
            return f"pod {key} or node {node} is gone from the extender's cache"
        if rec.node_name:
            return ""
        if key not in self.store.reservations:  # given back: a queue filled meanwhile, or the node
            over = self._queue_limit_at_bind(rec, self.store.membership(rec).group)
            if over is not None:
                return f"pod {key}: {over}; pods of its queue were bound while its bind waited"
            return f"pod {key} no longer fits on {node}: pods were bound there while its bind waited"
        if not bool((self.store.arrays.free[row] >= 0).all()):
            return f"pod {key} no longer fits on {node}: pods were bound there while its bind waited"
        # the same landings may have used the room its queue's limit left (bind checked it before)
        over = self._queue_limit_at_bind(rec, self.store.membership(rec).group, held=True)
        if over is not None:
            return f"pod {key}: {over}: pods of the queue were bound while its bind waited"
        return ""

    def bind_done(self, key: PodKey, node: str, error: str) -> None:
        """A single pod's API binding finished ("" = bound)."""
        self.ledger.bind_done(key, node, error)

    def _outside_domain(self, group: GroupSpec, leaf: str | None, key: PodKey, node: str) -> str:
        """Why a member beyond quorum may not bind on `node`, "" when it may: its filter passed the
        node inside the domain of the members placed then, but members bound since (a
        predecessor's release landing late) may have fixed another domain."""
        row = np.array([self.store.node_rows[node]], dtype=np.int32)
        try:
            allowed = planning.domain_mask(self.store, self.ledger, group, leaf, row, exclude=key)
        except topology.TopologyError as exc:
            return f"{messages.label(group)}: {exc}"
        if allowed is None or bool(allowed[0]):
            return ""
        return (
            f"{messages.label(group)} member {key}: node {node} is outside the topology domain of the "
            "gang's bound members; it will be placed again inside it"
        )

    def fence_left_s(self) -> float:
        """Seconds until this process may bind (0 once the start-up fence is over)."""
        return max(0.0, self.fence_until - self.ledger.clock())

    def fence_reason(self, key: PodKey) -> str:
        return messages.fenced_text(key, self.bind_fence_s, self.fence_left_s())

    def release_done(self, gang: GroupKey, results: dict[PodKey, str]) -> list[Effect]:
        """The barrier's binds are done: record it and say so on the gang and its group object.

        Members whose binding the API refused keep their place and hold; kube-scheduler retries
        them and they complete the gang inside its domain.
        """
        settled = self.ledger.settle(gang, results)
        effects: list[Effect] = []
        where = f" in {settled.domain}" if settled.domain else ""
        if settled.waited_s is not None:
            self.bind_times_s.append(settled.waited_s)
        if settled.bound:
            message = f"gang {gang}: {len(settled.bound)} pods bound together{where}"
            log.info(
                "%s",
                message,
                extra={
                    "pod": settled.bound[0],
                    "gang": gang,
                    "domain": settled.domain,
                    "members": len(settled.bound),
                },
            )
            if settled.spec is not None:
                effects += self._story(settled.spec, settled.bound[0], "GangBound", message)
            else:
                effects.append(
                    Effect("event", *pod_ref(settled.bound[0]), {"reason": "GangBound", "message": message})
                )
        for pk in settled.failed:
            message = f"gang {gang}: the API did not bind {pk} ({results[pk]}); retrying it{where}"
            effects.append(
                Effect(
                    "event", *pod_ref(pk), {"reason": "GangBindFailed", "message": message, "type": "Warning"}
                )
            )
        if settled.quorum_bound:
            # members beyond quorum that were told to wait for it can be placed now: bring them back
            # from kube-scheduler's backoff rather than after it
            effects += self._nudge_turned_away(gang, "bound", skip=settled.bound)
            if settled.spec is not None and settled.bound:
                message = f"gang {gang}: {len(settled.bound)} pods bound together{where}"
                effects += self._tell_group(settled.spec, "Running", message)
        else:
            # the refused members are told by kube-scheduler (their bind failed); the rest follow
            effects += self._tell_gang(gang, skip=settled.failed)
        return effects

    def expire(self) -> list[tuple[Expiry, list[Effect]]]:
        """Answer gangs whose wait ended; give up plans whose hold ended, with the writes that tell it."""
        out = []
        for expiry in self.ledger.expire():
            if not expiry.dropped:
                # only the waiting calls are answered: no event yet, but the members still pending say
                # which of them the gang waits for
                out.append((expiry, self._tell_gang(expiry.gang, skip=expiry.waiting)))
                continue
            event = {"reason": "GangTimedOut", "message": expiry.message, "type": "Warning"}
            effects = [Effect("event", *pod_ref(pk), event) for pk in expiry.waiting]
            fields: dict[str, Any] = {"pod": expiry.waiting[0]} if expiry.waiting else {}
            fields |= {
                "gang": expiry.gang,
                "domain": expiry.domain,
                "members": len(expiry.waiting),  # those that reached bind
                "reason": expiry.message,
            }
            log.warning("gang %s: timed out at its bind barrier; backing off", expiry.gang, extra=fields)
            if expiry.spec is not None:
                effects += self._story(expiry.spec, None, "GangTimedOut", expiry.message, "Warning")
            # the members waiting at bind are answered with the message (kube-scheduler writes it);
            # the others, and the group object, are told here
            effects += self._tell_gang(expiry.gang, skip=expiry.waiting)
            out.append((expiry, effects))
        return out

    def quorum_arrived(self) -> list[Effect]:
        """Nudge the members turned away for want of pods once their gang's quorum exists, and pods
        turned away for want of their group object once it is cached.

        kube-scheduler does not retry a pod because another pod appeared (1.20 leaves it parked for up
        to a minute), and the member that completes the quorum may be one kube-scheduler cannot place
        itself, so no filter call would ever plan the gang. Checked only when a pod or a grouping
        object appeared since the last look."""
        mark = (self.store.pods_added, self.store.grouping_gen)
        ledger = self.ledger
        if mark == self._arrivals_seen or not (
            ledger.short_of_pods or ledger.short_of_group or ledger.short_of_cache
        ):
            return []
        self._arrivals_seen = mark
        effects: list[Effect] = []
        now = ledger.clock()
        for pk, since in list(ledger.short_of_cache.items()):
            rec = self.store.pods.get(pk)
            if rec is None:
                if now - since > CACHE_WAIT_S:
                    ledger.cache_arrived(pk)  # deleted before this process saw it: bounded memory
                continue
            ledger.cache_arrived(pk)
            if not rec.node_name and is_live(rec.obj):
                effects.append(Effect("nudge", *pod_ref(pk), {"value": "cached"}))
        for pk in sorted(self.ledger.short_of_group):
            rec = self.store.pods.get(pk)
            if rec is None:
                continue  # not in the cache yet either; its deletion clears it
            if rec.node_name or not is_live(rec.obj):
                self.ledger.group_arrived(pk)  # placed or finished: nothing to bring back
            elif self.store.membership(rec).state is not MembershipState.GROUP_MISSING:
                self.ledger.group_arrived(pk)
                effects.append(Effect("nudge", *pod_ref(pk), {"value": "group-arrived"}))
        for key, spec in list(self.ledger.short_of_pods.items()):
            counts = self._live_leaf_counts(key, spec)
            if counts and spec.ready_leaves(counts) is None:
                continue  # still short: keep watching
            self.ledger.pods_arrived(key)  # ready, or every member gone: nothing left to wait for
            if counts:
                effects += self._nudge_turned_away(key, "quorum")
        return effects

    # ================================================================= the gang's story
    @staticmethod
    def _gang_message(gang: GroupKey, reason: str) -> str:
        """A gang's reason as a pod or its group object shows it: naming the gang."""
        return reason if reason.startswith(f"gang {gang}") else f"gang {gang}: {reason}"

    def _tell_gang(self, gang: GroupKey, *, skip: Sequence[PodKey] = ()) -> list[Effect]:
        """The gang's current reason, written where it is not said yet: the PodScheduled condition of
        each pending member whose condition says something else (kube-scheduler writes the one it
        filters, `skip`), and the group object's status. Nothing when the reason stands still."""
        entry = self.ledger.entry(gang)
        if entry is None or not entry.last_reason:
            return []
        reason = self._gang_message(gang, entry.last_reason)
        if self.told.gangs.get(gang) == reason or self.told.hold_back(gang, reason, self.ledger.clock()):
            return []
        self.told.gangs[gang] = reason
        members = self.store.group_members(gang)
        spec = self._spec_of(gang, members)
        if spec is not None and self.ledger.quorum_bound(spec, self.ledger.bound_counts(spec)):
            return []  # bound: its status says so; members beyond quorum are placed one by one
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
        effects = []
        for rec in members:
            pk = rec.key
            at_bind = pk in entry.arrived or pk in entry.releasing
            if pk in skip or at_bind or rec.node_name or not is_live(rec.obj):
                continue  # told by kube-scheduler (filtered now, or its bind call answered), or bound
            if self.told.stale(pk, reason):
                self.told.told(pk, reason)
                effects.append(Effect("condition", *pod_ref(pk), dict(condition)))
        if spec is not None:
            effects += self._tell_group(spec, "Pending", reason)
        return effects

    def _tell_group(self, spec: GroupSpec, phase: str, reason: str) -> list[Effect]:
        if not self.told.group_changed(spec.key, phase, reason):
            return []
        status = group_status(self.store, spec, phase, reason)
        return [status] if status is not None else []

    def fresh_reasons(self) -> list[Effect]:
        """Tell the gangs whose reason changed outside a verb (a member or node gone, a plan dropped
        by the watch) or was held back (a count of pods): the ticker's pass. Costs a comparison per
        gang when nothing changed."""
        effects = []
        for gang, entry in list(self.ledger.gangs.items()):
            if entry.last_reason and self.told.gangs.get(gang) != self._gang_message(gang, entry.last_reason):
                effects += self._tell_gang(gang)
        known = {*self.told.gangs, *self.told.counts, *self.told.groups}
        for gang in [g for g in known if g not in self.ledger.gangs]:
            self.told.forget_gang(gang)  # forgotten by the ledger: its members are gone
        return effects

    def _story(
        self, spec: GroupSpec, pod: PodKey | None, reason: str, message: str, event_type: str = "Normal"
    ) -> list[Effect]:
        """One event for a gang's step on the pod that took it (when given), on its group object and
        on its workload (the members' top owner): one per object, never one per member."""
        data: dict[str, Any] = {"reason": reason, "message": message}
        if event_type != "Normal":
            data["type"] = event_type
        effects = [Effect("event", *pod_ref(pod), dict(data))] if pod else []
        for obj in self._story_objects(spec, pod):
            meta = obj.get("metadata") or {}
            target = {
                "kind": str(obj.get("kind", "")),
                "apiVersion": str(obj.get("apiVersion", "")),
                "uid": str(meta.get("uid") or ""),
            }
            ns = str(meta.get("namespace") or spec.namespace)
            effects.append(Effect("event", ns, str(meta.get("name", "")), {**data, **target}))
        return effects

    def gang_events(
        self, spec: GroupSpec, pod: PodKey | None, reason: str, message: str, event_type: str = "Normal"
    ) -> list[Effect]:
        """The gang's story for a step taken outside the verbs (a whole-gang eviction): see `_story`."""
        return self._story(spec, pod, reason, message, event_type)

    def _story_objects(self, spec: GroupSpec, pod: PodKey | None) -> list[dict[str, Any]]:
        out = []
        for group, kind in _GROUP_OBJECTS.get(spec.source, ()):
            obj = self.store.get(group, kind, spec.namespace, spec.name)
            if obj is not None:
                out.append(obj)
                break
        rec = self.store.pods.get(pod) if pod else None
        if rec is None:
            members = self.store.group_members(spec.key)
            rec = members[0] if members else None
        if rec is not None:
            pod_obj = rec.obj  # built anew on each read for a pod with no kept membership
            top = walk_owners(pod_obj, self.store).top
            if top is not pod_obj and kind_of(top) in WORKLOAD_KINDS:
                out.append(top)
        return out

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        """A pod deleted or bound is no longer ours to tell: its entry goes (bounded memory). A node
        changed or a pod seen bound: the row settles (see `plain_refusals`)."""
        meta = obj.get("metadata") or {}
        if kind == NODE:
            row = self.store.node_rows.get(str(meta.get("name", "")))
            if row is not None:
                self.settling.mark(row)
            return
        if kind != POD:
            return
        node = (obj.get("spec") or {}).get("nodeName")
        if node and event != "DELETED" and not is_terminal(obj):
            row = self.store.node_rows.get(node)
            if row is not None:
                self.settling.mark(row)
                if self.fence_until > self.ledger.clock():
                    self._give_back_fenced_holds(row)
                self._give_back_room_over_queue_limits(
                    pod_key(str(meta.get("namespace", "")), str(meta.get("name", "")))
                )
        if event == "DELETED" or node:
            self.told.forget_pod(pod_key(str(meta.get("namespace", "")), str(meta.get("name", ""))))
            self.evictions.forget(str(meta.get("uid") or ""))

    def note_bind_error(self, key: PodKey, error: str) -> None:
        """A bind call answered with an error: kube-scheduler writes it on the pod."""
        rec = self.store.pods.get(key)
        if rec is not None and self._gang_of_pod(rec.obj) is not None:
            self.told.told(key, error)

    def take_bind_times(self) -> list[float]:
        out, self.bind_times_s = self.bind_times_s, []
        return out

    def gangs_pending(self) -> int:
        """Gangs the ledger knows whose quorum is not bound yet."""
        return sum(1 for gang in self.ledger.gangs if self.phase_of(gang) is not Phase.BOUND)

    def backoffs_over(self) -> list[Effect]:
        """Nudge the members of gangs whose backoff ended that the filter turned away meanwhile."""
        return [e for gang in self.ledger.backoffs_over() for e in self._nudge_turned_away(gang, "retry")]

    def _turned_away(self, pk: PodKey) -> bool:
        """Whether the pod sits in kube-scheduler's backoff or unschedulable queue: this process turned
        it away, or kube-scheduler marked it PodScheduled=False (a previous process, or its own
        filters, turned it away). The second is read from the pod, so a restart loses nothing."""
        if pk in self.ledger.rejected:
            return True
        rec = self.store.pods.get(pk)
        return rec is not None and not rec.node_name and _marked_unschedulable(rec.obj)

    def startup_nudges(self) -> list[Effect]:
        """Once the cache is synced after a start: nudge the parked members of every gang whose quorum
        exists. A restarted service has answered none of them; kube-scheduler would retry them only
        at its next flush (up to a minute on 1.20, five on 1.36), and no filter call plans the gang
        until one of them comes back."""
        parked: dict[GroupKey, list[PodKey]] = {}
        specs: dict[GroupKey, GroupSpec] = {}
        for rec in self.store.pods.values():
            if rec.node_name or not rec.live or not _marked_unschedulable(rec.obj):
                continue
            m = self.store.membership(rec)
            if (
                m.state is not MembershipState.MEMBER
                or m.group is None
                or m.group.source.value == "single-pod"
            ):
                continue
            parked.setdefault(m.group.key, []).append(rec.key)
            specs[m.group.key] = m.group
        effects = []
        for key, pods in parked.items():
            if specs[key].ready_leaves(self._live_leaf_counts(key, specs[key])) is None:
                self.ledger.await_pods(specs[key])  # nudged by quorum_arrived once the rest exist
                for pk in pods:
                    self.ledger.note_answer(pk, turned_away=True)
                continue
            effects += self._nudge_turned_away(key, "restart")  # the parked ones: PodScheduled=False
        return effects

    def _live_leaf_counts(self, key: GroupKey, spec: GroupSpec) -> dict[str | None, int]:
        """subgroup -> live members of the gang in the cache, and those that ran to completion (None:
        the gang without subgroups)."""
        counts = self.store.finished_counts(spec)
        for rec in self.store.group_members(key):
            if is_live(rec.obj):
                leaf = self.store.membership(rec).subgroup
                counts[leaf] = counts.get(leaf, 0) + 1
        return counts

    def _nudge_turned_away(self, gang: GroupKey, why: str, *, skip: Sequence[PodKey] = ()) -> list[Effect]:
        """A nudge for each unbound member the service turned away (it sits in kube-scheduler's
        backoff or unschedulable queue); members still in its active queue need no API write."""
        return [
            Effect("nudge", *pod_ref(rec.key), {"value": f"{gang}:{why}"})
            for rec in self.store.group_members(gang)
            if self._turned_away(rec.key) and not rec.node_name and is_live(rec.obj) and rec.key not in skip
        ]

    # ================================================================= preempt
    def preempt(self, pod: dict[str, Any], victims: dict[str, Any]) -> preemption.PreemptDecision:
        """The candidates whose victims break no gang and free room no one else holds (the order is
        preemption.py's). A node this service does not know is refused, as in filter
        (UnknownNodesError: the request is answered 400 with the names)."""
        self.rows_of(list(victims))
        gang_effects = self.preempt_as_gang(pod)
        if gang_effects is not None:
            # a gang preempts whole, in one domain, by this service's plan: never one pod's candidates
            self.preempt_effects += gang_effects
            return preemption.PreemptDecision(victims={}, candidates={})
        key, uid = _pod_identity(pod)
        requests = self._requests(pod, key, uid)
        decision = preemption.choose(
            self.store, self.ledger, pod, requests, victims, self._preempt_queue_rule(pod, requests)
        )
        self.evictions.record(self.store, uid, decision.victims)
        if self._pod_no_fit:
            self._no_fit_gen += 1  # a pod found stuck may have room being freed for it now
        if len(decision.victims) < len(victims):
            log.info(
                "preempt %s: %d of %d candidate nodes kept",
                key,
                len(decision.victims),
                len(victims),
                extra={"pod": key, "reason": decision.summary()},
            )
        return decision

    def _preempt_queue_rule(
        self, pod: dict[str, Any], requests: dict[str, int]
    ) -> Callable[[Sequence[PodRecord]], str] | None:
        """KAI's queue rules for the preempt verb's candidates (None: no queues in use). A victim of the
        preemptor's own queue may go, and the preemptor's limits are checked with those victims
        gone; a victim of another queue only as a reclaim would take it (queues.may_reclaim,
        queues.reclaimable); a pod charged to no queue (the default scheduler's) is left to priority."""
        snap = self.queue_snapshot()
        if snap is None:
            return None
        m = self.store.membership_of(pod)
        group = (
            m.group if m.state is MembershipState.MEMBER and m.group is not None else single_pod_group(pod)
        )
        queue, conflict = self.gang_queue(group, pod, snap)

        def rule(victims: Sequence[PodRecord]) -> str:
            if queue is None:
                return conflict
            freed: dict[str, dict[str, int]] = {}
            for rec in victims:
                vm = self.store.membership(rec)
                vgroup = vm.group if vm.state is MembershipState.MEMBER else None
                vq = queues.charged_queue(self.store, vgroup, rec.obj, self.default_queue)
                if vq is None or not (rec.node_name or rec.key in self.store.reservations):
                    continue  # charged to no queue: nothing of a queue's to keep
                total = freed.setdefault(vq, {})
                for r, n in rec.requests.items():
                    total[r] = total.get(r, 0) + n
            own = freed.pop(queue, {})
            over = queues.admission(
                snap, queue, requests, group.key, what="pod", fair_share=False, credit=own
            )
            if over is not None:
                return f"{over}, with the victims of queue {queue} gone"
            # the victims of other queues are reclaimed together: every ancestor of theirs keeps its quota
            if freed and not (
                queues.may_reclaim(snap, queue, requests) and queues.reclaimable(snap, queue, requests, freed)
            ):
                return (
                    f"evicts pods of queue(s) {', '.join(sorted(freed))}: a preemption evicts within its own "
                    f"queue ({queue}) only, and a reclaim only from a queue over its fair share, never "
                    "below its quota or any ancestor's"
                )
            return ""

        return rule

    def _fits_once_evicted(self, pod: dict[str, Any], uid: str, node: str, request: np.ndarray) -> bool:
        """Whether the preemptor fits on `node` once the victims kube-scheduler evicts there for it
        are gone from the cache too (preemption.Evictions); only on the node it is nominated to,
        when kube-scheduler has said which."""
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and nominated != node:
            return False
        freed = self.evictions.freed(self.store, uid, node)
        if freed is None:
            return False
        return bool(np.all(self.store.arrays.free[self.store.node_rows[node]] + freed >= request))

    # ================================================================= debug
    def describe(self, gang: GroupKey) -> dict[str, Any] | None:
        entry = self.ledger.entry(gang)
        members = self.store.group_members(gang)
        if entry is None and not members:
            return None
        spec = self._spec_of(gang, members)
        plan = entry.plan if entry else {}
        return {
            "gang": gang,
            "phase": self.ledger.phase(gang, spec).value,
            "quorum": spec.quorum_upper_bound() if spec else None,
            "policy": spec.policy.value if spec else None,
            "members": [
                {
                    "pod": r.key,
                    "subgroup": self.store.membership(r).subgroup,
                    "node": r.node_name or self.ledger.assumed.get(r.key),
                    "planned": plan[r.key].node if r.key in plan else None,
                    "waitingAtBind": bool(entry and r.key in entry.arrived),
                }
                for r in members
            ],
            "plan": {pk: p.node for pk, p in plan.items()},
            "domain": entry.domain if entry else "",
            "reservation": {
                pk: self.store.reservations[pk].node
                for pk in (r.key for r in members)
                if pk in self.store.reservations
            },
            "failures": entry.failures if entry else 0,
            "lastReason": entry.last_reason if entry else "",
            "queue": self.gang_queue(spec, members[0].obj)[0] if spec is not None and members else None,
            "queueHold": self.queue_holds[gang][1] if gang in self.queue_holds else None,
            "preemption": self._describe_preemption(gang),
        }

    def _describe_preemption(self, gang: GroupKey) -> dict[str, Any] | None:
        p = self.ledger.preemption(gang)
        if p is None:
            return None
        terminating = set(self.ledger.terminating(p))
        return {
            "domain": p.domain,
            "priority": p.priority,
            "victimPriority": p.victim_priority,
            "gangs": list(p.gangs),
            "victims": [
                {
                    "pod": v.pod,
                    "node": v.node,
                    "priority": v.priority,
                    "gang": v.gang,
                    "gone": v.pod in p.held,
                    "terminating": v.pod in terminating,  # the hold lasts while any is
                }
                for v in p.victims.values()
            ],
            "where": dict(p.where),
            "holdDeadline": p.hold_until,
            "holdLeftS": round(max(0.0, p.hold_until - self.ledger.clock()), 3),
            "reason": p.reason,
        }

    def describe_all(self) -> list[dict[str, Any]]:
        keys = set(self.ledger.gangs)
        return [d for k in sorted(keys) if (d := self.describe(k)) is not None]

    def phase_of(self, gang: GroupKey) -> Phase:
        return self.ledger.phase(gang, self._spec_of(gang, self.store.group_members(gang)))

    def _spec_of(self, gang: GroupKey, members: Sequence[PodRecord]) -> GroupSpec | None:
        """The gang's definition: as its members say now, else as its plan was made."""
        if members:
            return self.store.membership(members[0]).group
        entry = self.ledger.entry(gang)
        return entry.spec if entry else None
