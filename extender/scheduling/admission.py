"""KAI queue admission: whether a gang (or a plain pod) may take room now, given its queue's limits,
quota and fair share, at filter and again at bind; the gangs held for their queue and their return
once admission passes; the Queue status writes.

Owns the queue holds and what each held gang needs, the queue snapshot cache (with the plain pods
found fitting nowhere, which the snapshot counts as stuck), and the QueueBook of usage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extender.grouping.membership import single_pod_group
from extender.model.group import GroupSpec, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, single_pod_of
from extender.model.priority import member_priority
from extender.model.queue import QUEUE_API_GROUP, QUEUE_KIND
from extender.placement import api as placement
from extender.scheduling import messages, planning, preemptor, queues, topology
from extender.scheduling.decisions import Effect, FilterDecision, Verdict
from extender.scheduling.telling import Telling
from extender.scheduling.view import FilterCall, View
from extender.state.store import PodRecord, is_live

log = logging.getLogger(__name__)

IDLE_SHAPES = 8
"""Kinds of pending pod (requests, subgroup) a group is looked at for room before it is taken as able
to use some: a fair-share check must stay cheap whatever the group's size."""

QUEUE_STATUS_INTERVAL_S = 5.0
"""How often Queue status (allocated, requested) is brought up to date: usage moves with every bind,
and a write per bind would double the API server's load."""


