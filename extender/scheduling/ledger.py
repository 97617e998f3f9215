"""GangLedger: the one owner of every gang's plan, held capacity, barrier, backoff and memos.

Nothing else writes a plan, a hold (`ClusterStore.hold`/`unhold`), a no-fit memo or a barrier.
Each verb either completes or leaves the state as it was: it computes first, then applies, and
the capacity moves are undone if applying fails half-way.

What is remembered here is tentative; what counts is derived from the cluster:
- a gang is Bound when its quorum is bound in the store (plus pods the API server confirmed
  bound and the watch has not shown yet, `assumed`), whatever the process remembers; so a
  restarted service (or a new leader) needs nothing rebuilt: bound members pin the domain and
  count toward quorum, and members beyond quorum are placed as they come;
- a hold becomes the bound pod's own charge the moment the watch shows the pod bound.

The ledger never calls back into the server. Verbs return which waiting bind calls to answer;
store events that end a plan (a member deleted, a node removed, the group redefined) queue their
answers, and the server takes them with `take_answers`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from extender.gang.entry import Arrival, GangEntry, Phase, PlannedPod, backoff_delay_s
from extender.model.group import GroupSpec, MembershipState
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.scheduling import topology
from extender.scheduling.holds import Held, HoldBook, HoldSettings
from extender.state.repelling import Repelling
from extender.state.store import GROUPING_KINDS, NODE, POD, ClusterStore, PodRecord, is_live, is_terminal

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Answer:
    """Waiting bind calls to answer with `message` (an error: the pods were not bound)."""

    pods: tuple[PodKey, ...]
    message: str


@dataclasses.dataclass(frozen=True)
class Release:
    """One member of a completed barrier, to bind now: exactly the pod (uid) the call named."""

    pod: PodKey
    node: str
    uid: str


@dataclasses.dataclass(frozen=True)
class Expiry:
    gang: GroupKey
    spec: GroupSpec | None
    waiting: tuple[PodKey, ...]  # the arrived members: answer those whose calls still wait
    message: str
    dropped: bool  # the plan was given up (the hold ended), not only the waiting calls answered
    domain: str = ""  # of the plan, for the log line


@dataclasses.dataclass(frozen=True)
class Settled:
    bound: tuple[PodKey, ...]
    failed: tuple[PodKey, ...]
    quorum_bound: bool
    domain: str
    spec: GroupSpec | None
    waited_s: float | None = None  # quorum bound now: seconds since the gang was first seen
    replanned: str = ""  # why the plan went with the refused members (one is gone, or left the gang)


@dataclasses.dataclass(frozen=True)
class Victim:
    """A pod a preemptor evicts: where its capacity is, and the gang it is evicted with ("" = alone)."""

    pod: PodKey
    uid: str
    node: str  # "" when it is not bound (a pending member of a victim gang): it frees nothing
    requests: dict[str, int]
    priority: int
    gang: GroupKey | None


UNCONFIRMED_S = 60.0
"""How long a binding whose answer never came may still land: the API server ends a request it took
within its request timeout (`--request-timeout`, 60 s unless set)."""
EVICTED_UNSEEN_S = 600.0
"""How long an eviction the API server accepted may go unseen by the watch: a watch ends within its
timeout (5 to 10 minutes) and the relist after it shows the pod going or gone."""


@dataclasses.dataclass
class Preemption:
    """A gang preempting: the victims being evicted for it in one domain, whose capacity is held for
    it as each one goes (and the free room its plan counts on besides, from the start), until the
    gang is planned or the hold ends. The hold ends at `hold_until`, which each victim's going moves
    to `hold_s` after it, and never while a victim is still terminating: a grace period longer than
    the hold must not hand the room to others (nor let the preemptor, finding its victims neither
    candidates nor gone, evict a second set). The free room claimed is given back at `hold_until`
    all the same: only the victims' own room waits for them."""

    gang: GroupKey
    domain: str  # "rack r1"; "" when the gang has no required level (the whole cluster)
    victims: dict[PodKey, Victim]
    gangs: tuple[GroupKey, ...]  # victim gangs, evicted whole
    priority: int  # the preemptor's
    hold_until: float
    where: dict[PodKey, str]  # the placement the plan found for the preemptor's members
    reason: str
    held: set[PodKey] = dataclasses.field(default_factory=set)  # victims gone whose room is held
    claimed: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """node -> the room already free there that the plan counts on besides its victims', held from
    the start (as kube-scheduler's nominated pods keep theirs): were it taken while the victims go,
    they would have been evicted for nothing, and the preemptor would evict again."""
    given_up: str = ""  # why it ended before its deadline (the room it counted on was taken), if it did
    hold_s: float = 0.0  # how long the room stays held once a victim has gone
    nudged: bool = False  # the members were brought back once every victim was gone
    queue: str | None = None  # the preemptor's queue, which the held room is charged to (queues in use)

    @property
    def victim_priority(self) -> int:
        return max((v.priority for v in self.victims.values()), default=0)

    def held_room(self) -> dict[str, int]:
        """What the room held for the gang (its victims gone so far, and the free room claimed)
        adds up to, by resource: its queue's, as the plan that replaces it will be."""
        out: dict[str, int] = {}
        for pk in self.held:
            v = self.victims[pk]
            if v.node:
                for r, n in v.requests.items():
                    out[r] = out.get(r, 0) + n
        for room in self.claimed.values():
            for r, n in room.items():
                out[r] = out.get(r, 0) + n
        return out

    @staticmethod
    def hold_key(gang: GroupKey, victim: PodKey) -> PodKey:
        """The reservation's key: never a real pod's ('#' is not valid in a pod name)."""
        return PodKey(f"{victim}#held-for:{gang}")

    @staticmethod
    def claim_key(gang: GroupKey, node: str) -> PodKey:
        """The key of the free room claimed on `node` (a node name has no '#' either)."""
        return PodKey(f"{node}#claimed-for:{gang}")


