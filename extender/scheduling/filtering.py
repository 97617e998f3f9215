"""Filter: which offered nodes a pod may have. A plain pod is placed on its own (over the whole
cache at once when it can be, see plain_refusals); a gang member reaches its gang's plan, made for
the whole quorum at once the first time quorum pods exist, after its queue admits it, or starts a
preemption or reclaim when it fits nowhere; a planned member passes only its planned node, moved
inside the plan's domain when kube-scheduler does not offer it.

Owns the rows settling after a change (kube-scheduler's cache may not have seen it yet), the
refusals answered as a retry because this cache may not have seen one (lagging), and the bound on
the refusals a plain pod's fast answer lists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extender.grouping.membership import single_pod_group
from extender.model.group import Membership, MembershipState, Source
from extender.model.keys import GroupKey, PodKey
from extender.model.priority import member_priority, pod_priority
from extender.placement import api as placement
from extender.scheduling import messages, planning, queues, topology
from extender.scheduling.admission import Admission
from extender.scheduling.decisions import Effect, FilterDecision, Verdict, pod_ref
from extender.scheduling.gang_preemption import GangPreemption
from extender.scheduling.lagging import Lagging
from extender.scheduling.pooling import PoolMap
from extender.scheduling.settling import SettlingRows
from extender.scheduling.telling import Telling, gang_message
from extender.scheduling.view import FilterCall, View, pod_identity
from extender.state.store import PodRecord

log = logging.getLogger(__name__)


class Filtering:
    def __init__(
        self,
        view: View,
        telling: Telling,
        admission: Admission,
        gang_preemption: GangPreemption,
        *,
        settle_s: float,
        exact_refusals_max: int,
        pools: PoolMap | None = None,
        evicting: Callable[[GroupKey], str | None] = lambda key: None,
    ) -> None:
        self.view = view
        self.pools = pools
        self.evicting = evicting
        """Why a gang is being evicted whole (extender.scheduling.disruption), or None."""
        self.store = view.store
        self.ledger = view.ledger
        self.telling = telling
        self.admission = admission
        self.gang_preemption = gang_preemption
        self.settling = SettlingRows(settle_s=settle_s, clock=self.ledger.clock)
        self.lagging = Lagging(self.store, clock=self.ledger.clock)
        self.exact_refusals_max = exact_refusals_max

    def rows_of(self, node_names: Sequence[str]) -> np.ndarray:
        return self.view.rows_of(node_names)

    def plain_refusals(self, pod: dict[str, Any]) -> np.ndarray | None:
        """For a plain pod: the rows it must not have; every other known node passes. None: the
        general path decides (a gang, a plan, a topology, a preemptor whose refusal may owe to
        the cache's lag, a resource no node offers, anything unusual).

        The rows where the pod does not fit (or that are not schedulable) are found over the whole
        cache at once, without mapping offered names to rows. When they are few (up to
        `exact_refusals_max`) they are all refused: exactly what `_filter_single` refuses. When they
        are many (a full cluster), only those where this cache can know more than kube-scheduler's,
        whose own fit ran on its cache before this call, are refused: rows holding reservations
        (plans, binds, preemptions), not schedulable here, or whose room changed within the settle
        time (`settling`); kube-scheduler did not offer the others.
        """
        key, uid = pod_identity(pod)
        if not self.view.gated_natively(pod) and not self.store.is_plain(pod):
            m = self.store.membership_of(pod)
            group = m.group if m.state is MembershipState.MEMBER else None
            if group is None or group.source is not Source.SINGLE_POD:
                return None
        ledger = self.ledger
        if ledger.planned(key) is not None or ledger.gang_of(key) is not None or uid in self.view.evictions:
            return None
        if self.store.reservations.get(key) is not None:
            return None  # its own bind's hold stands on a node: the general path gives it back to it
        if queues.in_use(self.store):
            return None  # queues in use: a plain pod counts against its queue's limits (_filter_single)
        request, missing = self.store.request_vector(self.view.requests_of(pod, key, uid))
        if missing:
            return None
        arrays = self.store.arrays
        n = arrays.n_rows
        with self.ledger.holds.withheld(arrays, for_gang=None, priority=pod_priority(pod)) as seen:
            fits = placement.fit_mask(seen, None, request)
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
        """Rows where this cache may know more than kube-scheduler's: reserved, held for a waiting
        gang, settling (cordoned rows are refused whatever their number)."""
        held = [res.row for res in self.store.reservations.values() if res.row >= 0]
        return np.concatenate(
            [np.asarray(held, dtype=np.int64), self.ledger.holds.rows(), self.settling.rows()]
        )

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

    def _bound_node(self, key: PodKey, uid: str) -> str | None:
        """The node this very pod is bound to, as the cache or a confirmed binding has it."""
        rec = self.store.pods.get(key)
        if rec is None or (uid and rec.uid and rec.uid != uid):
            return None
        return rec.node_name or self.ledger.assumed_node(key)

    def filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        decision = self._decide(pod, node_names)
        key = pod_identity(pod)[0]
        self.ledger.note_answer(key, turned_away=decision.verdict is not Verdict.PASS)
        gang = self.view.gang_of_pod(pod)
        if decision.verdict is Verdict.PASS:
            self.lagging.forget(key)
            self.telling.told.forget_pod(key)  # sent to bind: kube-scheduler tells it what comes of that
        elif gang is not None:
            self.telling.told.told(key, decision.reason)  # kube-scheduler writes it on the pod
        if gang is not None:
            decision.effects += self.telling.tell_gang(gang, skip=(key,))
        return decision

    def _decide(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        key, uid = pod_identity(pod)
        planned = self.planned_node_for(pod)
        if planned is not None and self.store.node_usable(planned) and planned in node_names:
            self.view.rows_of(node_names)  # the plan decides; a name the cache never saw is still a 400
            return FilterDecision(Verdict.PASS, [planned])
        bound = self._bound_node(key, uid)
        if bound is not None:
            # bound by a release kube-scheduler's watch has not shown it yet: its node, where offered
            if bound in node_names:
                return FilterDecision(Verdict.PASS, [bound])
            return FilterDecision(Verdict.WAITING, [], f"pod {key} is already bound to {bound}")
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
        decision = self._filter_gang(call) if call.group.is_gang() else self._filter_single(call)
        if decision.verdict is Verdict.NO_FIT:
            coming = self._room_coming(pod, uid, call.group)
            decision.lagging_on = self.lagging.retry(key, rows, node_names, requests, coming=coming) or ""
        return decision

    def _room_coming(self, pod: dict[str, Any], uid: str, group: Any) -> str | None:
        """The node kube-scheduler nominated the pod to while it evicts victims there for it: the
        preempt verb answered for it (`view.evictions`), or, read again from the API after a restart
        lost that, a pod of lower priority still Terminating on the nominated node. A refusal of it
        is a retry, not final: else kube-scheduler, its cache showing the victim gone, preempts a
        second set elsewhere."""
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if not nominated:
            return None
        if uid in self.view.evictions:
            return str(nominated)
        priority = member_priority(pod, group)
        if any(self.store.rank(r) < priority for r in self.store.leaving_on(str(nominated))):
            return str(nominated)
        return None

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
        priority = member_priority(call.pod, group)
        with self.ledger.holds.withheld(arrays, for_gang=group.key, priority=priority) as seen:
            fits = placement.fit_mask(seen, rows, request) & usable if len(rows) else usable
            own = self.store.reservations.get(key)
            if own is not None and own.row >= 0 and len(rows):
                # the room its own bind holds (in flight, held by the start-up fence, or unanswered
                # and maybe landed) is its own: kube-scheduler asks again once its bind call timed out
                at = (rows == own.row) & usable & ~fits
                if at.any():
                    room = seen.free[own.row] + self.store.vector(own.requests)
                    fits[at] = bool((room[: len(request)] >= request).all())
        try:
            allowed = planning.domain_mask(
                self.store, self.ledger, group, call.membership.subgroup, rows, exclude=key
            )
        except topology.TopologyError as exc:
            return FilterDecision(Verdict.REJECTED, [], f"{messages.label(group)}: {exc}")
        if allowed is not None:
            fits &= allowed
        passed = list(call.node_names) if fits.all() else [call.node_names[i] for i in np.flatnonzero(fits)]
        if passed:
            return FilterDecision(Verdict.PASS, passed)
        reason = f"{what} {key}: {messages.shortfall_text(self.store, rows, request, allowed)}"
        reason += self._held_text(rows, group.key, priority)
        return FilterDecision(Verdict.NO_FIT, [], reason, unresolvable=allowed is not None)

    def _held_text(self, rows: np.ndarray, gang: Any, priority: int | None) -> str:
        """What of `rows` is held for gangs `gang` (of `priority`) plans around ("" when nothing is)."""
        book = self.ledger.holds
        if not len(book):
            return ""
        around = {h.gang for h in book.before(gang, priority)}
        holders = [h for h in book.holders_on(np.asarray(rows)) if h.gang in around]
        if not holders:
            return ""
        said = "; ".join(
            f"{h.domain or f'{len(h.nodes)} nodes'} is held for gang {h.gang}" for h in holders[:3]
        )
        return f" ({said})"

    # ----------------------------------------------------------------- gangs
    def _short_of_pods(self, call: FilterCall) -> FilterDecision | None:
        """The answer while a gang's pods are still being created, from the store's counts: a gang
        whose live pods (by subgroup) do not make it ready, none finished, with no plan, no backoff
        and no eviction under way (so none of the walk's earlier answers applies, and none of its
        members can be bound: the bound are among the live). Without it, each member's filter walks
        the others: a 4,096-pod gang's (or a JobSet's) assembly would cost the event loop a
        quadratic walk. None: the full path decides."""
        group = call.group
        if self.store.may_have_finished(group):
            return None
        if group.subgroups:
            counts = self.store.group_live_by_subgroup(
                group.key, besides=(call.key, call.membership.subgroup)
            )
            if group.ready_leaves(counts) is not None:
                return None
            live = sum(counts.values())
        else:
            live = self.store.group_live(group.key, besides=call.key)
            if live >= group.leaf_quorum(None):
                return None
        entry = self.ledger.entry(group.key)
        if entry is not None and (entry.plan or entry.releasing or self.ledger.backoff_left(group.key) > 0):
            return None
        if self.evicting(group.key) is not None:
            return None
        return self._waiting_for_pods(call, live, 0)

    def _waiting_for_pods(self, call: FilterCall, live: int, finished: int) -> FilterDecision:
        group, key, ledger = call.group, call.key, self.ledger
        need = group.quorum_upper_bound()
        have = f"{live} exist" + (f" and {finished} finished" if finished else "")
        reason = f"gang {group.key} waiting for pods: {have}, {need} needed for quorum"
        ledger.set_reason(group.key, reason)
        self.telling.told.counting(group.key, reason)
        ledger.await_pods(group)
        waiting = self.telling.story(group, key, "GangWaiting", reason)
        return FilterDecision(Verdict.WAITING, [], reason, effects=waiting)

    def _filter_gang(self, call: FilterCall) -> FilterDecision:
        key, group, leaf = call.key, call.group, call.membership.subgroup
        ledger = self.ledger
        short = self._short_of_pods(call)
        if short is not None:
            return short
        members = [
            planning.Member(rec, self.store.membership(rec).subgroup)
            for rec in self.store.group_members(group.key)
            if rec.live
        ]
        if key not in {m.key for m in members}:
            members.append(planning.Member(PodRecord(key=key, obj=call.pod, requests=call.requests), leaf))
        held_elsewhere = next(
            ((m.key, other) for m in members if (other := ledger.gang_of(m.key)) not in (None, group.key)),
            None,
        )
        if held_elsewhere is not None:
            # a member regrouped here while its old gang's release binds it: placed again now, it
            # would be planned twice (the bind in flight lands it where the old plan put it)
            pk, other = held_elsewhere
            reason = (
                f"gang {group.key}: member {pk} is still being bound for gang {other}, which it left "
                "(its group changed); placed once that bind has landed or failed"
            )
            return FilterDecision(Verdict.WAITING, [], reason)
        evicting = self.evicting(group.key)
        if evicting is not None:
            # its bound members are about to go: one placed now would be bound beside them, and left
            # alone once they went
            reason = f"gang {group.key}: {evicting}; its members are placed again once those are gone"
            return FilterDecision(Verdict.WAITING, [], reason)
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
                return self._waiting_for_pods(call, len(members), finished)
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
                started = self.gang_preemption.preempt_to_admit(call, members, leaves, need)
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
            ledger.holds.gen,  # a hold moved or ended: what fits around the holds changed
            self.pools.version() if self.pools is not None else None,  # a pool may take it now
            # the room of pods a disruption is evicting stops counting as coming after a while
            self.gang_preemption.counts_marked_room(group.key),
            self.gang_preemption.spared_gen,  # a victim a budget protected may be taken again
        )
        cached = ledger.cached_no_fit(group.key, signature)
        if cached is not None:
            return FilterDecision(Verdict.NO_FIT, [], cached)
        try:
            priority = member_priority(call.pod, group)
            with ledger.holds.withheld(self.store.arrays, for_gang=group.key, priority=priority) as seen:
                # the room a preemption freed is this gang's, whatever the pools say of its domain
                result = self._plan_gang(call, members, leaves, seen, pooled=preempted is None)
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
        if result.reason and result.pool_wait and preempted is None:
            # it fits, outside its pool: it waits for room in its pool or for its hold (the holding
            # pass counts it among the gangs that fit nowhere), and evicts nobody for it
            ledger.remember_no_fit(group.key, signature, result.reason, group)
            ledger.set_reason(group.key, result.reason)
            return FilterDecision(Verdict.NO_FIT, [], result.reason)
        if result.reason:
            reason = result.reason + self._held_text(call.rows, group.key, priority)
            if preempted is not None:
                # the victims are gone but the gang does not fit yet (kube-scheduler has not offered the
                # freed nodes, say): the room stays held for it until the hold ends; never preempt again
                preempted.held.clear()
                ledger.start_preemption(preempted)
                return FilterDecision(Verdict.WAITING, [], gang_message(group.key, preempted.reason))
            started, reason = self.gang_preemption.preempt(call, members, leaves, reason)
            if started is None:
                started = self.gang_preemption.reclaim(call, members, leaves)
            if started is not None:
                return started
            ledger.remember_no_fit(group.key, signature, reason, group)
            return FilterDecision(Verdict.NO_FIT, [], reason)
        ledger.plan(group, result.assignment, domain=result.domain)
        if self.pools is not None and result.pooled is not None:
            self.pools.note_planned(result.pooled)
        if preempted is not None:
            self.gang_preemption.note_completed()
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
        message += self._held_text(self.ledger.holds.rows(), group.key, priority)
        log.info(
            "%s",
            message,
            extra={"pod": key, "gang": group.key, "domain": result.domain, "members": len(result.assignment)},
        )
        effects += self.telling.story(group, key, "GangPlanned", message)
        return FilterDecision(Verdict.PASS, [result.assignment[key][0].node], effects=effects)

    def _plan_gang(
        self,
        call: FilterCall,
        members: list[planning.Member],
        leaves: tuple[str | None, ...],
        seen: Any,
        *,
        pooled: bool = True,
    ) -> planning.GangPlan | None:
        """The gang's plan over `seen` (the cluster with the holds before it taken out), the nodes
        kube-scheduler refused before avoided unless they are what stands in the way."""
        store, ledger, group, key = self.store, self.ledger, call.group, call.key
        pools = self.pools if pooled else None
        result = planning.plan_members(
            store, ledger, group, members, leaves, me=key, offered_rows=call.rows, arrays=seen, pools=pools
        )
        if result is not None and result.reason and ledger.excluded(group.key):
            # nodes refused once may be fine now; they are only a hint, never the reason a gang
            # that fits stays unplanned
            retry = planning.plan_members(
                store,
                ledger,
                group,
                members,
                leaves,
                me=key,
                offered_rows=call.rows,
                avoid_refused=False,
                arrays=seen,
                pools=pools,
            )
            if retry is not None and not retry.reason:
                ledger.forget_refusals(group.key)
                result = retry
            elif retry is not None and retry.pool_wait and not result.pool_wait:
                # it fits, refusals aside, only outside its pool: it waits for its pool or its hold
                # and evicts nobody, as any gang its pool keeps waiting (the refusals' no-fit is no
                # reason to preempt, and not what it is told)
                result = retry
        return result
