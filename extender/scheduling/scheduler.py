"""Scheduler: the facade over the parts that decide (filtering, binding, gang_preemption,
admission, telling, debug; see the package docstring): the verbs (filter, prioritize, bind,
preempt), the outcomes the server reports, and one tick. Of its own it keeps only the writes the
preempt verb decided (for the server to run) and whether the start-up nudge was made.

How a gang travels (design-notes.md):
1. Until quorum pods exist, every node is rejected as unresolvable, saying how many exist.
2. The first member that finds quorum present plans the whole quorum at once (planning.py); the
   ledger holds the plan's capacity against every other pod and gang; pending siblings are
   nudged so kube-scheduler retries them now rather than after its backoff.
3. Filter then passes each planned member only its planned node. When kube-scheduler does not
   offer it (its own filters refused it), the member is moved inside the plan's domain, or the
   plan is dropped and that node avoided next time, so replanning converges.
4. Bind is the barrier: a member waits until every planned member has arrived; the server then
   binds them all and reports the outcome to the ledger; a barrier the watch completes (its last
   member seen bound) is released by the tick. Past the gang wait, waiting binds fail, the
   capacity is given back and the gang backs off.
Bound is counted in the cluster: once quorum members are bound, members beyond it are placed as
they come, inside the gang's domain when a constraint requires it; a subgroup that has not bound
its own minMember yet is planned as a unit, never pod by pod. Pods that are not gangs (basic
policy, a quorum of one) are placed one by one.

Everything here is synchronous. The server awaits the barrier and performs the writes listed in
a decision's `effects`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from extender.gang.entry import Phase
from extender.model.group import GroupSpec, MembershipState
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.placement import api as placement
from extender.scheduling import leadership, planning, preemption, queues
from extender.scheduling.admission import Admission
from extender.scheduling.binding import Binding
from extender.scheduling.debug import Debug
from extender.scheduling.decisions import (
    BindDecision,
    Effect,
    FilterDecision,
)
from extender.scheduling.disruption import GangDisruption, GangEviction
from extender.scheduling.filtering import Filtering
from extender.scheduling.gang_preemption import GangPreemption
from extender.scheduling.holding import Holding
from extender.scheduling.ledger import UNCONFIRMED_S, Answer, Expiry, GangLedger, Release
from extender.scheduling.podgrouper import Podgrouper
from extender.scheduling.pooling import PoolMap
from extender.scheduling.reasons import ReasonsTold
from extender.scheduling.repair import ConditionRepair
from extender.scheduling.status import counts_now, status_now
from extender.scheduling.telling import Telling
from extender.scheduling.view import View, pod_identity
from extender.state.store import NODE, POD, ClusterStore, PodRecord, is_terminal

log = logging.getLogger(__name__)


@dataclasses.dataclass
class TickOutcome:
    """What one tick decided, for the server to carry out: answer each expiry's and each dropped
    plan's waiting binds with its message, run the writes, evict each broken gang's members, each
    on its own (the whole gang goes at once), and bind the releases."""

    expiries: list[Expiry] = dataclasses.field(default_factory=list)
    answers: list[Answer] = dataclasses.field(default_factory=list)
    effects: list[Effect] = dataclasses.field(default_factory=list)
    evictions: list[GangEviction] = dataclasses.field(default_factory=list)
    releases: list[tuple[GroupKey, list[Release]]] = dataclasses.field(default_factory=list)
    """Barriers the watch completed: bind these members now, as for a release at bind."""


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
        podgrouper: Podgrouper | None = None,
        disruption: GangDisruption | None = None,
        leader: leadership.LeaderLease | None = None,
    ) -> None:
        self.store = store
        self.leader = leader
        self.ledger = ledger
        self.reason_nodes = reason_nodes
        self.view = View(store, ledger, native_gang_scheduling=native_gang_scheduling)
        self.telling = Telling(self.view)
        self.admission = Admission(self.view, self.telling, default_queue)
        self.binding = Binding(self.view, self.telling, self.admission, bind_fence_s=bind_fence_s)
        self.gang_preemption = GangPreemption(
            self.view,
            self.telling,
            self.admission,
            lambda pod, names: self.filtering.filter(pod, names),
            hold_s=preemption_hold_s,
            pursued=self._pursued,
        )
        self.pools = PoolMap(store, ledger)
        self.holding = Holding(
            self.view,
            self.telling,
            lambda group, pod: self.admission.gang_queue(group, pod),
            self.admission.is_queue_held,
            self.admission.hold_refused,
            self.pools,
        )
        self.debug = Debug(self.view, self.admission, self.holding, self.pools)
        self.podgrouper = podgrouper
        self.disruption = disruption
        self._startup_nudged = False
        # gangs a pod bound or gone touched since the last tick: their KAI counts may have moved
        self._counts_moved: dict[GroupKey, GroupSpec] = {}
        self.preempt_effects: list[Effect] = []
        """Writes decided by the preempt verb (it answers candidates only), for the server to run."""
        self.filtering = Filtering(
            self.view,
            self.telling,
            self.admission,
            self.gang_preemption,
            settle_s=settle_s,
            exact_refusals_max=exact_refusals_max,
            pools=self.pools,
            evicting=disruption.evicting if disruption is not None else lambda key: None,
        )
        self.repair = ConditionRepair(store)
        store.add_listener(self._on_change)
        for row in sorted(store.row_names):
            # in the store before this listener (an embedded cluster, attached first): its bindings
            # may be moments old, as new to kube-scheduler's cache as a watch event's
            self.filtering.settling.mark(row)

    @property
    def evictions(self) -> preemption.Evictions:
        return self.view.evictions

    # ================================================================= filter
    def rows_of(self, node_names: Sequence[str]) -> np.ndarray:
        return self.view.rows_of(node_names)

    def plain_refusals(self, pod: dict[str, Any]) -> np.ndarray | None:
        return self.filtering.plain_refusals(pod)

    def plain_passed(self, pod: dict[str, Any]) -> None:
        self.filtering.plain_passed(pod)

    def node_usable(self, node: str) -> bool:
        return self.store.node_usable(node)

    def planned_node_for(self, pod: dict[str, Any]) -> str | None:
        return self.filtering.planned_node_for(pod)

    def _pursued(self, rec: PodRecord) -> bool:
        """Whether the whole-gang disruption is evicting the gang of `rec` now (asking again until
        its members go)."""
        if self.disruption is None:
            return False
        m = self.store.membership(rec)
        return m.group is not None and self.disruption.evicting(m.group.key) is not None

    def eviction_unanswered(self, pod: PodKey, uid: str) -> None:
        """An eviction this service asked for got no answer (a cut connection, a timeout, a 5xx): it
        may have landed. The pod counts as going a while (as a binding whose answer was lost), and a
        preemption's victim is asked again (an eviction asked twice of a pod going is harmless)."""
        self.ledger.note_evicted(pod, uid, for_s=UNCONFIRMED_S)
        self.gang_preemption.note_refused(uid)

    def dropped(self, effects: Iterable[Effect]) -> None:
        """Writes decided and never made (the Lease moved): an eviction among them is not going."""
        for e in effects:
            if e.kind == "evict":
                self.eviction_refused(pod_key(e.namespace, e.name), str(e.data.get("uid", "")))

    def eviction_refused(self, pod: PodKey, uid: str, *, by_api: bool = False) -> None:
        """An eviction this service asked for did not happen: the pod is not going. `by_api`: the API
        refused it (for now: a disruption budget), else it was never sent (failed first, dropped)."""
        self.ledger.forget_evicted(pod, uid)
        self.gang_preemption.note_refused(uid, by_api=by_api)

    def eviction_accepted(self, pod: PodKey, uid: str) -> None:
        """The API accepted an eviction this service asked for: the pod is going, whatever the watch
        shows yet (no preemption takes it again; its room is coming)."""
        self.ledger.note_evicted(pod, uid, accepted=True)

    def names_known(self, array: bytes) -> bool:
        """Whether a NodeNames array, as the request's raw bytes, is a list of names the cache holds
        (read at compiled speed, kept for the same list); False sends the request the full way,
        which says what is wrong with it."""
        rows = self.store.rows_of_names(array)
        return rows is not None and bool((rows >= 0).all())

    def filter(self, pod: dict[str, Any], node_names: Sequence[str]) -> FilterDecision:
        self.repair.saw_filter(pod)
        return self.filtering.filter(pod, node_names)

    # ----------------------------------------------------------------- queues
    @property
    def queue_book(self) -> queues.QueueBook:
        return self.admission.queue_book

    def queue_snapshot(self) -> queues.QueueSnapshot | None:
        return self.admission.queue_snapshot()

    def take_preemption_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        return self.gang_preemption.take_counts()

    def take_hold_metrics(self) -> tuple[int, float, list[float]]:
        return self.holding.take_metrics()

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
    @property
    def fence_until(self) -> float:
        return self.binding.fence_until

    def bind(self, *, namespace: str, name: str, uid: str, node: str) -> BindDecision:
        return self.binding.bind(namespace=namespace, name=name, uid=uid, node=node)

    def fence_over(self, key: PodKey, node: str) -> str:
        return self.binding.fence_over(key, node)

    def bind_done(self, key: PodKey, node: str, error: str, *, unknown: bool = False) -> None:
        """A single pod's API binding finished ("" = bound; `unknown`: it may have landed)."""
        self.binding.done(key, node, error, unknown=unknown)

    def fence_left_s(self) -> float:
        return self.binding.fence_left_s()

    def fence_reason(self, key: PodKey) -> str:
        return self.binding.fence_reason(key)

    def release_done(self, gang: GroupKey, results: dict[PodKey, str]) -> list[Effect]:
        return self.binding.release_done(gang, results)

    def take_bind_times(self) -> list[float]:
        return self.binding.take_bind_times()

    # ================================================================= the ticker
    def role(self, now_s: float) -> tuple[leadership.Role, str]:
        """Whether this replica acts on the cluster, and why (leadership.py), at wall-clock `now_s`."""
        lease = self.leader
        obj = self.store.get(*leadership.LEASE_KIND, lease.namespace, lease.name) if lease else None
        return leadership.role(lease, obj, now_s)

    def tick(self, *, synced: bool, acting: bool = True) -> TickOutcome:
        """One pass of everything that happens with time rather than on a call, in the order each
        step needs: gang barriers whose wait or hold ended, and those the watch completed; the
        nudges (once after the first sync, backoffs over, quorums arrived); the PodGroups the
        podgrouper keeps; preemptions whose hold ended or whose victims are gone; then, on a synced
        cache only (a partial one would see gangs broken and queues empty that are not), whole-gang
        disruption, Queue status, queue holds over and reclaim; the reasons pods are told; last, the
        answers of plans dropped on the way.

        Not `acting` (a follower: another replica's kube-scheduler holds the Lease), it writes nothing:
        what would write (the podgrouper's PodGroups, evictions of every kind, Queue status) is not
        decided, and the rest's writes are dropped; barrier expiries and dropped plans are still
        answered. Becoming the leader, it starts as a started process does (the start-up nudge), and
        what it writes it decides from the cache, never from what it did before."""
        out = TickOutcome()
        if not acting:
            self._startup_nudged = False
        for expiry, effects in self.binding.expire():
            out.expiries.append(expiry)
            out.effects += effects
        out.releases = self.binding.completed_releases()
        if synced and acting and not self._startup_nudged:
            # the first acting pass after a start or after following: nudge, and plan every workload
            self._startup_nudged = True
            out.effects += self.telling.startup_nudges()
            if self.podgrouper is not None:
                self.podgrouper.look_at_everything()
        out.effects += self.telling.backoffs_over()
        if self.podgrouper is not None and synced and acting:
            out.effects += self.podgrouper.plan()
            for gang in self.podgrouper.take_arrived():
                owed = status_now(self.store, self.ledger, gang)
                if owed is not None:
                    out.effects.append(owed)
        out.effects += self.telling.quorum_arrived()
        out.effects += self.gang_preemption.tick(acting=acting)
        if synced:
            # on a partial cache every gang would look short of room: holds are chosen from a whole one
            out.effects += self.holding.tick()
        if synced and acting:
            if self.disruption is not None:
                try:
                    out.evictions = self.disruption.decide()
                except Exception:
                    # logged, never raised: the ticker would answer every waiting bind with it
                    log.exception("deciding whole-gang evictions failed")
                for eviction in out.evictions:
                    if eviction.fresh:
                        log.warning("%s", eviction.reason)
                        out.effects += self.telling.gang_events(
                            eviction.spec, None, "GangEvicted", eviction.reason, "Warning"
                        )
            moved, self._counts_moved = self._counts_moved, {}
            for gang in sorted(moved):
                recount = counts_now(self.store, self.ledger, moved[gang])
                if recount is not None:
                    out.effects.append(recount)
            out.effects += self.admission.queue_status()
            out.effects += self.admission.holds_over()
            out.effects += self.gang_preemption.reclaims_tick()
            out.effects += self.repair.take()
        out.effects += self.telling.fresh_reasons()
        out.answers = self.ledger.take_answers()
        if not acting:
            self.dropped(out.effects)
            out.effects = []
        return out

    # ================================================================= what pods and groups are told
    @property
    def told(self) -> ReasonsTold:
        return self.telling.told

    def note_bind_error(self, key: PodKey, error: str) -> None:
        self.telling.note_bind_error(key, error)

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        """A pod deleted or bound is no longer ours to tell: its entry goes (bounded memory). A node
        changed or a pod seen bound: the row settles (see `plain_refusals`)."""
        meta = obj.get("metadata") or {}
        if kind == NODE:
            row = self.store.node_rows.get(str(meta.get("name", "")))
            if row is not None:
                self.filtering.settling.mark(row)
            return
        if kind != POD:
            return
        node = (obj.get("spec") or {}).get("nodeName")
        deleted = event == "DELETED"
        if not (node or deleted):
            return  # still pending: nothing here follows it until it binds or goes
        if not self.store.is_plain(obj):
            m = self.store.membership_of(obj)
            if m.state is MembershipState.MEMBER and m.group is not None and m.group.is_gang():
                self._counts_moved[m.group.key] = m.group  # a Running gang's counts moved
        self.repair.on_pod(event, obj)
        pk = pod_key(str(meta.get("namespace", "")), str(meta.get("name", "")))
        if node and not deleted and not is_terminal(obj):
            row = self.store.node_rows.get(node)
            if row is not None:
                self.filtering.settling.mark(row)
                self.binding.landed(pk, row)
        self.telling.told.forget_pod(pk)
        self.view.evictions.forget(str(meta.get("uid") or ""))

    def gangs_pending(self) -> int:
        """Gangs the ledger knows whose quorum is not bound yet."""
        return sum(1 for gang in self.ledger.gang_keys() if self.phase_of(gang) is not Phase.BOUND)

    # ================================================================= preempt
    def preempt(self, pod: dict[str, Any], victims: dict[str, Any]) -> preemption.PreemptDecision:
        """The candidates whose victims break no gang and free room no one else holds (the order is
        preemption.py's). A node this service does not know is refused, as in filter
        (UnknownNodesError: the request is answered 400 with the names)."""
        self.rows_of(list(victims))
        gang_effects = self.gang_preemption.preempt_as_gang(pod)
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
        if uid in self.view.evictions:
            self.filtering.lagging.forget(key)  # its victims' going is a new run of retries
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
