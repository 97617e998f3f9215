"""A gang as preemptor: preemption within its queue by priority (KAI's preempt action), reclaim
between queues by fair share (KAI's reclaim), and the ticks that end a preemption's hold, bring a
preemptor's members back once its victims are gone, and reclaim for gangs kube-scheduler never
brings here.

Owns the preemption and reclaim counts (by outcome, victims by kind) and when each waiting gang was
last taken through the reclaim tick. The records of preemptions in flight (victims, held room, the
hold's end) are the ledger's: this module starts and ends them there.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

from extender.model.group import GroupSpec
from extender.model.keys import GroupKey
from extender.model.priority import member_may_preempt, member_priority
from extender.scheduling import messages, planning, preemptor, queues, topology
from extender.scheduling.admission import Admission
from extender.scheduling.decisions import Effect, FilterDecision, Verdict, pod_ref
from extender.scheduling.disruption import RETRY_S
from extender.scheduling.ledger import Preemption, Victim
from extender.scheduling.telling import Telling
from extender.scheduling.view import FilterCall, View, marked_unschedulable, pod_identity
from extender.state.store import PodRecord, disrupted_by_gang, is_live

log = logging.getLogger(__name__)

RECLAIM_ABOVE = 2**62
"""The priority a reclaim evicts below: every priority, since reclaim is between queues, not priorities."""
RECLAIM_LOOK_S = 5.0
"""How often reclaims_tick takes one waiting gang through its filter path: a plan over every node."""


def freed(units: Sequence[preemptor.Unit]) -> dict[str, int]:
    """What evicting `units` gives back to their queues: a victim holding room is charged to its
    queue; a pending one is not."""
    total: dict[str, int] = {}
    for u in units:
        for v in u.victims:
            if v.node:
                for r, n in v.requests.items():
                    total[r] = total.get(r, 0) + n
    return total


class GangPreemption:
    def __init__(
        self,
        view: View,
        telling: Telling,
        admission: Admission,
        filter_pod: Callable[[dict[str, Any], Sequence[str]], FilterDecision],
        *,
        hold_s: float,
        pursued: Callable[[PodRecord], bool] | None = None,
    ) -> None:
        self.view = view
        self.store = view.store
        self.ledger = view.ledger
        self.telling = telling
        self.admission = admission
        self._filter = filter_pod  # the filter verb, for a gang member's plan over every node
        self.hold_s = hold_s
        self.outcomes: collections.Counter[str] = collections.Counter()
        """Preemptions by outcome (planned, no-domain, completed, expired), for the server to take."""
        self.victims: collections.Counter[str] = collections.Counter()
        """Victims evicted by preemptors, by kind (gang, pod), for the server to take."""
        self._reclaim_looked: dict[GroupKey, float] = {}  # gang -> when reclaims_tick last took it
        self._asked: dict[str, tuple[float, Effect]] = {}
        """victim uid -> when its eviction was last asked, and the eviction: asked again after
        RETRY_S while its preemption runs, when the API refused it (a disruption budget) and it is
        neither gone nor going (a victim gang left running in part is worse than one never touched).
        An eviction the API accepted is never asked again, however late the watch shows it."""
        self._refused: set[str] = set()  # victims' uids whose last eviction the API refused
        self._pursued = pursued  # whether the whole-gang disruption is evicting a pod's gang
        self._protected: dict[str, float] = {}
        """victim uid -> until when no new preemption takes it: a disruption budget refused its
        eviction (for hold_s from the last refusal: kube-scheduler passes over victims a budget
        protects; a preemption asking it already asks again)."""
        self.spared_gen = 0  # bumps when `_protected` changes: a no-fit found before may not hold
        self._marked_since: dict[GroupKey, float] = {}
        """preemptor -> when it first looked while pods the disruption marks were going: their room
        counts as coming for one hold_s, no longer (a budget may refuse them for good: it then
        preempts elsewhere, as kube-scheduler passes over victims a budget protects)."""

    def note_completed(self) -> None:
        """A preemptor was planned into the room its victims freed."""
        self.outcomes["completed"] += 1

    def preempt_to_admit(
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

        rest = self.admission.beyond_hold(call.group.key, queue, dict(need))  # its hold is charged already

        def enough(units: Sequence[preemptor.Unit]) -> bool:
            credit = freed(units)
            return queues.admission(snap, queue, rest, call.group.key, credit=credit) is None

        started, _ = self.preempt(call, members, leaves, "", enough=enough)
        return started

    def preempt(
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
        if me is None or not member_may_preempt(call.pod, group):
            return None, no_fit
        # the gang's lowest member priority: no victim may be equal to or above any of its members
        priority = min(member_priority(m.rec.obj if m.key != call.key else call.pod, group) for m in members)
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
            plan = self._plan(group, members, leaves, me, priority, admit, enough)
        except topology.TopologyError:
            return None, no_fit
        if plan is not None and not plan.units:
            return None, no_fit  # it fits without evicting anyone, on nodes kube-scheduler did not offer
        if plan is None:
            if enough is not None:
                return None, no_fit  # a queue's wait, not a gang that fits nowhere: no outcome to count
            self.outcomes["no-domain"] += 1
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

    def _plan(
        self,
        group: GroupSpec,
        members: Sequence[planning.Member],
        leaves: Sequence[str | None],
        me: planning.Member,
        priority: int,
        admit: Callable[[preemptor.Unit], bool] | None,
        enough: Callable[[Sequence[preemptor.Unit]], bool] | None = None,
    ) -> preemptor.PreemptionPlan | None:
        """preemptor.plan_preemption, sparing the pods this module spares and counting the marked room
        it counts now."""
        return preemptor.plan_preemption(
            self.store,
            self.ledger,
            group,
            members,
            leaves,
            me=me,
            priority=priority,
            admit=admit,
            enough=enough,
            spared=self._spared,
            coming=self._coming(group.key),
        )

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
            hold_until=self.ledger.clock() + self.hold_s,
            where=plan.where,
            reason=reason,
            hold_s=self.hold_s,
        )
        self.ledger.start_preemption(record)
        self._marked_since.pop(group.key, None)
        self.outcomes[outcome] += 1
        self.victims["gang"] += len(plan.gangs)
        self.victims["pod"] += len(plan.plain_pods)
        effects = []
        for v in plan.victims:
            text = why(v)
            if v.gang is not None:
                text += f"; evicted with its whole gang {v.gang}, never part of it"
            data = {"uid": v.uid, "reason": text, "gang": v.gang or ""}
            effects.append(Effect("evict", *pod_ref(v.pod), data))
            self._asked[v.uid] = (self.ledger.clock(), effects[-1])
            self.ledger.note_evicted(v.pod, v.uid)  # going from now: see the ledger's `_evicted`
        log.info(
            "%s",
            reason,
            extra={"pod": call.key, "gang": group.key, "domain": plan.domain, "members": len(plan.victims)},
        )
        effects += self.telling.story(
            group, call.key, "GangReclaiming" if outcome == "reclaim" else "GangPreempting", reason
        )
        return FilterDecision(Verdict.WAITING, [], reason, effects=effects)

    def reclaim(
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
        need = self.admission.beyond_hold(group.key, queue, need)  # its hold is charged to its queue already
        if not queues.may_reclaim(snap, queue, need):
            return None

        def admit(u: preemptor.Unit) -> bool:
            return queues.reclaimable(snap, queue, need, {self.admission.queue_of_unit(u): freed([u])})

        try:
            plan = self._plan(group, members, leaves, me, RECLAIM_ABOVE, admit)
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

        priority = min(member_priority(m.rec.obj if m.key != call.key else call.pod, group) for m in members)
        return self._evict_for(call, plan, priority, reason, why, "reclaim")

    def _spared(self, rec: PodRecord) -> bool:
        """No victim of a new preemption now: the whole-gang disruption marked it and evicts it, or a
        budget refused its eviction a moment ago."""
        if rec.uid in self._protected and self.ledger.clock() < self._protected[rec.uid]:
            return True
        return self._pursued is not None and disrupted_by_gang(rec.obj) and self._pursued(rec)

    def _coming(self, gang: GroupKey) -> Callable[[PodRecord], bool] | None:
        """Which marked pods' room counts as coming for `gang` now (None: none; see `_marked_since`)."""
        return self._pursued if self.counts_marked_room(gang) else None

    def counts_marked_room(self, gang: GroupKey) -> bool:
        """Whether the room of pods the disruption is evicting counts as coming for `gang` now (see
        `_marked_since`)."""
        if not self._marks_going():
            self._marked_since.pop(gang, None)  # none going: the next disruption is waited on afresh
            return True
        now = self.ledger.clock()
        return now - self._marked_since.setdefault(gang, now) < self.hold_s

    def _marks_going(self) -> bool:
        """Whether any pod the whole-gang disruption marked is being evicted by it now."""
        return self._pursued is not None and any(self._pursued(r) for r in self.store.marked_to_go())

    def tick(self, *, acting: bool = True) -> list[Effect]:
        """Give up preemptions whose hold ended, and bring back the members of a preemptor whose
        victims are all gone (kube-scheduler does not retry a pod because others were deleted).
        Refused evictions are asked again only `acting` (a follower's writes are dropped)."""
        effects: list[Effect] = []
        if self._marked_since and not self._marks_going():
            self._marked_since.clear()  # no disruption under way: the next one is waited on afresh
        for gang in [g for g in self._marked_since if not self.store.group_size(g)]:
            del self._marked_since[gang]  # bounded memory
        if self._protected:
            now = self.ledger.clock()
            left = {uid: t for uid, t in self._protected.items() if t > now}
            if len(left) < len(self._protected):
                self._protected = left
                self.spared_gen += 1
        for p in self.ledger.expire_preemptions():
            if p.given_up:
                self.outcomes["given-up"] += 1
                log.warning("gang %s: %s", p.gang, p.given_up)
                # its members wait on victims that went for room now taken: they are looked at again
                effects += self.telling.nudge_turned_away(p.gang, "retry")
            else:
                self.outcomes["expired"] += 1
                log.warning("gang %s: preemption hold in %s expired", p.gang, p.domain or "the cluster")
            effects += self.telling.tell_gang(p.gang)
        for gang, p in self.ledger.preemptions_now():
            if not p.nudged and self.ledger.victims_gone(gang):
                p.nudged = True
                effects += self.telling.nudge_turned_away(gang, "preempted")
        if self._asked and acting:
            effects += self._ask_again()
        return effects

    def note_refused(self, uid: str, *, by_api: bool = False) -> None:
        """An eviction asked did not happen; `by_api`: the API server answered no (a disruption
        budget's 429), so no new preemption takes the pod for a while."""
        if by_api and uid:
            self._protected[uid] = self.ledger.clock() + self.hold_s
            self.spared_gen += 1
        if uid in self._asked:  # a preemption's victim (the disruption asks its own again)
            self._refused.add(uid)

    def _ask_again(self) -> list[Effect]:
        """The evictions of running preemptions' victims neither gone nor going, asked RETRY_S ago
        or more: asked again (an eviction a disruption budget refused is refused with 429, and asked
        again until it is allowed, as kube-scheduler's preemption and the disruption do)."""
        now = self.ledger.clock()
        out, live = [], set()
        for _, p in self.ledger.preemptions_now():
            for pk, v in p.victims.items():
                live.add(v.uid)
                asked = self._asked.get(v.uid)
                if asked is None or v.uid not in self._refused or now - asked[0] < RETRY_S or pk in p.held:
                    continue
                rec = self.store.pods.get(pk)
                if rec is None or rec.uid != v.uid or not is_live(rec.obj):
                    continue  # gone, or going: its deletion is under way
                self._asked[v.uid] = (now, asked[1])
                self._refused.discard(v.uid)  # not noted going: its last answer said it is not, or
                out.append(asked[1])  # gave none (noted for UNCONFIRMED_S then, not renewed here)
        self._asked = {uid: a for uid, a in self._asked.items() if uid in live}
        self._refused &= live
        return out

    def preempt_as_gang(self, pod: dict[str, Any]) -> list[Effect] | None:
        """kube-scheduler found no node for a member of a gang that may preempt (its own filters
        passed none, so this service's filter was never asked) and asks the preempt verb. The gang
        preempts as a whole, through the filter's own path over every node: a plan, a preemption
        started or waited on, or the reason none can be. The effects to run; None when the pod is
        not such a gang member (kube-scheduler's per-pod candidates then stand)."""
        if self.view.gang_of_pod(pod) is None:
            return None
        group = self.store.membership_of(pod).group
        if member_priority(pod, group) <= 0 or not member_may_preempt(pod, group):
            return None
        return self._plan_everywhere(pod)

    def _plan_everywhere(self, pod: dict[str, Any]) -> list[Effect]:
        """The gang member's filter over every schedulable node its own selector, affinity and
        tolerations admit (the nodes kube-scheduler's own filters would offer, resources aside: the
        filter takes its offered nodes as where it may go, and a release binds it there): a plan, a
        preemption or reclaim started or waited on, or the reason none can be; the effects to run."""
        arrays = self.store.arrays
        admits = self.store.eligible_mask(pod)
        names = [
            n
            for r, n in sorted(self.store.row_names.items())
            if arrays.schedulable[r] and (admits is None or admits[r])
        ]
        decision = self._filter(pod, names)
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
            if self.ledger.preemption(gang) is not None or (
                looked is not None and now - looked < RECLAIM_LOOK_S
            ):
                continue
            usable = tally.ready_need()  # a leaf short of pods binds nothing: nothing to reclaim for it
            if usable is None or not usable[0]:
                continue
            if not queues.may_reclaim(
                snap, tally.queue, self.admission.beyond_hold(gang, tally.queue, usable[1])
            ):
                continue
            # a member of a leaf the book counts the gang's need by: one of a leaf short of pods would
            # only be told to wait, and the gang would never be found to fit nowhere (it would hold
            # other queues' pods back for ever, for room it cannot use)
            leaves = tally.ready_leaves() or frozenset()
            pod = next(
                (
                    r.obj
                    for r in self.store.group_members(gang)
                    if not r.node_name
                    and is_live(r.obj)
                    and marked_unschedulable(r.obj)
                    and self.store.membership(r).subgroup in leaves
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

    def take_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        out = (dict(self.outcomes), dict(self.victims))
        self.outcomes.clear()
        self.victims.clear()
        return out
