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
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extender.gang.entry import Arrival, Phase
from extender.grouping.membership import single_pod_group
from extender.model.group import GroupSpec, Membership, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.model.priority import may_preempt, pod_priority
from extender.placement import api as placement
from extender.scheduling import messages, planning, preemption, preemptor, queues, topology
from extender.scheduling.admission import Admission
from extender.scheduling.debug import Debug
from extender.scheduling.decisions import (
    ARRIVAL_VERDICT,
    BindDecision,
    BindVerdict,
    Effect,
    FilterDecision,
    Verdict,
    pod_ref,
)
from extender.scheduling.ledger import Expiry, GangLedger, Preemption, Victim
from extender.scheduling.reasons import ReasonsTold
from extender.scheduling.settling import SettlingRows
from extender.scheduling.telling import Telling, gang_message
from extender.scheduling.view import FilterCall, View, marked_unschedulable, pod_identity
from extender.state.store import NODE, POD, ClusterStore, PodRecord, is_live, is_terminal

log = logging.getLogger(__name__)

RECLAIM_ABOVE = 2**62
"""The priority a reclaim evicts below: every priority, since reclaim is between queues, not priorities."""
RECLAIM_LOOK_S = 5.0
"""How often reclaims_tick takes one waiting gang through its filter path: a plan over every node."""


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
        self.view = View(store, ledger, native_gang_scheduling=native_gang_scheduling)
        self.telling = Telling(self.view)
        self.admission = Admission(self.view, self.telling, default_queue)
        self.debug = Debug(self.view, self.admission)
        self.bind_times_s: list[float] = []
        """Seconds from each gang's first member seen to its quorum bound, for the server to take."""
        self.preemption_hold_s = preemption_hold_s
        self.preemption_outcomes: collections.Counter[str] = collections.Counter()
        """Preemptions by outcome (planned, no-domain, completed, expired), for the server to take."""
        self.preemption_victims: collections.Counter[str] = collections.Counter()
        """Victims evicted by preemptors, by kind (gang, pod), for the server to take."""
        self.preempt_effects: list[Effect] = []
        """Writes decided by the preempt verb (it answers candidates only), for the server to run."""
        self._reclaim_looked: dict[GroupKey, float] = {}  # gang -> when reclaims_tick last took it
        self.settling = SettlingRows(settle_s=settle_s, clock=ledger.clock)
        self.exact_refusals_max = exact_refusals_max
        self._all_rows = np.zeros(0, dtype=np.int32)  # 0..n_rows-1, for a fit over the whole cache
        store.add_listener(self._on_change)
        for row in sorted(store.row_names):
            # in the store before this listener (an embedded cluster, attached first): its bindings
            # may be moments old, as new to kube-scheduler's cache as a watch event's
            self.settling.mark(row)

    @property
    def evictions(self) -> preemption.Evictions:
        return self.view.evictions

    # ================================================================= filter
    def rows_of(self, node_names: Sequence[str]) -> np.ndarray:
        return self.view.rows_of(node_names)

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
        key, uid = pod_identity(pod)
        if not self.view.gated_natively(pod):
            m = self.store.membership_of(pod)
            group = m.group if m.state is MembershipState.MEMBER else None
            if group is None or group.source is not Source.SINGLE_POD:
                return None
        ledger = self.ledger
        if ledger.planned(key) is not None or ledger.gang_of(key) is not None or uid in self.view.evictions:
            return None
        if queues.in_use(self.store):
            return None  # queues in use: a plain pod counts against its queue's limits (_filter_single)
        request, missing = self.store.request_vector(self.view.requests_of(pod, key, uid))
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
        key = pod_identity(pod)[0]
        self.ledger.note_answer(key, turned_away=False)
        self.telling.told.forget_pod(key)

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
        key, uid = pod_identity(pod)
        planned = self.ledger.planned_node(key, uid)
        if planned is None:
            return None
        rec = self.store.pods.get(key)
        if rec is not None and uid and rec.uid and rec.uid != uid:
            return None
        return planned

    def filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        decision = self._filter(pod, node_names)
        key = pod_identity(pod)[0]
        self.ledger.note_answer(key, turned_away=decision.verdict is not Verdict.PASS)
        gang = self.view.gang_of_pod(pod)
        if decision.verdict is Verdict.PASS:
            self.telling.told.forget_pod(key)  # sent to bind: kube-scheduler tells it what comes of that
        elif gang is not None:
            self.telling.told.told(key, decision.reason)  # kube-scheduler writes it on the pod
        if gang is not None:
            decision.effects += self.telling.tell_gang(gang, skip=(key,))
        return decision

    def _filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        key, uid = pod_identity(pod)
        planned = self.planned_node_for(pod)
        if planned is not None and self.node_usable(planned) and planned in node_names:
            return FilterDecision(Verdict.PASS, [planned])  # the plan decides; no need to map names
        rows = self.rows_of(node_names)
        membership = self.store.membership_of(pod)
        if self.view.gated_natively(pod):
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
        requests = self.view.requests_of(pod, key, uid)
        call = FilterCall(pod, key, uid, membership.group, membership, rows, node_names, requests)
        settled = self._settle_stale_plan(call)
        if settled is not None:
            return settled
        if not call.group.is_gang():
            return self._filter_single(call)
        return self._filter_gang(call)

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
        return self.admission.note_pod_fit(call, self._fit_single(call))

    def _fit_single(self, call: FilterCall) -> FilterDecision:
        key, group, rows = call.key, call.group, call.rows
        what = "pod" if group.source.value == "single-pod" else f"{messages.label(group)} member"
        held = self.admission.queue_wait(call, call.requests, "pod" if what == "pod" else "member")
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
        if not fits.all() and call.uid in self.view.evictions:
            for i in np.flatnonzero(~fits):
                node = call.node_names[i]
                ok = bool(usable[i]) and (allowed is None or bool(allowed[i]))
                fits[i] = ok and self.view.fits_once_evicted(call.pod, call.uid, node, request)
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
            return FilterDecision(Verdict.WAITING, [], gang_message(group.key, entry.last_reason))
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
                self.telling.told.counting(group.key, reason)
                ledger.await_pods(group)
                waiting = self.telling.story(group, key, "GangWaiting", reason)
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
        queued = self.admission.queue_snapshot() is not None  # no Queue objects: nothing to sum
        if pending is None and queued:
            need = self.admission.gang_need(call, members, leaves, bound)
            held = self.admission.queue_wait(call, need, "gang")
            if held is not None:
                started = self._preempt_to_admit(call, members, leaves, need)
                if started is not None:
                    return started
                reason = gang_message(group.key, held)
                ledger.set_reason(group.key, reason)
                return FilterDecision(Verdict.WAITING, [], reason)
        if pending is not None:
            if not ledger.victims_gone(group.key):
                return FilterDecision(Verdict.WAITING, [], gang_message(group.key, pending.reason))
            if queued:
                # planned into the room held for it: admitted again (limits hold on every step), that
                # room, charged to its queue until now, counted out as the plan replaces it
                own = pending.queue == self.admission.gang_queue(group, call.pod)[0]
                credit = pending.held_room() if own else {}
                need = self.admission.gang_need(call, members, leaves, bound)
                held = self.admission.queue_wait(call, need, "gang", fair_share=False, credit=credit)
                if held is not None:
                    ledger.end_preemption(group.key)  # room it may not use goes back to everyone
                    reason = gang_message(group.key, held)
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
                return FilterDecision(Verdict.WAITING, [], gang_message(group.key, preempted.reason))
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
            if pk != key and self.view.turned_away(pk):
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
        effects += self.telling.story(group, key, "GangPlanned", message)
        return FilterDecision(Verdict.PASS, [result.assignment[key][0].node], effects=effects)

    # ----------------------------------------------------------------- queues
    @property
    def queue_book(self) -> queues.QueueBook:
        return self.admission.queue_book

    @property
    def queue_holds(self) -> dict[GroupKey, tuple[str, str]]:
        return self.admission.queue_holds

    def queue_snapshot(self) -> queues.QueueSnapshot | None:
        return self.admission.queue_snapshot()

    def queue_name(self, group: GroupSpec, pod: dict[str, Any]) -> str:
        return self.admission.queue_name(group, pod)

    def gang_queue(
        self, group: GroupSpec, pod: dict[str, Any], snap: queues.QueueSnapshot | None = None
    ) -> tuple[str | None, str]:
        return self.admission.gang_queue(group, pod, snap)

    def queue_holds_over(self) -> list[Effect]:
        return self.admission.holds_over()

    def queue_status(self) -> list[Effect]:
        return self.admission.queue_status()

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
        snap = self.admission.queue_snapshot()
        if snap is None:
            return None
        queue, _ = self.admission.gang_queue(call.group, call.pod, snap)
        if queue is None or queues.admission(snap, queue, {}, call.group.key) is not None:
            return None  # no one queue, or one that takes no workloads: no eviction admits it
        if not self.admission.look_to_admit(call.group.key):
            return None  # nothing changed since the last look: the answer is the same

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
        if self.admission.queue_snapshot() is not None:
            # KAI: preemption is within a queue, by priority; across queues only reclaim evicts
            queue = self.admission.gang_queue(group, call.pod)[0]
            if queue is None:
                return None, no_fit  # no one queue: not admitted, so it evicts no one

            def admit(u: preemptor.Unit) -> bool:
                return self.admission.queue_of_unit(u) == queue

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
        queue = (
            self.admission.gang_queue(group, call.pod)[0]
            if self.admission.queue_snapshot() is not None
            else None
        )
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
        effects += self.telling.story(
            group, call.key, "GangReclaiming" if outcome == "reclaim" else "GangPreempting", reason
        )
        return FilterDecision(Verdict.WAITING, [], reason, effects=effects)

    def _reclaim(
        self, call: FilterCall, members: Sequence[planning.Member], leaves: Sequence[str | None]
    ) -> FilterDecision | None:
        """A gang that fits nowhere, of a queue that stays within its fair share with it: evict whole
        gangs (and pods) of other queues over their fair share, never taking one below its quota
        (queues.reclaimable), and hold the room for it, as a preemption does. Priority plays no part:
        reclaim is between queues. None when queues are not in use or nothing may be reclaimed."""
        snap = self.admission.queue_snapshot()
        me = next((m for m in members if m.key == call.key), None)
        if snap is None or me is None:
            return None
        group = call.group
        queue = self.admission.queue_name(group, call.pod)
        need = self.admission.gang_need(call, members, leaves, self.ledger.bound_counts(group))
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
            return queues.reclaimable(snap, queue, need, {self.admission.queue_of_unit(u): freed([u])})

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
            by_queue.setdefault(self.admission.queue_of_unit(u), []).append(u)
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
            effects += self.telling.tell_gang(p.gang)
        for gang, p in list(self.ledger.preemptions.items()):
            if not p.nudged and self.ledger.victims_gone(gang):
                p.nudged = True
                effects += self.telling.nudge_turned_away(gang, "preempted")
        return effects

    def preempt_as_gang(self, pod: dict[str, Any]) -> list[Effect] | None:
        """kube-scheduler found no node for a member of a gang that may preempt (its own filters
        passed none, so this service's filter was never asked) and asks the preempt verb. The gang
        preempts as a whole, through the filter's own path over every node: a plan, a preemption
        started or waited on, or the reason none can be. The effects to run; None when the pod is
        not such a gang member (kube-scheduler's per-pod candidates then stand)."""
        if self.view.gang_of_pod(pod) is None or pod_priority(pod) <= 0 or not may_preempt(pod):
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
            key = pod_identity(pod)[0]
            decision.effects.append(Effect("nudge", *pod_ref(key), {"value": "planned"}))
        return decision.effects

    def reclaims_tick(self) -> list[Effect]:
        """Reclaim for gangs kube-scheduler never brings here. A gang whose pods each fit no node fails
        kube-scheduler's own filters before the extender is asked, and at a priority that preempts no
        one the preempt verb is never called either: on a cluster another queue fills, a queue below
        its fair share would wait for ever. So, at most every RECLAIM_LOOK_S per gang, a ready gang
        that kube-scheduler marked unschedulable, holds no plan, and whose queue may reclaim is taken
        through its own filter path over every node, as the preempt verb does for a gang."""
        snap = self.admission.queue_snapshot()
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
                    if not r.node_name and is_live(r.obj) and marked_unschedulable(r.obj)
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
        key, uid = pod_identity(pod)
        planned = self.ledger.planned_node(key, uid)
        if planned is not None:
            return [(n, 10 if n == planned else 0) for n in node_names]
        request = self.store.vector(self.view.requests_of(pod, key, uid))
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
        if membership.state is not MembershipState.MEMBER and not self.view.gated_natively(rec.obj):
            # its filter passed while it was in a gang (a plan since dropped): waiting for a group, or
            # invalid, it is nobody's to bind alone
            why = membership.message or "it is in no gang"
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key}: {why}; not binding it")
        if (
            group is not None
            and group.is_gang()
            and membership.state is MembershipState.MEMBER
            and not self.view.gated_natively(rec.obj)
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
        over = self.admission.limit_at_bind(rec, group)
        if over is not None:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key}: {over}")
        request, missing = self.store.request_vector(rec.requests)
        if missing:
            return BindDecision(BindVerdict.REFUSE, message=f"pod {key}: {messages.unoffered_text(missing)}")
        held = self.store.reservations.get(key)
        if held is None or held.node != node:
            row = np.array([self.store.node_rows[node]], dtype=np.int32)
            if not bool(placement.fit_mask(self.store.arrays, row, request)[0]) and not (
                self.view.fits_once_evicted(rec.obj, rec.uid, node, request)
            ):
                return BindDecision(BindVerdict.REFUSE, message=f"pod {key} no longer fits on {node}")
        self.ledger.hold(key, node, rec.requests)
        self.view.evictions.forget(rec.uid)
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
        snap = self.admission.queue_snapshot()
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
        if self.admission.queue_book.counted_allocated(pk):
            return  # counted already (a status write of a pod bound before): nothing landed
        snap = self.admission.queue_snapshot()
        queue = self.admission.queue_book.charged_to(pk) if snap is not None else None
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
                if queues.under(snap, self.admission.queue_book.charged_to(held), over):
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
            over = self.admission.limit_at_bind(rec, self.store.membership(rec).group)
            if over is not None:
                return f"pod {key}: {over}; pods of its queue were bound while its bind waited"
            return f"pod {key} no longer fits on {node}: pods were bound there while its bind waited"
        if not bool((self.store.arrays.free[row] >= 0).all()):
            return f"pod {key} no longer fits on {node}: pods were bound there while its bind waited"
        # the same landings may have used the room its queue's limit left (bind checked it before)
        over = self.admission.limit_at_bind(rec, self.store.membership(rec).group, held=True)
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
                effects += self.telling.story(settled.spec, settled.bound[0], "GangBound", message)
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
            effects += self.telling.nudge_turned_away(gang, "bound", skip=settled.bound)
            if settled.spec is not None and settled.bound:
                message = f"gang {gang}: {len(settled.bound)} pods bound together{where}"
                effects += self.telling.tell_group(settled.spec, "Running", message)
        else:
            # the refused members are told by kube-scheduler (their bind failed); the rest follow
            effects += self.telling.tell_gang(gang, skip=settled.failed)
        return effects

    def expire(self) -> list[tuple[Expiry, list[Effect]]]:
        """Answer gangs whose wait ended; give up plans whose hold ended, with the writes that tell it."""
        out = []
        for expiry in self.ledger.expire():
            if not expiry.dropped:
                # only the waiting calls are answered: no event yet, but the members still pending say
                # which of them the gang waits for
                out.append((expiry, self.telling.tell_gang(expiry.gang, skip=expiry.waiting)))
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
                effects += self.telling.story(expiry.spec, None, "GangTimedOut", expiry.message, "Warning")
            # the members waiting at bind are answered with the message (kube-scheduler writes it);
            # the others, and the group object, are told here
            effects += self.telling.tell_gang(expiry.gang, skip=expiry.waiting)
            out.append((expiry, effects))
        return out

    # ================================================================= what pods and groups are told
    @property
    def told(self) -> ReasonsTold:
        return self.telling.told

    def fresh_reasons(self) -> list[Effect]:
        return self.telling.fresh_reasons()

    def gang_events(
        self, spec: GroupSpec, pod: PodKey | None, reason: str, message: str, event_type: str = "Normal"
    ) -> list[Effect]:
        return self.telling.gang_events(spec, pod, reason, message, event_type)

    def quorum_arrived(self) -> list[Effect]:
        return self.telling.quorum_arrived()

    def startup_nudges(self) -> list[Effect]:
        return self.telling.startup_nudges()

    def backoffs_over(self) -> list[Effect]:
        return self.telling.backoffs_over()

    def note_bind_error(self, key: PodKey, error: str) -> None:
        self.telling.note_bind_error(key, error)

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
            self.telling.told.forget_pod(pod_key(str(meta.get("namespace", "")), str(meta.get("name", ""))))
            self.view.evictions.forget(str(meta.get("uid") or ""))

    def take_bind_times(self) -> list[float]:
        out, self.bind_times_s = self.bind_times_s, []
        return out

    def gangs_pending(self) -> int:
        """Gangs the ledger knows whose quorum is not bound yet."""
        return sum(1 for gang in self.ledger.gangs if self.phase_of(gang) is not Phase.BOUND)

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
        key, uid = pod_identity(pod)
        requests = self.view.requests_of(pod, key, uid)
        decision = preemption.choose(
            self.store, self.ledger, pod, requests, victims, self.admission.preempt_queue_rule(pod, requests)
        )
        self.view.evictions.record(self.store, uid, decision.victims)
        self.admission.room_may_be_freed()
        if len(decision.victims) < len(victims):
            log.info(
                "preempt %s: %d of %d candidate nodes kept",
                key,
                len(decision.victims),
                len(victims),
                extra={"pod": key, "reason": decision.summary()},
            )
        return decision

    # ================================================================= debug
    def describe(self, gang: GroupKey) -> dict[str, Any] | None:
        return self.debug.describe(gang)

    def describe_all(self) -> list[dict[str, Any]]:
        return self.debug.describe_all()

    def describe_queues(self) -> dict[str, Any]:
        return self.debug.describe_queues()

    def phase_of(self, gang: GroupKey) -> Phase:
        return self.view.phase_of(gang)
