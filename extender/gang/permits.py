"""GangPermits: what each gang has been promised and how far its binding has come.

One entry per gang key:
- a plan: which pod goes to which node (quorum members only), made once when quorum is present;
- the bind barrier: which planned members have reached bind; when every planned member has
  arrived (or is already bound) the gang is released and all of them are bound together;
- a deadline for the barrier, counted from the first arrival (`wait_s`); past it every waiting
  member is failed, the plan dropped and the gang backs off for a doubling delay;
- the last reason, for messages and /debug/gangs.

Nothing here touches capacity: the caller reserves and releases against the cluster store for
each planned pod, driven by what these methods return.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable

from extender.model.keys import GroupKey, PodKey

Clock = Callable[[], float]


class Phase(enum.Enum):
    PENDING = "Pending"  # no plan: waiting for quorum, or nothing fits
    PLANNED = "Planned"  # capacity reserved; members are being steered to their nodes
    BINDING = "Binding"  # at least one member waits at the bind barrier
    BOUND = "Bound"  # quorum bound; members beyond quorum are placed as they come
    BACKOFF = "BackOff"  # the barrier timed out; not planned again until backoff_until


class Arrival(enum.Enum):
    WAIT = "wait"  # wait at the barrier
    RELEASE = "release"  # this arrival completed the barrier: bind every waiting member now
    NOT_PLANNED = "not-planned"  # the pod has no place in the current plan
    WRONG_NODE = "wrong-node"  # kube-scheduler chose another node than the plan's


@dataclasses.dataclass
class GangEntry:
    key: GroupKey
    phase: Phase = Phase.PENDING
    plan: dict[PodKey, str] = dataclasses.field(default_factory=dict)  # pod -> node, unbound members
    domain: str = ""  # "rack r3" of the plan, for messages
    arrived: set[PodKey] = dataclasses.field(default_factory=set)
    deadline: float | None = None
    failures: int = 0
    backoff_until: float = 0.0
    last_reason: str = ""
    releasing: bool = False  # the barrier completed and the binds are in flight: hands off

    def waiting(self) -> list[PodKey]:
        return sorted(self.arrived)


class GangPermits:
    def __init__(
        self, *, wait_s: float, backoff_initial_s: float, backoff_max_s: float, clock: Clock
    ) -> None:
        self.wait_s = wait_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.gangs: dict[GroupKey, GangEntry] = {}
        self._pod_gang: dict[PodKey, GroupKey] = {}

    def entry(self, key: GroupKey) -> GangEntry:
        e = self.gangs.get(key)
        if e is None:
            e = self.gangs[key] = GangEntry(key=key)
        return e

    def gang_of(self, pod: PodKey) -> GroupKey | None:
        return self._pod_gang.get(pod)

    def in_backoff(self, key: GroupKey) -> float:
        """Seconds of backoff left for `key`; 0 when it may be planned."""
        e = self.gangs.get(key)
        if e is None or e.phase is not Phase.BACKOFF:
            return 0.0
        left = e.backoff_until - self.clock()
        if left <= 0:
            e.phase = Phase.PENDING
            return 0.0
        return left

    def set_plan(self, key: GroupKey, plan: dict[PodKey, str], *, domain: str) -> None:
        """Record a fresh plan; the caller has reserved capacity for every pod in it."""
        e = self.entry(key)
        self.drop_plan(key)
        e.plan = dict(plan)
        e.domain = domain
        e.phase = Phase.PLANNED
        e.last_reason = f"planned {len(plan)} pods" + (f" in {domain}" if domain else "")
        for pod in plan:
            self._pod_gang[pod] = key

    def drop_plan(self, key: GroupKey) -> list[PodKey]:
        """Forget the plan and any waiting arrivals; returns the pods whose reservations to release."""
        e = self.gangs.get(key)
        if e is None:
            return []
        released = list(e.plan)
        for pod in released:
            self._pod_gang.pop(pod, None)
        e.plan.clear()
        e.arrived.clear()
        e.deadline = None
        e.releasing = False
        if e.phase in (Phase.PLANNED, Phase.BINDING):
            e.phase = Phase.PENDING
        return released

    def planned_node(self, pod: PodKey) -> str | None:
        key = self._pod_gang.get(pod)
        return None if key is None else self.gangs[key].plan.get(pod)

    def arrive(self, pod: PodKey, node: str) -> tuple[Arrival, GangEntry | None]:
        """A planned member reached bind on `node`."""
        key = self._pod_gang.get(pod)
        if key is None:
            return Arrival.NOT_PLANNED, None
        e = self.gangs[key]
        if e.plan.get(pod) != node:
            return Arrival.WRONG_NODE, e
        if e.releasing:
            return Arrival.WAIT, e  # a repeated call while the binds are in flight: the release answers it
        if not e.arrived:
            e.deadline = self.clock() + self.wait_s
        e.arrived.add(pod)
        e.phase = Phase.BINDING
        if e.arrived >= set(e.plan):
            e.releasing = True
            e.deadline = None  # the barrier is complete; the binds answer for themselves now
            return Arrival.RELEASE, e
        return Arrival.WAIT, e

    def depart(self, pod: PodKey) -> None:
        """A waiting member's bind call ended without a release (cancelled by the caller)."""
        key = self._pod_gang.get(pod)
        if key is not None:
            self.gangs[key].arrived.discard(pod)

    def mark_released(self, key: GroupKey, bound: Iterable[PodKey], failed: Iterable[PodKey] = ()) -> None:
        """The release's binds are done. The plan is spent either way: a member whose binding the
        API refused leaves the plan (its caller was answered) and is placed again like any member
        beyond quorum, inside the gang's domain."""
        e = self.entry(key)
        for pod in (*bound, *failed):
            e.plan.pop(pod, None)
            e.arrived.discard(pod)
            self._pod_gang.pop(pod, None)
        e.releasing = False
        e.deadline = None
        if not e.plan:
            e.phase = Phase.BOUND
            e.failures = 0
            e.last_reason = "quorum bound"

    def expired(self) -> list[GangEntry]:
        """Gangs whose barrier deadline has passed."""
        now = self.clock()
        return [
            e for e in self.gangs.values() if e.deadline is not None and now >= e.deadline and not e.releasing
        ]

    def fail(self, key: GroupKey, reason: str) -> list[PodKey]:
        """The barrier failed: drop the plan, back off (doubling), return pods to release."""
        e = self.entry(key)
        released = self.drop_plan(key)
        e.failures += 1
        delay = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (e.failures - 1))
        e.backoff_until = self.clock() + delay
        e.phase = Phase.BACKOFF
        e.last_reason = f"{reason}; backing off {delay:g}s"
        return released

    def forget(self, key: GroupKey) -> list[PodKey]:
        released = self.drop_plan(key)
        self.gangs.pop(key, None)
        return released
