"""What the process remembers of one gang between calls, and the barrier's arithmetic.

Data and pure rules only: the gang ledger (scheduling.ledger) is the one owner that creates and
changes entries, together with the capacity they hold. Everything here is tentative and can be
lost: a restarted service derives what counts (which members are bound, whether quorum is bound)
from the API server again, and plans afresh.
"""

from __future__ import annotations

import dataclasses
import enum

from extender.model.group import GroupSpec
from extender.model.keys import GroupKey, PodKey


class Phase(enum.Enum):
    PENDING = "Pending"  # no plan: waiting for quorum, or nothing fits
    PLANNED = "Planned"  # capacity held; members are being steered to their nodes
    BINDING = "Binding"  # at least one member waits at the bind barrier, or the binds are in flight
    BOUND = "Bound"  # quorum bound (counted in the cluster); members beyond it are placed as they come
    BACKOFF = "BackOff"  # the barrier timed out; not planned again until the backoff ends


class Arrival(enum.Enum):
    WAIT = "wait"  # wait at the barrier
    RELEASE = "release"  # this arrival completed the barrier: bind every waiting member now
    IN_FLIGHT = "in-flight"  # this pod's release bind is already in flight: wait for its outcome
    NOT_PLANNED = "not-planned"  # the pod has no place in the current plan
    WRONG_NODE = "wrong-node"  # kube-scheduler chose another node than the plan's


@dataclasses.dataclass(frozen=True)
class PlannedPod:
    node: str
    uid: str  # the pod the plan was made for; a pod recreated under the name has another
    leaf: str | None


@dataclasses.dataclass
class GangEntry:
    key: GroupKey
    spec: GroupSpec | None = None  # the definition the plan was made for
    plan: dict[PodKey, PlannedPod] = dataclasses.field(default_factory=dict)  # unbound members only
    domain: str = ""  # "rack r3" of the plan, for messages
    arrived: dict[PodKey, str] = dataclasses.field(default_factory=dict)
    """pod -> uid of its bind call. Sticky: a member whose call was answered (its wait ended) still
    counts as arrived, so the gang completes once every member has reached bind with this plan,
    not only when all wait at once (kube-scheduler's per-pod backoff spreads their retries)."""
    answer_at: float | None = None  # when the waiting calls are answered, from the first arrival
    hold_until: float | None = None  # when an unfinished plan is given up and the gang backs off
    hold_why: str = ""  # what `hold_until` waits for, with its window, for the message when it ends
    reached: set[PodKey] = dataclasses.field(default_factory=set)
    """Members that reached bind under the current plan, ever (moved or refused since, too): only a
    member new to it is progress that keeps the plan."""
    releasing: set[PodKey] = dataclasses.field(default_factory=set)  # release binds in flight
    own_cycle: frozenset[PodKey] = frozenset()
    """Planned members bound only once kube-scheduler has filtered them on their node (see
    model.cycle); the rest may be released with the first member's bind, where that is on."""
    failures: int = 0
    backoff_until: float = 0.0
    backoff_told: bool = True  # whether the end of the current backoff was announced (members nudged)
    last_reason: str = ""
    since: float | None = None
    """When the gang was first seen (a member filtered), until its quorum is bound: time to bind."""
    no_fit: tuple[tuple[int, ...], str] | None = None  # (signature, reason) of the last "does not fit"
    no_fit_spec: GroupSpec | None = None  # the definition that did not fit (a changed one may)
    excluded: dict[PodKey, set[str]] = dataclasses.field(default_factory=dict)
    """Nodes kube-scheduler would not offer a member (its own filters: pod anti-affinity, ports...);
    later plans avoid them so replanning converges instead of cycling through the same node."""

    def waiting(self) -> list[PodKey]:
        return sorted(self.arrived)

    def is_idle(self) -> bool:
        """Nothing held, nothing waiting, nothing worth remembering."""
        return not (self.plan or self.arrived or self.releasing or self.failures or self.no_fit)

    def barrier_complete(self) -> bool:
        return bool(self.plan) and set(self.plan) <= set(self.arrived)

    def releasable_early(self) -> bool:
        """Whether a member has reached bind and every member still planned that needs its own
        cycle has too (one bound since, by a release or the watch, is no longer waited for)."""
        if not (self.plan and self.arrived):
            return False
        return all(pk in self.arrived for pk in self.own_cycle if pk in self.plan)


def backoff_delay_s(failures: int, *, initial_s: float, max_s: float) -> float:
    """Doubling delay after the n-th consecutive failure (n >= 1), capped."""
    return min(max_s, initial_s * 2 ** max(0, failures - 1))