class GangLedger:
    def __init__(
        self,
        store: ClusterStore,
        *,
        wait_s: float,
        hold_s: float | None = None,
        backoff_initial_s: float,
        backoff_max_s: float,
        clock: Clock,
        holds: HoldSettings | None = None,
        release_on_first_bind: bool = True,
    ) -> None:
        self.store = store
        self.release_on_first_bind = release_on_first_bind
        """A plan is released when its first member reaches bind: the members kube-scheduler has not
        cycled yet are bound on their planned nodes too, except those whose filters the plan does
        not model (model.cycle) or a bound pod's anti-affinity selects, which must reach bind first."""
        self._repelling = Repelling(store) if release_on_first_bind else None
        """The bound pods' required anti-affinity, kept only where plans are released early."""
        self.holds = HoldBook(holds if holds is not None else HoldSettings())
        """Capacity withheld for the gangs at the head of the wait (holds.py): read by every plan,
        replaced whole by the holding pass (`set_holds`), a gang's own dropped when it is planned
        or leaves."""
        self.wait_s = wait_s
        self.hold_s = max(wait_s, hold_s if hold_s is not None else 3 * wait_s)
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.gangs: dict[GroupKey, GangEntry] = {}
        self._pod_gang: dict[PodKey, GroupKey] = {}
        self.assumed: dict[PodKey, str] = {}
        """pod -> node: the API server confirmed the binding, the watch has not shown it yet. Such a
        pod counts as bound and keeps its hold, so its capacity is never free twice."""
        self.binding: set[PodKey] = set()
        """Pods (not planned in a gang) whose own bind call is in flight, holding their capacity."""
        self.unconfirmed: dict[PodKey, float] = {}
        """pod -> until: its own binding got no answer (a cut connection, a timeout, a 5xx), so the
        API server may have applied it: its hold (the reservation, which says where) stays until the
        watch tells, or until no request the API server took can still land (UNCONFIRMED_S), so its
        room is never free twice."""
        self._evicted: dict[PodKey, tuple[str, float, bool]] = {}
        """pod -> (uid, until, accepted): an eviction a preemption asked (from the decision on: its
        call may be queued or unanswered yet), or one the API server accepted, that the watch has
        not shown (the cache holds the pod live): it is going, so no preemption takes it as a victim
        again, even once the one that asked it ended, and its room counts as coming, as a
        Terminating pod's does. Forgotten when the watch shows it going, when the eviction is
        refused or fails (`forget_evicted`), or after EVICTED_UNSEEN_S (bounded memory). Only an
        accepted one holds a preemption on past its hold (`terminating`): one unanswered again and
        again is no eviction under way."""
        self.rejected: set[PodKey] = set()
        self.short_of_pods: dict[GroupKey, GroupSpec] = {}
        self.short_of_group: set[PodKey] = set()
        """Pods turned away because their group object was not in the cache yet (it may reach this
        process's watch after kube-scheduler's pod watch): nudged once it is."""
        self.short_of_cache: dict[PodKey, float] = {}
        """Pods whose bind was refused because the cache did not hold them yet (kube-scheduler's watch
        ran ahead of this process's, after a watch cut say) -> when: nudged once the cache has them,
        forgotten after CACHE_WAIT_S (deleted before this process ever saw them)."""
        """Gangs whose members were turned away because too few pods existed: once the quorum exists
        they are nudged (kube-scheduler learns nothing from another pod's arrival)."""
        """Pods whose last filter passed no node: they sit in kube-scheduler's backoff or
        unschedulable queue, so they are the ones worth nudging."""
        self._answers: list[Answer] = []
        self._completed: set[GroupKey] = set()  # barriers the watch completed: see completed()
        self.preemptions: dict[GroupKey, Preemption] = {}
        """gang -> its preemption in progress: one at a time, never repeated while it runs."""
        self._given_up: list[Preemption] = []  # ended on a watch event, told at the next expiry pass
        self._victim_of: dict[PodKey, GroupKey] = {}
        self.gen = 0
        """Bumps when a preemption starts or ends or a no-fit is remembered: what the queue book reads
        of the ledger (victims leaving, gangs stuck) may have changed without a store change."""
        self._grouping_seen = store.grouping_gen  # the grouping the plans' members were last checked at
        self._topology_seen = store.topology_gen  # the nodes' domains the plans were last checked at
        self._node_terms_seen = store.node_terms_gen  # the nodes' labels and taints, likewise
        store.add_listener(self._on_change)
        store.add_listed_listener(self._on_listed)

    # ================================================================= reads
    # Other modules read the ledger through these, never through its collections: what they return
    # is a copy (or a value), so no reader can change a plan, a hold or a preemption behind it.
    def entry(self, key: GroupKey) -> GangEntry | None:
        return self.gangs.get(key)

    def entries(self) -> list[tuple[GroupKey, GangEntry]]:
        """Every gang the ledger knows, with its entry (a snapshot of the list)."""
        return list(self.gangs.items())

    def gang_keys(self) -> list[GroupKey]:
        return list(self.gangs)

    def assumed_node(self, pod: PodKey) -> str | None:
        """The node the API confirmed `pod` bound to, the watch not having shown it yet."""
        return self.assumed.get(pod)

    def is_assumed(self, pod: PodKey) -> bool:
        return pod in self.assumed

    def binding_alone(self, pod: PodKey) -> bool:
        """Whether `pod` (no gang's plan) has its own bind in flight, holding its room."""
        return pod in self.binding

    def binding_pods(self) -> list[PodKey]:
        return sorted(self.binding)

    def was_rejected(self, pod: PodKey) -> bool:
        return pod in self.rejected

    def awaiting_arrivals(self) -> bool:
        """Whether pods were turned away waiting for their quorum, their group object or the cache."""
        return bool(self.short_of_pods or self.short_of_group or self.short_of_cache)

    def short_of_cache_since(self) -> list[tuple[PodKey, float]]:
        return sorted(self.short_of_cache.items())

    def short_of_group_pods(self) -> list[PodKey]:
        return sorted(self.short_of_group)

    def unfit_gangs(self) -> list[tuple[GroupKey, GroupSpec]]:
        """Gangs without a plan whose definition was last found to fit nowhere, with that definition."""
        return sorted(
            (e.key, e.no_fit_spec) for e in self.gangs.values() if e.no_fit_spec is not None and not e.plan
        )

    def forget_no_fit(self, key: GroupKey) -> None:
        e = self.gangs.get(key)
        if e is not None:
            e.no_fit, e.no_fit_spec = None, None
            self.gen += 1

    def short_of_pods_gangs(self) -> list[tuple[GroupKey, GroupSpec]]:
        return sorted(self.short_of_pods.items())

    def preemptions_now(self) -> list[tuple[GroupKey, Preemption]]:
        """The preemptions in progress, by preemptor gang (a snapshot of the list)."""
        return sorted(self.preemptions.items())

    def gang_of(self, pod: PodKey) -> GroupKey | None:
        return self._pod_gang.get(pod)

    def planned(self, pod: PodKey) -> PlannedPod | None:
        key = self._pod_gang.get(pod)
        return None if key is None else self.gangs[key].plan.get(pod)

    def planned_node(self, pod: PodKey, uid: str) -> str | None:
        """The node the plan holds for this very pod: a pod deleted and recreated under its name
        (another uid) must not inherit its predecessor's place."""
        p = self.planned(pod)
        if p is None or (uid and p.uid and p.uid != uid):
            return None
        return p.node

    def is_releasing(self, pod: PodKey) -> bool:
        key = self._pod_gang.get(pod)
        return key is not None and pod in self.gangs[key].releasing

    def being_bound(self, pod: PodKey) -> bool:
        """Whether `pod` is bound by this service or on its way there though the cache shows no node:
        its binding confirmed, part of a release in flight, or its own bind in flight."""
        return pod in self.assumed or pod in self.binding or self.is_releasing(pod)

    def eviction_under_way(self, pod: PodKey, uid: str) -> bool:
        """Whether the API server accepted the eviction of `pod` (of `uid`) and the watch has not
        shown it going yet (`_evicted`)."""
        seen = self._evicted.get(pod)
        return seen is not None and seen[0] == uid

    def eviction_accepted(self, pod: PodKey, uid: str) -> bool:
        """Whether the API server accepted the eviction of `pod` (of `uid`) and the watch has not
        shown it going yet: it is never asked again, by any feature."""
        seen = self._evicted.get(pod)
        return seen is not None and seen[0] == uid and seen[2]

    def evictions_under_way(self) -> list[PodKey]:
        """The pods of `eviction_under_way`."""
        return list(self._evicted)

    def on_their_way(self, key: GroupKey) -> list[PodKey]:
        """Pods whose binding is on its way though the cache shows no node: the gang's release in
        flight, and every single bind in flight or confirmed (of any gang: the caller sorts them)."""
        e = self.gangs.get(key)
        return [*(e.releasing if e is not None else ()), *self.binding, *self.assumed]

    def releasing_any(self, key: GroupKey) -> bool:
        """Whether some of the gang's release binds are still in flight."""
        e = self.gangs.get(key)
        return e is not None and bool(e.releasing)

    def backoff_left(self, key: GroupKey) -> float:
        e = self.gangs.get(key)
        if e is None or e.plan:
            return 0.0
        return max(0.0, e.backoff_until - self.clock())

    def bound_counts(self, group: GroupSpec) -> dict[str | None, int]:
        """Bound members per leaf, counted in the cluster (and the API's confirmed binds); members
        that ran to completion count as bound (`ClusterStore.finished_counts`)."""
        counts = self.store.finished_counts(group)
        for rec in self.store.group_members(group.key):
            if (rec.node_name or rec.key in self.assumed) and rec.live:
                leaf = self.store.membership(rec).subgroup
                counts[leaf] = counts.get(leaf, 0) + 1
        return counts

    @staticmethod
    def quorum_bound(group: GroupSpec, bound: dict[str | None, int]) -> bool:
        return any(bound.values()) and group.ready_leaves(bound) is not None

    def placed_as_it_comes(self, group: GroupSpec, leaf: str | None, bound: dict[str | None, int]) -> bool:
        """Whether a member of `leaf` is beyond quorum: the gang's quorum and its own leaf's are
        bound, so it may be placed and bound alone. Filter and bind apply this one rule."""
        return self.quorum_bound(group, bound) and bound.get(leaf, 0) >= group.leaf_quorum(leaf)

    def phase(self, key: GroupKey, spec: GroupSpec | None) -> Phase:
        e = self.gangs.get(key)
        if spec is not None and self.quorum_bound(spec, self.bound_counts(spec)):
            return Phase.BOUND
        if e is not None and (e.arrived or e.releasing):
            return Phase.BINDING
        if e is not None and e.plan:
            return Phase.PLANNED
        if self.backoff_left(key) > 0:
            return Phase.BACKOFF
        return Phase.PENDING

    def next_deadline(self) -> float | None:
        """The next barrier deadline or backoff end, for the server's ticker."""
        times = [t for e in self.gangs.values() for t in (e.answer_at, e.hold_until) if t is not None]
        times += [e.backoff_until for e in self.gangs.values() if not e.backoff_told]
        # a hold past its deadline with a victim terminating ends on a pod event, not at a time
        times += [p.hold_until for p in self.preemptions.values() if not self._held_on(p) or p.claimed]
        return min(times, default=None)

    def backoffs_over(self) -> list[GroupKey]:
        """Gangs whose backoff just ended, once each: their members, turned away meanwhile, sit in
        kube-scheduler's unschedulable queue and are worth bringing back now."""
        now = self.clock()
        out = []
        for e in self.gangs.values():
            if not e.backoff_told and now >= e.backoff_until:
                e.backoff_told = True
                out.append(e.key)
        return out

    # ================================================================= memos
    def note_answer(self, pod: PodKey, *, turned_away: bool) -> None:
        """What the pod was last answered: a filter passing no node, or a bind error, sends it to
        kube-scheduler's backoff or unschedulable queue."""
        if turned_away:
            self.rejected.add(pod)
        else:
            self.rejected.discard(pod)

    def await_pods(self, spec: GroupSpec) -> None:
        self.short_of_pods[spec.key] = spec

    def await_group(self, pod: PodKey) -> None:
        self.short_of_group.add(pod)

    def await_cache(self, pod: PodKey) -> None:
        self.short_of_cache[pod] = self.clock()

    def cache_arrived(self, pod: PodKey) -> None:
        self.short_of_cache.pop(pod, None)

    def group_arrived(self, pod: PodKey) -> None:
        self.short_of_group.discard(pod)

    def pods_arrived(self, key: GroupKey) -> None:
        self.short_of_pods.pop(key, None)

    def set_reason(self, key: GroupKey, reason: str) -> None:
        self._entry(key).last_reason = reason

    def cached_no_fit(self, key: GroupKey, signature: tuple[int, ...]) -> str | None:
        e = self.gangs.get(key)
        if e is None or e.no_fit is None or e.no_fit[0] != signature:
            return None
        return e.no_fit[1]

    def remember_no_fit(
        self, key: GroupKey, signature: tuple[int, ...], reason: str, spec: GroupSpec | None = None
    ) -> None:
        """The gang, as `spec` defines it, fits nowhere, preempts and reclaims nothing, as the cluster
        is at `signature`."""
        e = self._entry(key)
        e.no_fit = (signature, reason)
        e.no_fit_spec = spec
        e.last_reason = reason
        self.gen += 1

    def forget_refusals(self, key: GroupKey) -> None:
        e = self.gangs.get(key)
        if e is not None:
            e.excluded.clear()

    def excluded(self, key: GroupKey) -> dict[PodKey, set[str]]:
        e = self.gangs.get(key)
        return e.excluded if e is not None else {}

    # ================================================================= verbs
    def set_holds(
        self, held: list[Held], none: dict[GroupKey, str], starting: dict[GroupKey, frozenset[GroupKey]]
    ) -> None:
        """The holding pass's holds, whole (holding.py); no gang with a plan holds."""
        self.holds.replace([h for h in held if not self._planned_gang(h.gang)], none, starting)

    def _planned_gang(self, key: GroupKey) -> bool:
        e = self.gangs.get(key)
        return e is not None and bool(e.plan)

    def plan(
        self,
        group: GroupSpec,
        assignment: dict[PodKey, tuple[PlannedPod, dict[str, int]]],
        *,
        domain: str,
    ) -> None:
        """Record a fresh plan and hold its capacity: all of it, or (on any failure) none of it."""
        e = self._entry(group.key)
        if e.releasing:
            raise RuntimeError(f"gang {group.key}: cannot plan while its release binds are in flight")
        for pk in assignment:
            other = self._pod_gang.get(pk)
            if other is not None and other != group.key:
                raise RuntimeError(f"{pk} is already planned in gang {other}")
        missing = [p.node for p, _ in assignment.values() if p.node not in self.store.node_rows]
        if missing:
            raise RuntimeError(f"gang {group.key}: planned node(s) {missing[:3]} are not in the cache")
        stale = self._drop_plan(e)
        if stale:
            self._answers.append(Answer(stale, f"gang {group.key}: replanned; retrying"))
        held: list[PodKey] = []
        try:
            for pk, (planned, requests) in assignment.items():
                self.store.hold(pk, planned.node, requests)
                held.append(pk)
        except BaseException:
            for pk in held:
                self.store.unhold(pk)
            raise
        e.spec = group
        e.plan = {pk: p for pk, (p, _) in assignment.items()}
        e.own_cycle = (
            frozenset(pk for pk in assignment if self._cycle_needed(pk))
            if self.release_on_first_bind
            else frozenset()
        )
        self.holds.drop(group.key)  # it starts: what was held for it is its plan's now
        e.domain = domain
        e.no_fit, e.no_fit_spec = None, None  # planned: it fits (nothing waits on its old no-fit)
        # a plan nobody brings to bind must not hold capacity forever
        e.answer_at = e.hold_until = None
        self._hold_awaiting_arrivals(e)
        e.reached = set()
        e.last_reason = f"planned {len(assignment)} pods" + (f" in {domain}" if domain else "")
        for pk in assignment:
            self._pod_gang[pk] = group.key

    def _vouched_for(self, e: GangEntry) -> bool:
        """Whether every planned member not at bind may be bound without its own cycle, as things
        stand at the release. One being deleted (a finalizer keeps it) would be refused by the API and
        the rest bound without it: kube-scheduler never cycles such a pod, so the barrier waits for it
        and the plan expires, as without the early release. One a bound pod's anti-affinity selects
        (bound before the plan or since), or whose planned node its selector, affinity or tolerations
        no longer admit (the node's labels or taints changed since the plan), waits for its own
        cycle."""
        for pk, planned in e.plan.items():
            if pk not in e.arrived:
                rec = self.store.pods.get(pk)
                if rec is None or not is_live(rec.obj):
                    return False
                if (self._repelling is not None and self._repelling.against(rec.obj)) or not self._admits(
                    rec, planned.node
                ):
                    e.own_cycle |= {pk}
                    return False
        return True

    def _admits(self, rec: PodRecord, node: str) -> bool:
        row = self.store.node_rows.get(node)
        admits = self.store.eligible_mask_of(rec)
        return row is not None and (admits is None or bool(admits[row]))

    def _cycle_needed(self, pk: PodKey) -> bool:
        """What the pod itself asks that only its own cycle vouches for (the cluster's anti-affinity
        against it is read at the release, `_vouched_for`, as it stands then)."""
        rec = self.store.pods.get(pk)
        return rec is None or bool(self.store.cycle_needed(rec))

    def _hold_awaiting_arrivals(self, e: GangEntry) -> None:
        self._hold_plan(e, self.hold_s, f"no new planned pod arrived within {self.hold_s:g}s")

    def _hold_plan(self, e: GangEntry, for_s: float, why: str) -> None:
        """The plan stands at least `for_s` from now (a later deadline stands); `why` says what the
        deadline waited for, should the plan end at it."""
        until_s = self.clock() + for_s
        if e.hold_until is None or until_s > e.hold_until:
            e.hold_until, e.hold_why = until_s, why

    def move(self, key: GroupKey, pod: PodKey, node: str, requests: dict[str, int]) -> None:
        """Re-place one planned member (kube-scheduler would not offer its node) onto `node`."""
        e = self.gangs[key]
        old = e.plan[pod]
        if pod in e.releasing:
            raise RuntimeError(f"{pod} is being bound; it cannot move")
        self.store.hold(pod, node, requests)  # replaces the old hold in one step
        e.plan[pod] = PlannedPod(node=node, uid=old.uid, leaf=old.leaf)
        e.arrived.pop(pod, None)
        e.excluded.setdefault(pod, set()).add(old.node)

    def arrive(self, pod: PodKey, node: str, uid: str) -> tuple[Arrival, GangEntry | None, list[Release]]:
        """A planned member reached bind on `node`."""
        key = self._pod_gang.get(pod)
        if key is None:
            return Arrival.NOT_PLANNED, None, []
        e = self.gangs[key]
        p = e.plan[pod]
        if uid and p.uid and uid != p.uid:
            return Arrival.NOT_PLANNED, e, []
        if p.node != node:
            return Arrival.WRONG_NODE, e, []
        if pod in e.releasing:
            return Arrival.IN_FLIGHT, e, []
        now = self.clock()
        if e.answer_at is None:
            e.answer_at = now + self.wait_s
        if pod not in e.reached and e.hold_until is not None and now < e.hold_until:
            # a member new to the plan's barrier is progress: the plan stands `hold_s` past it. A
            # gang of thousands reaches bind one kube-scheduler cycle a member (16-35 ms each at
            # 5,000 nodes: minutes for 4096), far past one `hold_s`; a plan no new member reaches
            # for `hold_s` still ends then, and a member moved, refused or answered and back again
            # keeps nothing alive
            self._hold_awaiting_arrivals(e)
        e.reached.add(pod)
        e.arrived[pod] = uid or p.uid
        complete = e.barrier_complete()
        if not (complete or (self.release_on_first_bind and e.releasable_early() and self._vouched_for(e))):
            return Arrival.WAIT, e, []
        self._completed.discard(key)
        if not complete:
            log.info(
                "gang %s: released at its first member's bind (%d of %d planned members reached bind)",
                key,
                len(e.arrived),
                len(e.plan),
                extra={"gang": key, "members": len(e.plan)},
            )
        return Arrival.RELEASE, e, self._release(e)

    def completed(self) -> list[GroupKey]:
        """Gangs whose barrier the watch completed: every member still planned has reached bind and
        the last missing one was seen bound on its planned node (its POST cut off, say, and landed),
        so no further arrival will come to release the rest. The caller checks what bind would
        (the fence, the queue's limit) and releases each with `release`."""
        out = sorted(k for k in self._completed if self._completable(k))
        self._completed.clear()
        return out

    def release(self, key: GroupKey) -> list[Release]:
        """Begin binding a gang that `completed` named; [] when it is no longer complete."""
        if not self._completable(key):
            return []
        return self._release(self.gangs[key])

    def _completable(self, key: GroupKey) -> bool:
        e = self.gangs.get(key)
        return e is not None and e.barrier_complete() and not (e.releasing & set(e.plan))

    def _release(self, e: GangEntry) -> list[Release]:
        # members whose calls were answered meanwhile are bound too: this service is their binder,
        # and kube-scheduler drops a pod from its queue once the watch shows it bound
        # released at the first member's bind, those not arrived yet are bound as planned (their uid)
        members = [
            Release(pk, e.plan[pk].node, e.arrived.get(pk) or e.plan[pk].uid)
            for pk in sorted(e.plan)
            if pk not in e.releasing
        ]
        e.releasing.update(r.pod for r in members)
        e.answer_at = e.hold_until = None  # the binds answer for themselves now
        return members

    def settle(self, key: GroupKey, results: dict[PodKey, str]) -> Settled:
        """The release's binds are done ("" = bound, else the API's error).

        Bound members leave the plan; their hold stays until the watch shows them bound. A member
        the API refused stays planned with its hold, so the gang completes inside its domain when
        kube-scheduler retries it; if it does not arrive in time the barrier expires as usual.
        """
        e = self._entry(key)
        spec = e.spec
        bound, failed = [], []
        for pk, error in sorted(results.items()):
            e.releasing.discard(pk)
            e.arrived.pop(pk, None)
            rec = self.store.pods.get(pk)
            if error and not (rec is not None and rec.node_name):
                failed.append(pk)
                continue
            # bound; or the API bound it and the reply was lost (the connection cut as the API server
            # died): the watch already shows it bound, and kube-scheduler will never bring it back to
            # the barrier, so left planned it would hold the rest of the gang there until the hold ends
            bound.append(pk)
            planned = self._unplan(e, pk)
            if rec is not None and rec.node_name:
                self.store.unhold(pk)  # the watch was first: the pod is charged already
            elif rec is not None and planned is not None:
                self.assumed[pk] = planned.node
            else:
                self.store.unhold(pk)  # gone meanwhile
        gone = [pk for pk in failed if self._gone(pk, e.plan.get(pk))]
        # a member regrouped while its binding was in flight (a pod event then changes no plan in
        # flight): retried for this plan, it would be bound for a gang it is no longer in
        left = [pk for pk in failed if pk in e.plan and self._left(e, pk)]
        replanned = ""
        if gone:
            replanned = f"{gone[0]} is gone after its binding failed"
            self._discard(e, replanned)
        elif left:
            where = self._place_now(self.store.pods[left[0]].obj)[0] or "in no gang"
            replanned = f"member {left[0]} left the gang's plan while it was bound (it is now {where})"
            self._discard(e, replanned)
        elif failed:
            # the refused members must come back within the hold
            self._hold_plan(
                e, self.wait_s, f"the members the API refused did not come back within {self.wait_s:g}s"
            )
            e.last_reason = (
                f"{len(failed)} member(s) not bound by the API; retrying them in {e.domain or 'place'}"
            )
        quorum = spec is not None and self.quorum_bound(spec, self.bound_counts(spec))
        waited_s = None
        if quorum and e.since is not None:
            waited_s, e.since = self.clock() - e.since, None
        if not e.plan:
            e.excluded.clear()
            e.no_fit = None
            if quorum:
                e.failures = 0
                e.last_reason = "quorum bound"
        return Settled(tuple(bound), tuple(failed), quorum, e.domain, spec, waited_s, replanned)

    def discard(self, key: GroupKey, reason: str) -> None:
        """Drop a plan that can no longer be carried out, without backoff; waiting binds fail now."""
        e = self.gangs.get(key)
        if e is not None:
            self._discard(e, reason)

    def exclude_and_discard(self, key: GroupKey, pod: PodKey, node: str, reason: str) -> None:
        e = self.gangs.get(key)
        if e is None:
            return
        self._discard(e, reason)
        e.excluded.setdefault(pod, set()).add(node)

    def expire(self) -> list[Expiry]:
        """Answer the waiting binds of gangs whose wait ended (their plan stands, and those members
        still count as arrived), and give up the plans whose hold ended: the capacity goes back and
        the gang backs off, doubling."""
        now = self.clock()
        out = []
        if self.unconfirmed or self._evicted:
            self._expire_unconfirmed(now)
        for e in list(self.gangs.values()):
            if e.releasing:
                continue
            arrived = tuple(e.waiting())
            total = len(e.plan)
            if e.hold_until is not None and now >= e.hold_until:
                if arrived:
                    msg = (
                        f"gang {e.key}: quorum did not reach bind: {e.hold_why} "
                        f"({len(arrived)} of {total} planned pods arrived); reservation released"
                    )
                else:
                    msg = f"gang {e.key}: no planned member reached bind ({e.hold_why}); reservation released"
                spec = e.spec
                self._drop_plan(e)
                e.excluded.clear()
                e.failures += 1
                delay = backoff_delay_s(
                    e.failures, initial_s=self.backoff_initial_s, max_s=self.backoff_max_s
                )
                e.backoff_until = now + delay
                e.backoff_told = False
                # the waiting calls are answered with the gang's reason itself: what kube-scheduler then
                # writes on them is what their siblings are told
                e.last_reason = f"{msg}; backing off {delay:g}s"
                out.append(Expiry(e.key, spec, arrived, e.last_reason, dropped=True, domain=e.domain))
            elif e.answer_at is not None and now >= e.answer_at:
                e.answer_at = None
                missing = sorted(set(e.plan) - set(e.arrived))
                shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
                msg = (
                    f"gang {e.key}: {len(arrived)} of {total} planned pods reached bind within "
                    f"{self.wait_s:g}s (waiting for {shown}); their places stay held, retry"
                )
                e.last_reason = msg
                out.append(Expiry(e.key, e.spec, arrived, msg, dropped=False, domain=e.domain))
        return out

    # ----------------------------------------------------------------- preemption
    def preemption(self, gang: GroupKey) -> Preemption | None:
        return self.preemptions.get(gang)

    def victim_of(self, pod: PodKey) -> GroupKey | None:
        """The preemptor a pod is being evicted for, if any: no other preemptor counts on it."""
        return self._victim_of.get(pod)

    def victims_in_flight(self) -> list[PodKey]:
        """Every pod being evicted for a preemption (or reclaim) under way, and every pod whose
        accepted eviction the watch has not shown (`_evicted`, its preemption ended, say): leaving
        its queue, so no reclaim takes its queue's room a second time."""
        return [*self._victim_of, *(pk for pk in self._evicted if pk not in self._victim_of)]

    def incoming(self) -> list[PodKey]:
        """The members each preemption (or reclaim) under way makes room for: arriving in their queue."""
        return [pk for p in self.preemptions.values() for pk in p.where]

    def start_preemption(self, p: Preemption) -> None:
        """Record a preemption: from now on each victim's capacity is held for the gang as it goes."""
        if p.gang in self.preemptions:
            raise RuntimeError(f"gang {p.gang} is already preempting in {self.preemptions[p.gang].domain}")
        self.preemptions[p.gang] = p
        self.gen += 1
        for pk in p.victims:
            self._victim_of[pk] = p.gang
        self._entry(p.gang).last_reason = p.reason
        for pk, v in p.victims.items():
            rec = self.store.pods.get(pk)
            if rec is None or (v.uid and rec.uid != v.uid) or is_terminal(rec.obj):
                # gone already (the cache saw it before the plan was carried out, or a restarted
                # preemption): the hold keeps its deadline
                self._hold_freed(p, v, rearm=False)
        # the claim last: it takes only what is free beyond the victims' room, which is held first
        # (claimed before, a gone victim's room was claimed and then held again: a node over-held,
        # interleavings seed 1282, a preemption re-armed after its victims went)
        self._claim_free_room(p)

    def victims_gone(self, gang: GroupKey) -> bool:
        p = self.preemptions.get(gang)
        return p is not None and len(p.held) == len(p.victims)

    def end_preemption(self, gang: GroupKey) -> Preemption | None:
        """Give the held room back (the gang is about to plan into it, or gives up) and forget it."""
        p = self.preemptions.pop(gang, None)
        if p is None:
            return None
        self.gen += 1
        for pk in p.victims:
            if self._victim_of.get(pk) == gang:
                del self._victim_of[pk]
            self.store.unhold(Preemption.hold_key(gang, pk))
        self._release_claims(p)
        return p

    def _release_claims(self, p: Preemption) -> None:
        for node in p.claimed:
            self.store.unhold(Preemption.claim_key(p.gang, node))
        if p.claimed:
            self.gen += 1
        p.claimed = {}

    def _claim_free_room(self, p: Preemption) -> None:
        """Hold, on each node the plan places members on, what they need there beyond what the victims
        on it give back, as far as it is free now (the plan counted on it)."""
        need: dict[str, dict[str, int]] = {}
        for pk, node in p.where.items():
            rec = self.store.pods.get(pk)
            if rec is not None:
                acc = need.setdefault(node, {})
                for r, n in rec.requests.items():
                    acc[r] = acc.get(r, 0) + n
        for v in p.victims.values():
            if v.node in need:
                acc = need[v.node]
                for r, n in v.requests.items():
                    if r in acc:
                        acc[r] -= n
        claimed: dict[str, dict[str, int]] = {}
        for node, acc in sorted(need.items()):
            row = self.store.node_rows.get(node)
            if row is None:
                continue
            room = self._free_part(row, acc)
            if room:
                self.store.hold(Preemption.claim_key(p.gang, node), node, room)
                claimed[node] = room
        p.claimed = claimed

    def _free_part(self, row: int, amounts: dict[str, int]) -> dict[str, int]:
        """As much of each amount as node `row` has free now (the resources it has none of left out)."""
        free = self.store.arrays.free[row]
        part = {}
        for r, n in amounts.items():
            col = self.store.resources.find(r)
            take = min(n, int(free[col])) if col is not None else 0
            if take > 0:
                part[r] = take
        return part

    def expire_preemptions(self) -> list[Preemption]:
        """Preemptions whose hold ended before the gang was planned: the room goes back to everyone.
        Those given up since the last call (`given_up` says why) come first: each is told once."""
        now = self.clock()
        out, self._given_up = self._given_up, []
        for gang, p in list(self.preemptions.items()):
            if now >= p.hold_until and self._held_on(p):
                # held on for a victim still terminating (a stuck finalizer, a node gone NotReady): its
                # room stays the preemptor's, the free room claimed beside it is everyone's again
                self._release_claims(p)
            elif now >= p.hold_until:
                self.end_preemption(gang)
                gone = len(p.held)
                e = self._entry(gang)
                e.last_reason = (
                    f"preemption in {p.domain or 'the cluster'} expired after holding it "
                    f"({gone} of {len(p.victims)} victims gone); the room is free to all again"
                )
                e.no_fit = None
                out.append(p)
        return out

    def terminating(self, p: Preemption) -> list[PodKey]:
        """The victims of `p` still terminating: evicted (a deletion under way, or an eviction the API
        server accepted that the watch has not shown yet: only asked, or unanswered, is not), not
        gone yet."""
        out = []
        for pk, v in p.victims.items():
            if pk in p.held:
                continue
            rec = self.store.pods.get(pk)
            if rec is not None and (not v.uid or rec.uid == v.uid) and not is_terminal(rec.obj):
                if (rec.obj.get("metadata") or {}).get("deletionTimestamp") or self.eviction_accepted(
                    pk, rec.uid
                ):
                    out.append(pk)
        return out

    def _held_on(self, p: Preemption) -> bool:
        """Past its deadline, but held on: a victim is still terminating on a node the preemptor may
        use (a finalizer slow to clear), for a preemptor still there (one whose members are all gone
        needs no room). A victim stuck on a node gone NotReady, cordoned or removed holds nothing
        on: its room is of no use to the preemptor, which looks again (elsewhere, if it fits there)."""
        if self.clock() < p.hold_until:
            return False
        if not any(self.store.node_usable(p.victims[pk].node) for pk in self.terminating(p)):
            return False
        return any(is_live(rec.obj) for rec in self.store.group_members(p.gang))

    def preemption_hold_keys(self) -> set[PodKey]:
        held = {Preemption.hold_key(g, pk) for g, p in self.preemptions.items() for pk in p.held}
        return held | {Preemption.claim_key(g, n) for g, p in self.preemptions.items() for n in p.claimed}

    def _hold_freed(self, p: Preemption, v: Victim, *, rearm: bool = True) -> None:
        if v.pod in p.held:
            return
        p.held.add(v.pod)
        if rearm:  # seen going now: the preemptor gets its time to plan into the room from here
            p.hold_until = max(p.hold_until, self.clock() + p.hold_s)
        if v.node and v.node in self.store.node_rows:
            self.store.hold(Preemption.hold_key(p.gang, v.pod), v.node, v.requests)

    # ----------------------------------------------------------------- single pods in bind
    def hold(self, pod: PodKey, node: str, requests: dict[str, int]) -> None:
        """Hold a pod's capacity while its own (non-gang) bind is in flight."""
        self.store.hold(pod, node, requests)  # replaces an unconfirmed binding's: one hold a pod
        self.unconfirmed.pop(pod, None)
        self.binding.add(pod)

    def bind_done(self, pod: PodKey, node: str, error: str, *, unknown: bool = False) -> None:
        """A single pod's API binding finished: keep its hold until the watch shows it, or give it
        back. `unknown`: no answer came, so it may have landed; the hold stays a while (see
        `unconfirmed`)."""
        self.binding.discard(pod)
        rec = self.store.pods.get(pod)
        if error and unknown and rec is not None and not rec.node_name and pod in self.store.reservations:
            self.unconfirmed[pod] = self.clock() + UNCONFIRMED_S
        elif error or rec is None or rec.node_name:
            self.store.unhold(pod)
        else:
            self.assumed[pod] = node

    def forget_evicted(self, pod: PodKey, uid: str) -> None:
        """The eviction of `pod` (of `uid`) asked did not happen (refused, failed): it is not going."""
        if self.eviction_under_way(pod, uid) and not self.eviction_accepted(pod, uid):
            del self._evicted[pod]  # an accepted one stands, whatever a later ask met
            self.gen += 1

    def note_evicted(
        self, pod: PodKey, uid: str, *, for_s: float = EVICTED_UNSEEN_S, accepted: bool = False
    ) -> None:
        """The eviction of `pod` (of `uid`) is asked by a preemption, or the API server accepted it,
        or its answer was lost (`for_s`: UNCONFIRMED_S, as long as a request taken may still land):
        see `_evicted`."""
        rec = self.store.pods.get(pod)
        if rec is not None and rec.uid == uid and is_live(rec.obj):
            until, was = self.clock() + for_s, self._evicted.get(pod)
            if was is not None and was[0] == uid and was[2]:  # accepted: never shortened nor undone
                until, accepted = max(until, was[1]), True
            self._evicted[pod] = (uid, until, accepted)
            self.gen += 1

    def _expire_unconfirmed(self, now: float) -> None:
        for pod, (_, until, _) in list(self._evicted.items()):
            if now >= until:
                del self._evicted[pod]
                self.gen += 1
        for pod, until in list(self.unconfirmed.items()):
            if now >= until:  # it never landed: nothing it asked can land now
                del self.unconfirmed[pod]
                if self.planned(pod) is None and not self.being_bound(pod):
                    self.store.unhold(pod)  # else its hold is a plan's or a bind's since: theirs

    def take_answers(self) -> list[Answer]:
        out, self._answers = self._answers, []
        return out

    # ================================================================= internals
    def _entry(self, key: GroupKey) -> GangEntry:
        e = self.gangs.get(key)
        if e is None:
            e = self.gangs[key] = GangEntry(key=key, since=self.clock())
        return e

    def _gone(self, pod: PodKey, planned: PlannedPod | None) -> bool:
        rec = self.store.pods.get(pod)
        return (
            rec is None
            or not is_live(rec.obj)
            or (planned is not None and bool(planned.uid) and rec.uid != planned.uid)
        )

    def _unplan(self, e: GangEntry, pk: PodKey) -> PlannedPod | None:
        """Take one member out of the plan (its hold is the caller's to keep or give back); a plan
        left empty forgets its definition and deadlines."""
        planned = e.plan.pop(pk, None)
        e.arrived.pop(pk, None)
        self._pod_gang.pop(pk, None)
        if not e.plan:
            e.spec = None
            e.answer_at = e.hold_until = None
        return planned

    def _drop_plan(self, e: GangEntry) -> tuple[PodKey, ...]:
        """Forget the plan (except members whose binds are in flight) and give its capacity back;
        returns the members that were waiting at bind."""
        waiting = tuple(pk for pk in e.waiting() if pk not in e.releasing)
        for pk in [pk for pk in e.plan if pk not in e.releasing]:
            self._unplan(e, pk)
            self.store.unhold(pk)
        e.reached.clear()
        return waiting

    def _discard(self, e: GangEntry, reason: str) -> None:
        if not e.plan:
            return
        waiting = self._drop_plan(e)
        # the waiting binds are answered with the gang's reason itself (see expire)
        e.last_reason = f"{reason}; replanning"
        log.info(
            "gang %s: plan dropped, replanning",
            e.key,
            extra={"gang": e.key, "domain": e.domain, "reason": reason},
        )
        if waiting:
            self._answers.append(Answer(waiting, f"gang {e.key}: {e.last_reason}"))

    def _drop_plans_overcommitted_by(self, pk: PodKey) -> None:
        """A pod bound where a plan holds room the node no longer has: someone else's binding landed
        on it (a predecessor's release whose POSTs were still in flight when it died, a pod another
        scheduler placed)."""
        if not self.store.reservations:  # no plan holds room anywhere (a list of 150,000 bound pods)
            return
        rec = self.store.pods.get(pk)
        if rec is None or rec.bound_row < 0:
            return
        self._relieve(rec.bound_row, f"pods bound since the plan ({pk} among them)")

    def _relieve(self, row: int, cause: str) -> None:
        """A node whose room the holds on it no longer add up to (`cause`: pods bound there since, or
        its allocatable lowered). Until they add up again, in this order: the free room preemptions
        claimed there shrinks to what is left; every plan holding room there is dropped (releasing
        it would over-commit the node: its waiting binds answered, kube-scheduler retries, the gang
        replans; a release already in flight is past recall); a preemption whose victims' room there
        is short is given up."""
        if not self._over(row):
            return
        node = self.store.row_names.get(row, "?")
        # the free room a preemption claimed is the first to go: it was only ever what was free
        self._trim_claims(node, row)
        if not self._over(row):
            return
        holders = {
            self._pod_gang[held]
            for held, res in self.store.reservations.items()
            if res.row == row and held in self._pod_gang
        }
        for gang in sorted(holders):
            e = self.gangs.get(gang)
            if e is not None and e.plan and not e.releasing:
                self._discard(e, f"node {node} has less room than the plan holds: {cause}")
        if not self._over(row):
            return
        # a victim's own room, taken: the preemption counted on room that is gone; the gang looks
        # again (and evicts again only if it must). Only a hold of a resource the node is short of
        # counts: one it is not short of is no part of the over-commit
        free = self.store.arrays.free[row]
        short = {name for col, name in enumerate(self.store.resources.names) if free[col] < 0}
        for gang, p in sorted(self.preemptions.items()):
            if any(
                p.victims[v].node == node
                and Preemption.hold_key(gang, v) in self.store.reservations
                and short & {r for r, n in p.victims[v].requests.items() if n > 0}
                for v in p.held
            ):
                self.end_preemption(gang)
                p.given_up = (
                    f"preemption in {p.domain or 'the cluster'} given up: node {node} no longer has "
                    f"its victims' room: {cause}; looking again"
                )
                self._entry(gang).last_reason = p.given_up
                self._given_up.append(p)
                if not self._over(row):
                    return

    def _over(self, row: int) -> bool:
        return bool((self.store.arrays.free[row] < 0).any())

    def _trim_claims(self, node: str, row: int) -> None:
        """Each preemption's claim on `node` shrinks to what is free there once it is given back."""
        for gang, p in sorted(self.preemptions.items()):
            room = p.claimed.get(node)
            if room is None:
                continue
            key = Preemption.claim_key(gang, node)
            self.store.unhold(key)
            left = self._free_part(row, room)
            if left:
                self.store.hold(key, node, left)
                p.claimed[node] = left
            else:
                del p.claimed[node]
            self.gen += 1
            if not self._over(row):
                return

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == POD:
            self._on_pod(event, pod_key(str(meta.get("namespace", "")), str(meta.get("name", ""))), obj)
        elif kind == NODE:
            name = str(meta.get("name", ""))
            row = self.store.node_rows.get(name)
            # a heartbeat changes neither: only a relabel or a taint makes the plans be looked at
            moved = self._topology_seen != self.store.topology_gen
            relabelled = self._node_terms_seen != self.store.node_terms_gen
            self._topology_seen, self._node_terms_seen = self.store.topology_gen, self.store.node_terms_gen
            if event == "DELETED" or row is None or not bool(self.store.arrays.schedulable[row]):
                for e in list(self.gangs.values()):
                    if any(p.node == name and pk not in e.releasing for pk, p in e.plan.items()):
                        self._discard(e, f"planned node {name} was removed or cordoned")
            if event == "DELETED":
                # what preemptions hold there goes with the node: a node registered again under its
                # name is a new one, whose room those holds never took (given back, they would add it)
                for p in self.preemptions.values():
                    for pk, v in p.victims.items():
                        if v.node == name:
                            self.store.unhold(Preemption.hold_key(p.gang, pk))
                    if p.claimed.pop(name, None) is not None:
                        self.store.unhold(Preemption.claim_key(p.gang, name))
            if len(self.holds):
                # a hold there this node can no longer take (cordoned, NotReady, its allocatable
                # lowered below it, the node gone) can never be ready: it goes now, the next pass
                # chooses again. A deleted node's row is free (not yet reused): every hold is
                # looked at, few as they are
                held = self.holds.holders_on(np.array([row])) if row is not None else self.holds.all()
                for h in held:
                    if not h.hold.usable(self.store.arrays):
                        self.holds.drop(h.gang)
            if event != "DELETED" and row is not None and self.store.reservations and self._over(row):
                # its allocatable lowered under the holds (a kubelet restarted with more reserved, a
                # device plugin's GPU gone unhealthy): the plans there would over-commit it
                self._relieve(row, "its allocatable was lowered since")
            if event != "DELETED" and row is not None and (moved or relabelled):
                # a cordoned node still runs its members: where it moves, they pin the rest
                for e in list(self.gangs.values()):
                    if relabelled and e.plan:
                        self._discard_if_unadmitted(e, name)
                    if moved and e.plan:
                        self._discard_if_moved(e, name, row)
        elif kind in GROUPING_KINDS:
            self._check_plans_regrouped()
            if self.preemptions:
                self._forget_left_preemptors()  # a workload's edit may take every member out of a gang
            if event == "DELETED":
                # A PodGroup deleted before its pods: their deletions then name no group, so
                # _forget_if_empty cannot find the entry; forget every entry left with no member.
                for key in list(self.gangs):
                    self._forget_if_memberless(key)

    def _on_listed(self, _kind: object) -> None:
        """A kind found late took pods out of their gangs with no object event (`now_lists`): as for a
        group object deleted, a plan a member left goes, and an entry left with no member is forgotten."""
        self._check_plans_regrouped()
        for key in list(self.gangs):
            self._forget_if_memberless(key)

    def _check_plans_regrouped(self) -> None:
        """A plan whose group's definition changed, or one of whose members left the gang, goes. A
        status write leaves every gang as it was; only a grouping change can move a member."""
        moved = self._grouping_seen != self.store.grouping_gen
        self._grouping_seen = self.store.grouping_gen
        for e in list(self.gangs.values()):
            if not e.plan or e.spec is None:
                continue
            fresh = self._current_spec(e.plan)
            if fresh is not None and fresh != e.spec:
                self._discard(e, "the group's definition changed")
            elif moved:
                left = next((pk for pk in sorted(e.plan) if self._left(e, pk)), None)
                if left is not None:
                    self._discard(e, f"member {left} left the gang's plan (its group changed)")

    def _on_pod(self, event: str, pk: PodKey, obj: dict[str, Any]) -> None:
        gone = event == "DELETED" or is_terminal(obj)
        if pk in self._evicted and (
            gone
            or not is_live(obj)
            or str((obj.get("metadata") or {}).get("uid", "")) != self._evicted[pk][0]
        ):
            del self._evicted[pk]  # the watch shows it going (or gone): the store counts it from here
        node = (obj.get("spec") or {}).get("nodeName")
        preemptor = self._victim_of.get(pk)
        if preemptor is not None:
            p = self.preemptions[preemptor]
            v = p.victims[pk]
            uid = str((obj.get("metadata") or {}).get("uid", ""))
            if gone or (v.uid and uid and uid != v.uid):
                # the same instant the store gave its capacity back: nobody else can take it
                self._hold_freed(p, v)
        key = self._pod_gang.get(pk)
        e = self.gangs.get(key) if key is not None else None
        if gone or node:
            # bound: its own charge replaces the hold; gone: there is nothing left to hold for
            self.assumed.pop(pk, None)
            self.unconfirmed.pop(pk, None)
            self.store.unhold(pk)
        if node and not gone:
            self._drop_plans_overcommitted_by(pk)
        if gone:
            self.rejected.discard(pk)
            self.binding.discard(pk)
            self.short_of_group.discard(pk)
            self.short_of_cache.pop(pk, None)
        if e is None and node and not gone:
            # in no plan: a member bound by another binder may still pin its gang's domain (a plain
            # pod, most of a cluster and all of an initial list, has no gang to derive)
            if not self.gangs or self.store.is_plain(obj):
                return
            gang = self._place_now(obj)[0]
            other = self.gangs.get(gang) if gang is not None else None
            if other is not None:
                self._discard_if_split_by(other, pk, obj, node)
            return
        if e is None or pk in e.releasing:
            if gone:
                self._forget_if_empty(obj)
            elif self.preemptions and not self.store.is_plain(obj):
                self._forget_left_preemptors()
            return
        planned = e.plan.get(pk)
        if planned is None:
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if gone or (planned.uid and uid and uid != planned.uid):
            self._discard(e, f"member {pk} was deleted")
        elif (now_in := self._place_now(obj)) != (e.key, planned.leaf):
            # its gang (a pod-group-name rewritten, say) or its subgroup changed: the plan counted it
            # toward a quorum it no longer makes up, and binding it with the rest would leave both
            # partial
            where = f"subgroup {now_in[1]}" if now_in[0] == e.key else (now_in[0] or "in no gang")
            self._discard(e, f"member {pk} left the gang's plan (it is now {where})")
        elif node == planned.node:
            # bound by a bind this process no longer waits for (or by someone else, there): it counts
            # as bound where it is; the rest of the plan stands, and may now be complete
            self._unplan(e, pk)
            if e.barrier_complete():
                self._completed.add(e.key)
        elif node:
            # bound elsewhere by another binder (a killed predecessor's release landing late): the
            # rest of the plan may lie in another domain than this member now does. The replan
            # counts it as bound and keeps the others with it
            self._discard(e, f"member {pk} was bound to {node}, not its planned {planned.node}")

    def _apart_test(
        self, e: GangEntry, leaf: str | None, row: int
    ) -> Callable[[str | None, int], bool] | None:
        """Whether a member of `leaf` on `row` and another (its leaf, its row) break a required
        constraint both sit under: the constraints of the subgroups they share, read from the other's
        ancestry. None: `leaf` sits under no required constraint, so nothing is apart from it. Raises
        topology.TopologyError when the group's definition no longer resolves."""
        spec = e.spec
        assert spec is not None
        arrays = self.store.arrays
        chain = [(name, arrays.level(k)) for name, k in topology.required_chain(spec, leaf, self.store)]
        if not chain:
            return None
        domains = arrays.domains  # read once every level the chain names is registered
        shared: dict[str | None, list[int]] = {}  # other member's leaf -> levels it shares with `leaf`

        def apart(other_leaf: str | None, other_row: int) -> bool:
            if other_row < 0:
                return False
            if other_leaf not in shared:
                under = set(topology.ancestry(spec, other_leaf))
                shared[other_leaf] = [lvl for name, lvl in chain if name in under]
            return any(domains[lvl, row] != domains[lvl, other_row] for lvl in shared[other_leaf])

        return apart

    def _apart_from_bound(self, e: GangEntry, apart: Callable[[str | None, int], bool], pk: PodKey) -> bool:
        """Whether a member bound outside the plan (not `pk`) is apart from `pk`'s row (`apart`)."""
        for rec in self.store.group_members(e.key):
            if rec.key != pk and rec.key not in e.plan:
                row = self._bound_row(rec)
                if row >= 0 and apart(self.store.membership(rec).subgroup, row):
                    return True
        return False

    def _bound_row(self, rec: PodRecord) -> int:
        """Where a member is bound: as the cache shows it, else as the API confirmed it; -1: nowhere."""
        if rec.bound_row >= 0:
            return rec.bound_row
        node = self.assumed.get(rec.key)
        return self.store.node_rows.get(node, -1) if node is not None else -1

    def _discard_if_split_by(self, e: GangEntry, pk: PodKey, pod: dict[str, Any], node: str) -> None:
        """A member in no plan seen bound (by a killed predecessor whose release lands late, or by
        another binder): a plan outside the domain it now pins would split the gang once released.
        The replan counts it as bound and keeps the rest with it. A member already apart from
        another bound one changes nothing (no replan can mend that), so its later updates never
        churn the plan."""
        row = self.store.node_rows.get(node)
        if e.spec is None or row is None or not e.plan:
            return
        gang, leaf = self._place_now(pod)
        if gang != e.key:
            return
        try:
            apart = self._apart_test(e, leaf, row)
            if apart is None or self._apart_from_bound(e, apart, pk):
                return
            outside = next(
                (
                    q
                    for q, p in e.plan.items()
                    if q not in e.releasing and apart(p.leaf, self.store.node_rows.get(p.node, -1))
                ),
                None,
            )
        except topology.TopologyError:
            return  # the plan itself is undone by the group's definition changing
        if outside is not None:
            self._discard(e, f"member {pk} was bound to {node}, outside the domain of its planned {outside}")

    def _discard_if_moved(self, e: GangEntry, node: str, row: int) -> None:
        """A node moved to another domain (a topology label of it changed). Members planned on it,
        released there, would sit apart from the members planned or bound elsewhere; members bound on
        it (as the cache or the API has it) now pin the rest of the gang to where it moved. Either
        way the replan places the rest anew, with the members already bound. Looked at once per
        subgroup on the node, not per member: they all sit on the one row."""
        if e.spec is None:
            return
        planned_leaves = {p.leaf: pk for pk, p in e.plan.items() if p.node == node and pk not in e.releasing}
        for leaf, pk in planned_leaves.items():
            try:
                apart = self._apart_test(e, leaf, row)
                split = apart is not None and (
                    self._apart_from_bound(e, apart, pk)
                    or any(apart(o.leaf, self.store.node_rows.get(o.node, -1)) for o in e.plan.values())
                )
            except topology.TopologyError:
                return  # the plan itself is undone by the group's definition changing
            if split:
                self._discard(e, f"planned node {node} moved to another topology domain since the plan")
                return
        bound_leaves: dict[str | None, PodRecord] = {}
        for rec in self.store.group_members(e.key):
            if rec.key not in e.plan and self._bound_row(rec) == row:
                bound_leaves.setdefault(self.store.membership(rec).subgroup, rec)
        for rec in bound_leaves.values():
            if not e.plan:
                return
            self._discard_if_split_by(e, rec.key, rec.obj, node)

    def _discard_if_unadmitted(self, e: GangEntry, node: str) -> None:
        """A node's labels or taints changed: a member planned on it that its selector, affinity or
        tolerations no longer admit there would be bound where kube-scheduler never would bind it
        (at its arrival, or at a release that binds it without its own cycle)."""
        for pk, p in e.plan.items():
            if p.node != node or pk in e.releasing:
                continue
            rec = self.store.pods.get(pk)
            if rec is not None and not self._admits(rec, node):
                self._discard(
                    e, f"planned node {node} no longer admits member {pk} (its labels or taints changed)"
                )
                return

    def _left(self, e: GangEntry, pk: PodKey) -> bool:
        """Whether a planned member (not in flight) is no longer in the gang whose plan holds it."""
        rec = self.store.pods.get(pk)
        if rec is None or pk in e.releasing:
            return False
        return self._place_now(rec.obj) != (e.key, e.plan[pk].leaf)

    def _place_now(self, pod: dict[str, Any]) -> tuple[GroupKey | None, str | None]:
        """The gang and leaf the store derives for the pod now; no gang when it is in none (it waits
        for its group object, or is invalid)."""
        m = self.store.membership_of(pod)
        if m.state is not MembershipState.MEMBER or m.group is None:
            return None, None
        return m.group.key, m.subgroup

    def _current_spec(self, plan: Iterable[PodKey]) -> GroupSpec | None:
        for pk in plan:
            rec = self.store.pods.get(pk)
            if rec is not None:
                m = self.store.membership(rec)
                return m.group if m.state is MembershipState.MEMBER else None
        return None

    def _forget_if_empty(self, pod: dict[str, Any]) -> None:
        """A gang whose members are all gone starts over (a JobSet restart, a recreated Job): its
        failures, memos and exclusions are dropped with the entry."""
        m = self.store.membership_of(pod)
        if m.group is not None:
            self._forget_if_memberless(m.group.key)

    def _forget_left_preemptors(self) -> None:
        """A preemptor whose pods all left it (each one's pod-group-name rewritten) holds its victims'
        room for nobody, as when they are deleted: the room goes back at once, not when the hold runs
        out, and the gang they joined may not preempt a second set beside it. O(preemptions): the
        store counts each group's pods."""
        for gang in [g for g in self.preemptions if self.store.group_size(g) == 0]:
            if gang in self.gangs:
                self._forget_if_memberless(gang)
            elif not any(is_live(rec.obj) for rec in self.store.group_members(gang)):
                self.end_preemption(gang)

    def _forget_if_memberless(self, key: GroupKey) -> None:
        e = self.gangs.get(key)
        if e is None or e.plan or e.releasing:
            return
        if any(is_live(rec.obj) for rec in self.store.group_members(key)):
            return
        del self.gangs[key]
        self.holds.drop(key)
        # a preemption for it holds its victims' room for nobody now (its own members were preempted
        # or deleted): the room goes back to everyone with the entry, not when the hold runs out
        self.end_preemption(key)