class Admission:
    def __init__(self, view: View, telling: Telling, default_queue: str) -> None:
        store = view.store
        self.view = view
        self.store = store
        self.ledger = view.ledger
        self.telling = telling
        self.default_queue = default_queue
        """The queue of a gang that names none (no PodGroup spec.queue, no kai.scheduler/queue label)."""
        self.queue_holds: dict[GroupKey, tuple[str, str]] = {}
        """Gangs (and plain pods) waiting for their queue: key -> (queue, why); see queues.py."""
        self._queue_snapshot: tuple[tuple[int, ...], queues.QueueSnapshot | None] = ((-1,), None)
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

    def look_to_admit(self, gang: GroupKey) -> bool:
        """Whether the cache changed since `gang`'s last look for evictions that admit it (marked now):
        with nothing changed, the answer is the same."""
        if self._admit_looked.get(gang) == self.store.change_gen:
            return False
        self._admit_looked[gang] = self.store.change_gen
        return True

    def room_may_be_freed(self) -> None:
        """The preempt verb chose victims for a pod."""
        if self._pod_no_fit:
            self._no_fit_gen += 1  # a pod found stuck may have room being freed for it now

    def queue_snapshot(self) -> queues.QueueSnapshot | None:
        """Every queue's usage and fair share, recomputed only when the store changed; None when the
        cluster has no Queue objects (then nothing is enforced)."""
        gen, snap = self._queue_snapshot
        now_gen = (self.store.change_gen, self.ledger.gen, self._no_fit_gen, self.ledger.holds.gen)
        if gen != now_gen:
            planned = [g for g, e in self.ledger.entries() if e.plan]
            # the room held for a preemptor is its queue's: the victims' charge left with them; so is
            # the room held for a waiting gang (holds.py), as its plan will be (waiting_held)
            holding = {
                g: (p.queue, p.held_room())
                for g, p in self.ledger.preemptions_now()
                if p.queue is not None and (p.held or p.claimed)
            }
            snap = self.queue_book.snapshot(
                planned,
                holding,
                victims=self.ledger.victims_in_flight(),
                stuck=self._stuck(),
                incoming=self.ledger.incoming(),
                idle=self._pod_idle,
                waiting_held={g: r for g, r in self.ledger.holds.room_by_gang().items() if g not in holding},
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
            for key, e in self.ledger.entries()
            if e.no_fit is not None and not e.plan and e.no_fit[0][0] == release_gen
        ]
        for key, (pk, gen) in self._pod_no_fit.items():
            rec = self.store.pods.get(pk)
            if gen == release_gen and rec is not None and not self._room_coming(rec):
                stuck.append(key)
        return stuck

    def _pod_idle(self, key: GroupKey) -> bool:
        """Whether the pending pods of group `key` (a plain pod, or a group of quorum one whose pods
        are placed one at a time) could use no room as the cluster is now: each asks for a resource
        no node has, or no schedulable node it may go to (inside the group's domain, where a member
        placed already pins it) has room for it, and kube-scheduler's preemption is not freeing any
        for them (queues.QueueSnapshot.idle). Their own filters passing no node, kube-scheduler may
        never ask this service to say so. Pods alike are looked at once (a few shapes at most)."""
        pending = [r for r in self._group_pods(key) if not r.node_name and is_live(r.obj)]
        if not pending or any(self._room_coming(r) for r in pending):
            return False
        arrays = self.store.arrays
        looked: set[tuple[int, str | None]] = set()
        for rec in pending:
            membership = self.store.membership(rec)
            shape = (id(rec.requests), membership.subgroup)
            if shape in looked:
                continue
            looked.add(shape)
            if len(looked) > IDLE_SHAPES:
                return False  # too many kinds of pod to tell cheaply: taken as able to use the room
            request, missing = self.store.request_vector(rec.requests)
            if missing:
                continue
            usable = arrays.schedulable[: arrays.n_rows]
            admits = self.store.eligible_mask_of(rec)  # its selector, affinity and tolerations
            if admits is not None:
                usable = usable & admits[: arrays.n_rows]
            rows = np.flatnonzero(usable).astype(np.int32)
            group = membership.group
            if len(rows) and group is not None and group.source is not Source.SINGLE_POD:
                try:
                    allowed = planning.domain_mask(
                        self.store, self.ledger, group, membership.subgroup, rows, exclude=rec.key
                    )
                except topology.TopologyError:
                    continue  # its filter refuses it: it uses nothing
                if allowed is not None:
                    rows = rows[allowed]
            if len(rows) and bool(placement.fit_mask(arrays, rows, request).any()):
                return False
        return True

    def _group_pods(self, key: GroupKey) -> list[PodRecord]:
        members = self.store.group_members(key)
        if members:
            return list(members)
        pod = single_pod_of(key)
        rec = self.store.pods.get(pod) if pod is not None else None  # a plain pod, terminal or gone
        return [rec] if rec is not None else []

    def _room_coming(self, rec: PodRecord) -> bool:
        """kube-scheduler's preemption may be freeing room for the pod: it is nominated to a node, or
        the preempt verb's victims are leaving for it."""
        return rec.uid in self.view.evictions or bool((rec.obj.get("status") or {}).get("nominatedNodeName"))

    def note_pod_fit(self, call: FilterCall, decision: FilterDecision) -> FilterDecision:
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

    def queue_wait(
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
            held = self.ledger.holds.of(call.group.key)
            if held is not None and queue is not None and held.queue == queue:
                # the room held for it is charged to its queue already: its own need is not counted
                # twice. A hold made for the queue it named before (its queue edited since) is
                # charged there, and credits nothing here
                credit = dict(credit or {})
                for r, v in held.room.items():
                    credit[r] = credit.get(r, 0) + v
            if queue is not None:
                reason = queues.admission(
                    snap, queue, need, call.group.key, what=what, fair_share=fair_share, credit=credit
                ) or self._preempting_in(queue, call)
        if not reason:
            self.queue_holds.pop(call.group.key, None)
            self._held_need.pop(call.group.key, None)
            return None
        self.queue_holds[call.group.key] = (queue or "", reason)
        self._held_need[call.group.key] = dict(need)
        return reason

    def hold_refused(
        self, queue: str, room: dict[str, int], gang: GroupKey, credit: dict[str, int]
    ) -> str | None:
        """Why `queue` (or an ancestor) may not be charged `room` held for `gang`: its limits only
        (a hold is only for a gang its queue admitted; fair share was judged then)."""
        snap = self.queue_snapshot()
        if snap is None:
            return None
        return queues.admission(snap, queue, room, gang, what="gang", fair_share=False, credit=credit)

    def beyond_hold(self, gang: GroupKey, queue: str | None, need: dict[str, int]) -> dict[str, int]:
        """What of `need` `queue` (the gang's) is not charged yet: the room held for it (holds.py) is
        in its queue's allocated already, so a reclaim or a preemption for it counts only the rest.
        A hold charged to another queue (the gang's queue edited since) counts for nothing here."""
        held = self.ledger.holds.of(gang)
        if held is None or held.queue is None or held.queue != queue:
            return dict(need)
        return {r: max(0, v - held.room.get(r, 0)) for r, v in need.items()}

    def is_queue_held(self, gang: GroupKey) -> bool:
        """Whether the gang (or plain pod) waits for its queue's admission."""
        return gang in self.queue_holds

    def _preempting_in(self, queue: str, call: FilterCall) -> str | None:
        """Why work of `queue` waits for a higher-priority gang of the same queue preempting there: the
        room its victims free, while they terminate, is the preemptor's, as KAI pipelines it. Else
        lower-priority work of the queue (the victims' own replacements) would take the queue's room
        back each time a victim goes, and the preemptor would evict one pod after another, never
        admitted."""
        priority = member_priority(call.pod, call.group)
        for gang, p in self.ledger.preemptions_now():
            if p.queue == queue and gang != call.group.key and priority < p.priority:
                return (
                    f"queue {queue} is freeing room for gang {gang} (priority {p.priority}) by "
                    "preemption; its work of lower priority waits until that gang is placed"
                )
        return None

    def limit_at_bind(self, rec: PodRecord, group: GroupSpec | None, *, held: bool = False) -> str | None:
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

    def holds_over(self) -> list[Effect]:
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
            effects += self.telling.nudge_turned_away(gang, "queue")
        return effects

    def gang_need(
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
                    if m.leaf == leaf and not (m.rec.node_name or self.ledger.is_assumed(m.key))
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

    def queue_of_unit(self, u: preemptor.Unit) -> str:
        """The queue whose usage a preemption or reclaim unit's eviction lowers."""
        rec = self.store.pods.get(u.victims[0].pod)
        if rec is None:
            return ""
        m = self.store.membership(rec)
        return self.queue_name(m.group or single_pod_group(rec.obj), rec.obj)

    def preempt_queue_rule(
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
