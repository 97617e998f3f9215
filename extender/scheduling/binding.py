"""Bind: the barrier's arrivals and releases (those the watch completes too), the single pods'
binds, the start-up fence (no POST before the bindings a predecessor left in flight have landed),
the room given back where such landings over-fill a node or a queue, and what is said once a
release's binds are done or a gang's wait ends.

Owns the fence's end and the seconds each gang took from its first member seen to its quorum
bound. The barrier's state (plans, arrivals, releases) is the ledger's.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from extender.gang.entry import Arrival
from extender.model.group import GroupSpec, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.placement import api as placement
from extender.scheduling import messages, planning, queues, topology
from extender.scheduling.admission import Admission
from extender.scheduling.decisions import ARRIVAL_VERDICT, BindDecision, BindVerdict, Effect, pod_ref
from extender.scheduling.ledger import Expiry, Release
from extender.scheduling.telling import Telling
from extender.scheduling.view import View
from extender.state.store import PodRecord

log = logging.getLogger(__name__)


class Binding:
    def __init__(self, view: View, telling: Telling, admission: Admission, *, bind_fence_s: float) -> None:
        self.view = view
        self.store = view.store
        self.ledger = view.ledger
        self.telling = telling
        self.admission = admission
        self.bind_fence_s = bind_fence_s
        self.fence_until = self.ledger.clock() + bind_fence_s
        """No bind before this (the ledger's clock): see ClusterSource.bind_fence_s."""
        self.bind_times_s: list[float] = []
        """Seconds from each gang's first member seen to its quorum bound, for the server to take."""

    def landed(self, pk: PodKey, row: int) -> None:
        """A pod was seen bound on `row`: give back the room its landing took from others' holds."""
        if self.fence_until > self.ledger.clock():
            self._give_back_fenced_holds(row)
        self._give_back_room_over_queue_limits(pk)

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
        if self.ledger.assumed_node(key) == node:
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
            and group.source is not Source.SINGLE_POD
            and membership.state is MembershipState.MEMBER
            and not self.view.gated_natively(rec.obj)
        ):
            if group.is_gang() and not self.ledger.placed_as_it_comes(
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
            # a group of a quorum of one is no gang, but its topology constraint binds its members
            # alike: two filtered before either bound may each have passed another rack
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
        unadmitted = self._unadmitted(rec, node)
        if unadmitted:
            return BindDecision(BindVerdict.REFUSE, message=unadmitted)
        held = self.store.reservations.get(key)
        if held is None or held.node != node:
            row = np.array([self.store.node_rows[node]], dtype=np.int32)
            if not bool(placement.fit_mask(self.store.arrays, row, request)[0]):
                return BindDecision(BindVerdict.REFUSE, message=f"pod {key} no longer fits on {node}")
        self.ledger.hold(key, node, rec.requests)
        self.view.evictions.forget(rec.uid)
        fence_left_s = self.fence_left_s()
        if fence_left_s > 0:  # the hold keeps the room while the POST waits (see fence_over)
            return BindDecision(BindVerdict.NOW, message=self.fence_reason(key), wait_s=fence_left_s)
        return BindDecision(BindVerdict.NOW)

    def _unadmitted(self, rec: PodRecord, node: str) -> str:
        """Why `node` no longer takes the pod, "" when it does: tainted or relabelled since
        kube-scheduler's filter (a bind the start-up fence held back sees the cache as it is then);
        placed again, on a node that admits it."""
        admits = self.store.eligible_mask_of(rec)
        if admits is not None and not bool(admits[self.store.node_rows[node]]):
            return f"pod {rec.key}: node {node} no longer admits it (its labels or taints changed)"
        return ""

    def _plan_past_queue_limit(self, key: PodKey) -> tuple[GroupKey, str] | None:
        """(gang, why) when `key` is planned, its gang's release has not begun, and the gang's queue
        (or an ancestor) is past its limit with the plan's room counted: bound, the gang would grow
        it. Pods bound beside the plan since it was admitted do that (a predecessor's bindings
        landing within the start-up fence, which no plan saw coming). So does a member's queue
        label edited since: its members name different queues now, which admission never admits
        (bound, the moved member would charge a queue that never admitted it)."""
        gang = self.ledger.gang_of(key)
        if gang is None or self.ledger.planned(key) is None or self.ledger.is_releasing(key):
            return None
        snap = self.admission.queue_snapshot()
        if snap is None:
            return None
        queue, conflict = snap.group_queue(gang)
        if conflict:
            return (gang, f"since it was planned, {conflict}")
        if queue is None:
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
            if self.ledger.binding_alone(pk):
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
        if self.ledger.binding_alone(pk) or self.ledger.is_releasing(pk):
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
        for gang, e in self.ledger.entries():
            if e.plan and not e.releasing and queues.under(snap, snap.group_queue(gang)[0], over):
                self.ledger.discard(gang, why)
        if self.fence_until > self.ledger.clock():
            for held in [h for h in self.ledger.binding_pods() if h in self.store.reservations]:
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
        # the node, and the siblings it must share a domain with, may have changed while it waited
        if not bool(self.store.arrays.schedulable[row]):
            return f"pod {key}: node {node} was cordoned or went NotReady while its bind waited"
        unadmitted = self._unadmitted(rec, node)
        if unadmitted:
            return unadmitted
        membership = self.store.membership(rec)
        group = membership.group
        if (
            membership.state is MembershipState.MEMBER
            and group is not None
            and group.source is not Source.SINGLE_POD
        ):
            outside = self._outside_domain(group, membership.subgroup, key, node)
            if outside:
                return outside
        # the same landings may have used the room its queue's limit left (bind checked it before)
        over = self.admission.limit_at_bind(rec, group, held=True)
        if over is not None:
            return f"pod {key}: {over}: pods of the queue were bound while its bind waited"
        return ""

    def done(self, key: PodKey, node: str, error: str, *, unknown: bool = False) -> None:
        """A single pod's API binding finished ("" = bound; `unknown`: it may have landed)."""
        self.ledger.bind_done(key, node, error, unknown=unknown)

    def _outside_domain(self, group: GroupSpec, leaf: str | None, key: PodKey, node: str) -> str:
        """Why a member beyond quorum (or of a group of a quorum of one) may not bind on `node`, ""
        when it may: its filter passed the node inside the domain of the members placed then, but
        members bound since (a predecessor's release landing late, a sibling whose bind came first)
        may have fixed another domain."""
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

    def completed_releases(self) -> list[tuple[GroupKey, list[Release]]]:
        """The gangs whose barrier the watch completed (the ledger's `completed`), each with the
        members to bind now, after the checks bind makes before a release: none within the
        start-up fence (they wait for it to end), and a gang whose queue is past its limit with the
        plan counted is replanned instead. Without this the members waiting at bind would wait for
        an arrival that never comes, and their hold would expire with part of the gang bound."""
        if self.fence_left_s() > 0:
            return []
        out = []
        for gang in self.ledger.completed():
            entry = self.ledger.entry(gang)
            first = min(entry.plan) if entry is not None and entry.plan else None
            over = self._plan_past_queue_limit(first) if first is not None else None
            if over is not None:
                self.ledger.discard(gang, over[1])
                continue
            members = self.ledger.release(gang)
            if members:
                log.info(
                    "gang %s: its last missing member was seen bound; binding the %d waiting",
                    gang,
                    len(members),
                    extra={"gang": gang, "members": len(members)},
                )
                out.append((gang, members))
        return out

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
            then = (
                f"the gang plans again: {settled.replanned}" if settled.replanned else f"retrying it{where}"
            )
            message = f"gang {gang}: the API did not bind {pk} ({results[pk]}); {then}"
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
            # a refused member released before it reached bind (--release-on-first-bind) may sit in
            # kube-scheduler's backoff or unschedulable queue since a filter turned it away: its
            # place is held for it, so bring it back now rather than after the queue's own delay
            effects += self.telling.nudge_turned_away(gang, "retry", only=settled.failed)
        # a member regrouped while this release bound it kept its new gang waiting (filtering's
        # held_elsewhere): that gang's members, turned away meanwhile, may be placed now
        moved = set()
        for pk in results:
            rec = self.view.store.pods.get(pk)
            other = self.view.gang_of_pod(rec.obj) if rec is not None else None
            if other is not None and other != gang:
                moved.add(other)
        for other in sorted(moved):
            effects += self.telling.nudge_turned_away(other, "retry")
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

    def take_bind_times(self) -> list[float]:
        out, self.bind_times_s = self.bind_times_s, []
        return out
