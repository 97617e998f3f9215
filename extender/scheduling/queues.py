"""KAI queues: which queue a gang belongs to, what each queue uses, its fair share, and admission.

The scheduler asks `admission` before it plans a gang or passes a plain pod, and waits with the
reason it returns; a pod placed one by one has its queue's limits checked again at bind, since
kube-scheduler filters the next pod before the previous one's bind arrives. `admission`, `divide`
and `fair_shares` are pure functions over a `QueueSnapshot`; the `QueueBook` keeps the usage behind
a snapshot current from store events, so taking one costs the number of queues, not of pods.

Nothing is enforced until the cluster has at least one Queue object: a cluster without KAI queues
(or whose API server does not serve the Queue CRD) schedules exactly as it would without this module.

The queue of a gang is its KAI PodGroup's `spec.queue` (authoritative), else the `kai.scheduler/queue`
(or `project`) label of its workload or pod, else the configured default queue. A gang has one queue:
when its members' labels name different ones (a PodGroup without `spec.queue`, a JobSet whose
replicatedJobs' templates disagree), the gang is not admitted, and every member's filter says which
queues disagree (`gang_queue`); no member's queue is chosen for the others.

Accounting, per queue and resource (cpu, memory, nvidia.com/gpu):
- allocated = requests of bound, unfinished pods + capacity held for pods (a planned gang's members,
  a pod whose bind is in flight) + the room held for a preemptor (its victims gone), charged to the
  preemptor's queue from the instant each victim's charge leaves its own;
- requested = allocated + requests of live pending pods;
- leaving = the part of allocated on its way out: bound pods terminating, and the victims of a
  preemption or reclaim in flight (evicted, not yet seen terminating). A pod leaving still holds its
  room, so it counts in allocated (limits, capacity) until it is gone; a reclaim reads allocated -
  leaving, so the victims of one reclaim are never taken from their queue a second time;
- arriving = what the pending members of a preempting (or reclaiming) gang will take once its
  victims are gone, less the room already held (and so allocated) for it: a queue whose reclaim is
  under way is judged by `may_reclaim` with it, so two of its gangs cannot each reclaim up to the
  same fair share.
A queue's usage counts toward each of its ancestors. A pod of the default scheduler (the cluster's
other pods, which this service never places) counts only when it names a queue.

Fair share (KAI's division, docs/fairness/README.md), per resource, top-down: the cluster's
allocatable capacity is divided among the top-level queues, then each queue's share among its
children. At each level every queue first gets min(quota, requested, limit) (quotas beyond the
capacity are scaled down in proportion); what remains goes to queues that still want more, higher
`priority` first, in proportion to `overQuotaWeight` (a zero weight gets nothing over quota), never
past a queue's limit or its request. Exact fractions, then rounded down with the leftover units
given to the largest remainders (ties by name), so shares sum to what was divided.

Admission of a gang (or plain pod) of queue Q needing N waits when (`credit`: usage of Q the step
gives back, counted out of Q and its ancestors: the victims of Q an in-queue preemption evicts, or
the room held for a preemptor that it is being planned into):
1. Q does not exist, is malformed, or has child queues (only leaf queues take workloads);
2. limit: Q's or any ancestor's allocated + N exceeds its limit on some resource;
3. fair-share hold: on some resource r, Q's allocated + N exceeds Q's fair share, while a ready,
   unplanned gang H of another queue P needs r, P's allocated + H's need stays within P's fair share
   on every resource H needs and within every limit of P and its ancestors, and the cluster's free r
   is short of N + H's need (they compete). A holder found to fit nowhere and to reclaim nothing,
   with no capacity grown since (`QueueSnapshot.stuck`), holds no one: it could not use the room,
   which would sit idle for nobody. A plain pod is found so by its last filter (no offered node
   fits it, or it asks for a resource no node has), or as the cluster is now (no schedulable node
   has room for it, inside its group's domain for a member of a group of quorum one placed as it
   comes: kube-scheduler, its own filters passing no node, may never ask), unless
   kube-scheduler's preemption may be freeing room for it (it is nominated, or the preempt verb's
   victims are leaving for it) (`QueueSnapshot.idle`).
Why the hold cannot starve anyone: a gang that holds others is within its queue's share on every
resource, so it is itself never held; holds therefore never form a cycle, and each holder is
planned as soon as the capacity for it frees, since no over-share gang takes that capacity. A held
gang waits only while a within-share gang of another queue could use the same capacity: exactly the
order KAI's fair share asks for. The hold does not outlast its cause: the moment the holder is
planned, leaves or the free capacity covers both, the held gang is admitted.

Reclaim (KAI's fair-share reclaim, simplified to leaf queues): a gang that fits nowhere, of a queue
that stays within its fair share with it (`may_reclaim`), may evict whole gangs and plain pods of
other queues that are over their fair share on a resource the eviction frees, never taking such a
queue, or any of its ancestors, below its quota on any resource, all its victims together
(`reclaimable`). Use there is allocated - leaving, so victims already on their way out are not
counted twice; an ancestor the reclaimer shares with a victim gets back what the gang takes. The victims are
chosen, evicted and their room held by the gang-aware preemption (scheduling.preemptor), priority
playing no part: a preemption is within priorities, a reclaim between queues.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from extender.grouping import kai
from extender.grouping.owners import walk_owners
from extender.model import labels as keys
from extender.model.group import GroupSpec, MembershipState, Policy, Source
from extender.model.keys import GroupKey, PodKey, object_key, shown
from extender.model.queue import (
    KAI_NAMES,
    QUEUE_API_GROUP,
    QUEUE_KIND,
    RESOURCES,
    Queue,
    QueueError,
    amount_text,
    read_queue,
)
from extender.state.store import (
    POD,
    ClusterStore,
    is_live,
    is_terminal,
    scheduler_name,
)


def in_use(store: ClusterStore) -> bool:
    """Whether the cluster has Queue objects: until it has, nothing here is enforced."""
    return bool(store.objects.get((QUEUE_API_GROUP, QUEUE_KIND)))


TRACKED = tuple(RESOURCES.values())
"""The resources queues account for, in this project's names."""


# ================================================================= division
@dataclasses.dataclass(frozen=True)
class Claim:
    """One queue's claim on a capacity being divided among siblings."""

    name: str
    request: int
    quota: int | None = 0  # None: unlimited
    limit: int | None = None  # None: no limit
    weight: Fraction = Fraction(1)
    priority: int = 100


def divide(capacity: int, claims: Sequence[Claim]) -> dict[str, int]:
    """`capacity` divided among `claims` the KAI way (see the module docstring); sums to at most
    `capacity`, and no claim gets more than its request or its limit."""
    capacity = max(0, capacity)
    want = {c.name: max(0, min(c.request, c.limit) if c.limit is not None else c.request) for c in claims}
    share: dict[str, Fraction] = {
        c.name: Fraction(want[c.name] if c.quota is None else min(c.quota, want[c.name])) for c in claims
    }
    total = sum(share.values(), Fraction(0))
    if total > capacity:
        # quotas promise more than there is: each gets the same fraction of its quota
        share = {n: s * capacity / total for n, s in share.items()}
        left = Fraction(0)
    else:
        left = capacity - total
    for priority in sorted({c.priority for c in claims}, reverse=True):
        level = [c for c in claims if c.priority == priority and c.weight > 0]
        while left > 0:
            active = [c for c in level if share[c.name] < want[c.name]]
            if not active:
                break
            weights = sum((c.weight for c in active), Fraction(0))
            offers = {c.name: left * c.weight / weights for c in active}
            full = [c for c in active if want[c.name] - share[c.name] <= offers[c.name]]
            if not full:
                for c in active:
                    share[c.name] += offers[c.name]
                left = Fraction(0)
                break
            for c in full:  # satisfied: the rest is offered again among the others
                left -= want[c.name] - share[c.name]
                share[c.name] = Fraction(want[c.name])
    return _rounded(share)


def _rounded(share: Mapping[str, Fraction]) -> dict[str, int]:
    """Rounded down, then the leftover units to the largest remainders (ties by name): integers that
    sum to the exact total rounded down, each within one unit of its exact share."""
    out = {n: math.floor(s) for n, s in share.items()}
    leftover = math.floor(sum(share.values(), Fraction(0))) - sum(out.values())
    for name in sorted(share, key=lambda n: (-(share[n] - out[n]), n))[: max(0, leftover)]:
        out[name] += 1
    return out


# ================================================================= the queue tree
@dataclasses.dataclass(frozen=True)
class QueueTree:
    queues: dict[str, Queue]
    errors: dict[str, str]
    """Queue name -> why it cannot be used (malformed, a parent cycle)."""
    children: dict[str | None, tuple[str, ...]]
    """Parent name (None: top level) -> its child queues, by name."""

    def ancestors(self, name: str) -> list[str]:
        """The queue, then its parent, up to the top."""
        out = [name]
        while (parent := self.queues[out[-1]].parent) is not None and parent in self.queues:
            out.append(parent)
        return out

    def usable(self, name: str) -> bool:
        """Whether the queue exists and is sound (a malformed one is kept only for what it limits)."""
        return name in self.queues and name not in self.errors

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)


MAX_QUEUE_DEPTH = 16
"""Levels of parent queues a queue may sit under (KAI's hierarchies are two or three deep): every
admission walks a queue's ancestors, so a chain of thousands would cost every filter as much."""


def read_tree(objects: Iterable[Mapping[str, Any]]) -> QueueTree:
    """The queues of Queue objects; a malformed one, or one in a parent cycle, is an error, never raised.

    A malformed queue stays in the tree, read closed where it cannot be read (model.queue.read_queue),
    so its children stay under its limits; a queue in a parent cycle keeps its own limits and becomes
    a top-level queue, the cycle being cut at it. A queue with an error takes no workloads itself. A
    queue whose parent does not exist is a top-level queue."""
    queues: dict[str, Queue] = {}
    errors: dict[str, str] = {}
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            q, problems = read_queue(obj)
        except QueueError as exc:
            errors[name or "?"] = str(exc)
            continue
        queues[q.name] = q
        if problems:
            errors[q.name] = "; ".join(problems)
    # each queue has one parent: one walk per queue that stops at the first queue walked before
    # finds every cycle in O(queues), however long the chains
    in_cycle: set[str] = set()
    walked: dict[str, int] = {}
    for start, name in enumerate(queues):
        cur: str | None = name
        while cur is not None and cur in queues and cur not in walked:
            walked[cur] = start
            cur = queues[cur].parent
        if cur is not None and walked.get(cur) == start:
            in_cycle |= _cycle_from(queues, cur)
    for name in in_cycle:
        why = f"spec.parentQueue: queue {name} is in a cycle of parent queues"
        errors[name] = f"{errors[name]}; {why}" if name in errors else why
        queues[name] = dataclasses.replace(queues[name], parent=None)
    # every reader walks a queue's ancestors (its limits are its own and theirs): a chain deeper
    # than MAX_QUEUE_DEPTH is cut there, the queue at the cut a top-level one, and it and every
    # queue below it take no workloads (under the cut they would escape the limits above it)
    depth: dict[str, int] = {}
    cut_at: dict[str, str | None] = {}  # queue -> the cut queue it is (or sits below), if any
    for name in sorted(queues):
        chain: list[str] = []
        cur = name
        while cur is not None and cur in queues and cur not in depth:
            chain.append(cur)
            cur = queues[cur].parent
        known = cur is not None and cur in depth
        level = depth[cur] if known else 0
        cut = cut_at[cur] if known else None
        for q in reversed(chain):
            level += 1
            if level > MAX_QUEUE_DEPTH:
                queues[q] = dataclasses.replace(queues[q], parent=None)
                level, cut = 1, q
            depth[q], cut_at[q] = level, cut
            if cut is not None:
                deep = f"more than {MAX_QUEUE_DEPTH} levels below its top queue"
                why = (
                    f"spec.parentQueue: queue {q} is {deep}"
                    if cut == q
                    else f"spec.parentQueue: queue {q} sits below queue {cut}, {deep}"
                )
                errors[q] = f"{errors[q]}; {why}" if q in errors else why
    children: dict[str | None, list[str]] = {}
    for q in sorted(queues.values(), key=lambda q: q.name):
        parent = q.parent if q.parent in queues else None
        children.setdefault(parent, []).append(q.name)
    return QueueTree(queues, errors, {k: tuple(v) for k, v in children.items()})


def _cycle_from(queues: Mapping[str, Queue], start: str) -> set[str]:
    """The queues of the parent cycle `start` is on."""
    out = {start}
    parent = queues[start].parent
    while parent is not None and parent != start:
        out.add(parent)
        parent = queues[parent].parent
    return out


def fair_shares(
    tree: QueueTree, requested: Mapping[str, Mapping[str, int]], capacity: Mapping[str, int]
) -> dict[str, dict[str, int]]:
    """queue -> resource -> fair share. `requested` is per queue with its descendants' included."""
    out: dict[str, dict[str, int]] = {name: {} for name in tree.queues}
    for resource in TRACKED:
        # each level is divided once its parent's share is known: a stack, never recursion (a
        # chain of parent queues may be deeper than the interpreter's stack)
        pending: list[tuple[str | None, int]] = [(None, capacity.get(resource, 0))]
        while pending:
            parent, amount = pending.pop()
            claims = []
            for name in tree.children.get(parent, ()):
                q = tree.queues[name]
                r = q.resource(resource)
                claims.append(
                    Claim(
                        name,
                        requested.get(name, {}).get(resource, 0),
                        quota=r.quota,
                        limit=r.limit,
                        weight=r.weight,
                        priority=q.priority,
                    )
                )
            for name, share in divide(amount, claims).items():
                out[name][resource] = share
                pending.append((name, share))
    return out


# ================================================================= the queue of a gang
def named_queue(store: ClusterStore, group: GroupSpec | None, pod: dict[str, Any]) -> str | None:
    """The queue the gang names: its KAI PodGroup's spec.queue, else its workload's or pod's label."""
    if group is not None and group.source is Source.KAI_PODGROUP and group.queue:
        return group.queue
    top = walk_owners(pod, store).top
    return kai.labelled_queue(top, pod)


def queue_of(store: ClusterStore, group: GroupSpec | None, pod: dict[str, Any], default: str) -> str:
    """The pod's queue as its gang and labels name it, else `default` (see `gang_queue` for a gang's)."""
    return named_queue(store, group, pod) or default


def charged_queue(
    store: ClusterStore, group: GroupSpec | None, pod: dict[str, Any], default: str
) -> str | None:
    """The queue a pod's usage is charged to; None for a pod of the default scheduler naming none."""
    queue = named_queue(store, group, pod)
    if queue is None and not _another_schedulers(pod):
        queue = default
    return queue


def _another_schedulers(pod: dict[str, Any]) -> bool:
    """Placed by the default scheduler (the cluster's other pods: system daemons, services), which
    this service never sees; such a pod counts toward a queue only when it names one."""
    return scheduler_name(pod) == keys.DEFAULT_SCHEDULER_NAME


# ================================================================= accounting
@dataclasses.dataclass(frozen=True)
class Waiter:
    """A gang (or pod) waiting unplanned: its queue and what its pending pods request."""

    group: GroupKey
    queue: str
    need: dict[str, int]
    lone: bool = False  # no gang (a plain pod, a group of quorum one): its pods are placed one at a time,
    # each inside the group's domain; QueueSnapshot.idle may say it holds no one


@dataclasses.dataclass(frozen=True)
class QueueSnapshot:
    tree: QueueTree
    allocated: dict[str, dict[str, int]]  # per queue, its descendants included
    requested: dict[str, dict[str, int]]
    fair_share: dict[str, dict[str, int]]
    capacity: dict[str, int]  # allocatable of schedulable nodes
    free: dict[str, int]  # free on schedulable nodes
    unknown: dict[str, int]
    """Queues pods name that do not exist (or cannot be used) -> pods naming them."""
    leaving: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per queue, the part of allocated on its way out, its descendants included (none when absent)."""
    arriving: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per queue, what gangs preempting or reclaiming will take once their victims are gone."""
    held: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per queue, the part of allocated that is room held for its waiting gangs (holds.py) and its
    preemptions (their victims' room and the free room they claim), its descendants included:
    counted for limits and fair share, never as running work a reclaim keeps above quota or finds
    over share."""
    groups: Mapping[GroupKey, _GroupTally] = dataclasses.field(default_factory=dict, repr=False)
    planned: frozenset[GroupKey] = frozenset()
    stuck: frozenset[GroupKey] = frozenset()
    """Gangs (and plain pods) that fit nowhere and may reclaim nothing as things are: they could not
    use room held for them, so they hold no one (rule 3)."""
    idle: Callable[[GroupKey], bool] | None = dataclasses.field(default=None, repr=False)
    """A plain pod (group of one) pending that could use no room as the cluster is now
    (no node has room for it, and no preemption is under way for it): asked last, only of a waiter
    that would otherwise hold someone, so the cost is a look per hold, not one per pending pod."""

    def group_queue(self, key: GroupKey) -> tuple[str | None, str]:
        """The gang's one queue as the book counts its pods: (queue, ""); (None, "") when none is
        counted yet; (None, why) when its members name different queues."""
        tally = self.groups.get(key)
        if tally is None or not tally.queues:
            return None, ""
        return _agreed(tally.queues)

    def waiters(self, resource: str, *, besides: str) -> Iterator[Waiter]:
        """Ready, unplanned gangs (and pods) of existing queues other than `besides` whose pending pods
        ask for `resource`, in the order the book first saw them. A generator: a fair-share hold stops
        at the first that qualifies, and the cheap tests come first."""
        for key, t in self.groups.items():
            if t.queue == besides or t.pending <= 0 or t.need.get(resource, 0) <= 0:
                continue
            if key in self.planned or key in self.stuck or not self.tree.usable(t.queue) or len(t.queues) > 1:
                continue  # planned, stuck, of no usable queue, or of no one queue (not admitted)
            usable = t.ready_need()
            if usable is not None and usable[0] > 0 and usable[1].get(resource, 0) > 0:
                yield Waiter(key, t.queue, usable[1], lone=not t.spec.is_gang())


def _tracked(requests: Mapping[str, int]) -> dict[str, int]:
    return {r: int(requests.get(r, 0)) for r in TRACKED}


def _add(total: dict[str, int], more: Mapping[str, int], sign: int = 1) -> None:
    for r, v in more.items():
        total[r] = total.get(r, 0) + sign * v


def _column_sums(store: ClusterStore, attr: str) -> dict[str, int]:
    arrays = store.arrays
    rows = [r for r in store.row_names if arrays.schedulable[r]]
    out: dict[str, int] = {}
    for resource in TRACKED:
        col = store.resources.find(resource)
        out[resource] = (
            int(np.asarray(getattr(arrays, attr))[rows, col].clip(min=0).sum())
            if col is not None and rows
            else 0
        )
    return out


@dataclasses.dataclass(frozen=True)
class _PodShare:
    """What one pod adds to its queue: allocated (bound or held), pending, or nothing (gated, gone)."""

    queue: str
    allocated: bool
    pending: bool
    leaving: bool  # allocated, and terminating
    need: dict[str, int]
    group: GroupSpec | None
    leaf: str | None


@dataclasses.dataclass
class _GroupTally:
    queue: str
    spec: GroupSpec
    need: dict[str, int]  # of its pending pods
    live: dict[str | None, int]
    """Live pods per leaf, bound or not: those the gang's quorum counts, as its filter counts them (a
    bound member being deleted counts for nothing; it still uses its queue's room)."""
    pending: int = 0
    queues: dict[str, int] = dataclasses.field(default_factory=dict)
    """Pods counted per queue they name: more than one key, and the gang has no one queue."""
    pending_by_leaf: dict[str | None, tuple[int, dict[str, int]]] = dataclasses.field(default_factory=dict)
    """Pending pods and their need per leaf, only leaves with some: what a ready gang can use is
    what its ready leaves ask for (a leaf short of pods binds nothing, whatever it waits for)."""
    pods: int = 0
    """Every pod the tally counts, live or leaving: the tally goes with the last."""
    finished: Callable[[GroupSpec], dict[str | None, int]] | None = None
    """The gang's members per leaf that ran to completion (the store's count): its quorum counts them
    as the filter does, so a gang the filter would place is ready here too."""

    def ready_leaves(self) -> frozenset[str | None] | None:
        """The leaves whose pending pods ready_need counts (every leaf under the basic policy); None
        while the gang is not ready."""
        if self.spec.policy is Policy.BASIC:
            return frozenset(self.pending_by_leaf)
        ready = self.spec.ready_leaves(self.live)
        if (ready is None or not self.pending_by_leaf.keys() <= set(ready)) and self.finished is not None:
            # looked up only for a gang its live pods leave short: more pods make no leaf less ready
            counts = self.finished(self.spec)
            if counts:
                for leaf, n in self.live.items():
                    counts[leaf] = counts.get(leaf, 0) + n
                ready = self.spec.ready_leaves(counts)
        return None if ready is None else frozenset(ready)

    def ready_need(self) -> tuple[int, dict[str, int]] | None:
        """The pending pods (and their need) the gang could bind now: those of its ready leaves, all
        of them under the basic policy; None while the gang is not ready."""
        ready = self.ready_leaves()
        if ready is None:
            return None
        if ready.issuperset(self.pending_by_leaf):
            return self.pending, dict(self.need)
        pods, need = 0, {}
        for leaf, (n, leaf_need) in self.pending_by_leaf.items():
            if leaf in ready:
                pods += n
                _add(need, leaf_need)
        return pods, need


def _agreed(named: Mapping[str, int]) -> tuple[str | None, str]:
    if len(named) == 1:
        return next(iter(named)), ""
    shown = ", ".join(f"{q} ({n} pod{'s' if n != 1 else ''})" for q, n in sorted(named.items()))
    return None, (
        f"its members name different queues: {shown}; a gang has one queue: name it in the PodGroup's "
        f"spec.queue, or give every member (or their workload) the same {keys.QUEUE} label"
    )


def gang_queue(
    snap: QueueSnapshot, store: ClusterStore, group: GroupSpec, pod: dict[str, Any], default: str
) -> tuple[str | None, str]:
    """The one queue of `pod`'s gang: its KAI PodGroup's spec.queue, else the queue every member
    names (the book's count, `pod` included); (None, why) when members name different queues."""
    if group.source is Source.KAI_PODGROUP and group.queue:
        return group.queue, ""
    own = queue_of(store, group, pod, default)
    tally = snap.groups.get(group.key)
    named = dict(tally.queues) if tally is not None else {}
    named.setdefault(own, 1)  # the pod filtered, counted already unless the cache has not seen it
    return _agreed(named)


class QueueBook:
    """Each queue's usage, kept current pod by pod: a pod event, a hold made or dropped, or a change to
    a workload or group object (which the store reports for the pods that read it) updates only what
    moved, so a snapshot costs the number of queues and waiting gangs, not the number of pods."""

    def __init__(self, store: ClusterStore, default_queue: str) -> None:
        self.store = store
        self.default_queue = default_queue
        self._shares: dict[PodKey, _PodShare] = {}
        self._dirty: set[PodKey] = set()
        self._counted = False
        self._held: set[PodKey] = set()
        self.own_allocated: dict[str, dict[str, int]] = {}
        self.own_leaving: dict[str, dict[str, int]] = {}
        self.own_pending: dict[str, dict[str, int]] = {}
        self.groups: dict[GroupKey, _GroupTally] = {}
        self.pods_by_queue: dict[str, int] = {}
        self.tracking = False
        """Whether queues are in use (the last snapshot found Queue objects): until they are, pod events
        are not recorded, and the first snapshot with queues counts every pod afresh."""
        store.add_listener(self._on_change)
        store.add_regroup_listener(self._regrouped)

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        if kind == POD and self.tracking:
            self._dirty.add(PodKey(object_key(obj)))

    def _finished(self, spec: GroupSpec) -> dict[str | None, int]:
        """The gang's finished members per leaf; asked on the filter path (`waiters`), so the walk
        over its members is skipped where none can have finished."""
        return self.store.finished_counts(spec) if self.store.may_have_finished(spec) else {}

    def _regrouped(self, pod: PodKey) -> None:
        """A workload or group object the pod's membership read changed: its gang or queue may have."""
        if self.tracking:
            self._dirty.add(pod)

    def _forget(self) -> None:
        self.tracking = False
        self._shares, self._dirty, self._held = {}, set(), set()
        self._counted = False
        self.own_allocated, self.own_pending, self.groups, self.pods_by_queue = {}, {}, {}, {}
        self.own_leaving = {}

    def refresh(self) -> None:
        store = self.store
        if not self._counted:  # the first refresh since queues came into use counts every pod
            self._counted = True
            self._dirty |= set(store.pods)
        held = {pk for pk in store.reservations if pk in store.pods}
        self._dirty |= held ^ self._held
        self._held = held
        dirty, self._dirty = self._dirty, set()
        # in name order, not the set's (which follows the hash seed): the order gangs are first seen
        # in is the order the reclaim pass plans them and fair share looks at waiters
        for pk in sorted(dirty):
            old = self._shares.pop(pk, None)
            if old is not None:
                self._count(old, -1)
            new = self._share_of(pk)
            if new is not None:
                self._shares[pk] = new
                self._count(new, 1)

    def charged_to(self, pk: PodKey) -> str | None:
        """The queue the pod was counted to at the last refresh (None: counted to none)."""
        share = self._shares.get(pk)
        return share.queue if share is not None else None

    def counted_allocated(self, pk: PodKey) -> bool:
        """Whether the last refresh counted the pod as using its queue's room (bound, or held)."""
        share = self._shares.get(pk)
        return share is not None and share.allocated

    def _share_of(self, pk: PodKey) -> _PodShare | None:
        rec = self.store.pods.get(pk)
        if rec is None or is_terminal(rec.obj):
            return None
        m = self.store.membership(rec)
        group = m.group if m.state is MembershipState.MEMBER else None
        queue = charged_queue(self.store, group, rec.obj, self.default_queue)
        if queue is None:
            return None
        allocated = bool(rec.node_name) or pk in self._held
        live = is_live(rec.obj)
        return _PodShare(
            queue=queue,
            allocated=allocated,
            pending=not allocated and live,
            leaving=allocated and not live,
            need=_tracked(rec.requests),
            group=group,
            leaf=m.subgroup,
        )

    def _count(self, share: _PodShare, sign: int) -> None:
        self.pods_by_queue[share.queue] = self.pods_by_queue.get(share.queue, 0) + sign
        if not self.pods_by_queue[share.queue]:
            del self.pods_by_queue[share.queue]
        if share.allocated:
            _add(self.own_allocated.setdefault(share.queue, {}), share.need, sign)
            if share.leaving:
                _add(self.own_leaving.setdefault(share.queue, {}), share.need, sign)
        elif share.pending:
            _add(self.own_pending.setdefault(share.queue, {}), share.need, sign)
        if share.group is None or not (share.allocated or share.pending):
            return
        key = share.group.key
        tally = self.groups.get(key)
        if tally is None:
            tally = self.groups[key] = _GroupTally(share.queue, share.group, {}, {}, finished=self._finished)
        if sign > 0:
            tally.queue, tally.spec = share.queue, share.group  # the latest definition
        tally.pods += sign
        if not share.leaving:
            tally.live[share.leaf] = tally.live.get(share.leaf, 0) + sign
        tally.queues[share.queue] = tally.queues.get(share.queue, 0) + sign
        if not tally.queues[share.queue]:
            del tally.queues[share.queue]
        if share.pending:
            tally.pending += sign
            _add(tally.need, share.need, sign)
            n, leaf_need = tally.pending_by_leaf.get(share.leaf, (0, {}))
            leaf_need = dict(leaf_need)
            _add(leaf_need, share.need, sign)
            if n + sign:
                tally.pending_by_leaf[share.leaf] = (n + sign, leaf_need)
            else:
                tally.pending_by_leaf.pop(share.leaf, None)
        if not tally.pods:
            del self.groups[key]

    def snapshot(
        self,
        planned: Iterable[GroupKey],
        holding: Mapping[GroupKey, tuple[str, Mapping[str, int]]] | None = None,
        *,
        victims: Iterable[PodKey] = (),
        stuck: Iterable[GroupKey] = (),
        incoming: Iterable[PodKey] = (),
        idle: Callable[[GroupKey], bool] | None = None,
        waiting_held: Mapping[GroupKey, tuple[str, Mapping[str, int]]] | None = None,
    ) -> QueueSnapshot | None:
        """Every queue's usage and fair share now; None when the cluster has no Queue objects (no
        queues in use: nothing is enforced). `planned`: gangs holding a plan (they wait for nothing);
        `holding`: preemptor gang -> (its queue, the room held for it), charged to that queue;
        `victims`: pods being evicted for a preemption or reclaim in flight (leaving); `stuck`: gangs
        found to fit nowhere and reclaim nothing since capacity last grew (they hold no one);
        `incoming`: pending members of gangs preempting or reclaiming (arriving); `idle`: see
        QueueSnapshot.idle; `waiting_held`: waiting gang -> (its queue, the room held for it while
        its rows drain), charged as `holding` is, and kept apart in `held`."""
        if not in_use(self.store):
            if self.tracking:
                self._forget()
            return None
        objects = self.store.list(QUEUE_API_GROUP, QUEUE_KIND)
        self.tracking = True
        self.refresh()
        tree = read_tree(objects)
        allocated = {name: _tracked({}) for name in tree.queues}
        requested = {name: _tracked({}) for name in tree.queues}
        leaving = {name: _tracked({}) for name in tree.queues}
        own_leaving = {q: dict(v) for q, v in self.own_leaving.items()}
        for pk in victims:
            share = self._shares.get(pk)
            if share is not None and share.allocated and not share.leaving:  # terminating: counted
                _add(own_leaving.setdefault(share.queue, {}), share.need)
        own_arriving: dict[str, dict[str, int]] = {}
        for pk in incoming:
            share = self._shares.get(pk)
            if share is not None and share.pending:
                _add(own_arriving.setdefault(share.queue, {}), share.need)
        arriving = {name: _tracked({}) for name in tree.queues}
        for queue in tree.queues:
            for ancestor in tree.ancestors(queue):
                _add(allocated[ancestor], self.own_allocated.get(queue, {}))
                _add(leaving[ancestor], own_leaving.get(queue, {}))
                _add(arriving[ancestor], own_arriving.get(queue, {}))
                _add(requested[ancestor], self.own_allocated.get(queue, {}))
                _add(requested[ancestor], self.own_pending.get(queue, {}))
        held = {name: _tracked({}) for name in tree.queues}
        # neither a waiting gang's hold nor a preemption's held room (its victims' and the free room
        # it claims) is running work: a reclaim keeps a queue at its quota by what runs
        for queue, room in [*(holding or {}).values(), *(waiting_held or {}).values()]:
            if queue in tree.queues:
                for ancestor in tree.ancestors(queue):
                    _add(held[ancestor], _tracked(room))
        for gang, (queue, room) in [*(holding or {}).items(), *(waiting_held or {}).items()]:
            if queue not in tree.queues:
                continue
            room = _tracked(room)
            tally = self.groups.get(gang)
            waiting = tally.need if tally is not None else {}
            # requested already has the preemptor's pending pods: the room counts only beyond them
            beyond = {r: max(0, v - waiting.get(r, 0)) for r, v in room.items()}
            # and arriving has them too: the part of them the held room already covers is allocated
            covered = {r: min(v, waiting.get(r, 0)) for r, v in room.items()}
            for ancestor in tree.ancestors(queue):
                _add(allocated[ancestor], room)
                _add(requested[ancestor], beyond)
                _add(arriving[ancestor], covered, -1)
                for r, v in arriving[ancestor].items():
                    arriving[ancestor][r] = max(0, v)
        capacity = _column_sums(self.store, "allocatable")
        return QueueSnapshot(
            tree=tree,
            allocated=allocated,
            leaving=leaving,
            arriving=arriving,
            held=held,
            requested=requested,
            fair_share=fair_shares(tree, requested, capacity),
            capacity=capacity,
            free=_column_sums(self.store, "free"),
            unknown={q: n for q, n in sorted(self.pods_by_queue.items()) if not tree.usable(q)},
            # not copied (it costs the number of waiting gangs): the waiters are true until the book's
            # next snapshot, which is when the scheduler takes a new one
            groups=self.groups,
            planned=frozenset(planned),
            stuck=frozenset(stuck),
            idle=idle,
        )


# ================================================================= admission
def over_limit(snap: QueueSnapshot, queue: str) -> list[str]:
    """The queue and those of its ancestors whose allocated exceeds a limit on some resource."""
    if queue not in snap.tree.queues:
        return []
    out = []
    for name in snap.tree.ancestors(queue):
        q = snap.tree.queues[name]
        if any(
            (limit := q.resource(r).limit) is not None and snap.allocated[name][r] > limit for r in TRACKED
        ):
            out.append(name)
    return out


def under(snap: QueueSnapshot, queue: str | None, tops: Iterable[str]) -> bool:
    """Whether `queue` is one of `tops` or a descendant of one."""
    if queue is None or queue not in snap.tree.queues:
        return False
    return not set(snap.tree.ancestors(queue)).isdisjoint(tops)


def _within_share(snap: QueueSnapshot, queue: str, need: Mapping[str, int]) -> bool:
    alloc, fair = snap.allocated[queue], snap.fair_share[queue]
    return all(alloc[r] + need.get(r, 0) <= fair.get(r, 0) for r in TRACKED if need.get(r, 0) > 0)


def admission(
    snap: QueueSnapshot,
    queue: str,
    need: Mapping[str, int],
    who: GroupKey,
    *,
    what: str = "gang",
    fair_share: bool = True,
    credit: Mapping[str, int] | None = None,
) -> str | None:
    """Why a gang (`what` = "gang") or plain pod ("pod") of `queue` needing `need` must wait, or None.
    `fair_share=False`: the queue's existence and limits only (rules 1 and 2). `credit`: usage of
    `queue` that leaves it (and its ancestors) as the gang goes in (see the module docstring)."""
    need = _tracked(need)
    back = _tracked(credit or {})
    tree = snap.tree
    if queue in tree.errors:
        return f"queue {queue} cannot be used: {tree.errors[queue]}; fix the Queue object"
    if queue not in tree.queues:
        return (
            f"queue {queue} does not exist: create a Queue named {queue} (scheduling.run.ai/v2), "
            f"or name an existing queue in the workload's {keys.QUEUE} label"
        )
    if not tree.is_leaf(queue):
        kids = ", ".join(tree.children[queue])
        return f"queue {queue} has child queues ({kids}); only leaf queues take workloads: use one of them"
    for name in tree.ancestors(queue):
        q = tree.queues[name]
        for r in TRACKED:
            limit = q.resource(r).limit
            if limit is None or need[r] <= 0:
                continue
            used = max(0, snap.allocated[name][r] - back[r])
            if used + need[r] > limit:
                bad = (
                    f" (queue {name} is malformed: {tree.errors[name]}; what cannot be read admits nothing)"
                    if name in tree.errors
                    else ""
                )
                return (
                    f"queue {name}: {KAI_NAMES[r]} limit {amount_text(r, limit)}, "
                    f"in use {amount_text(r, used)}, {what} needs {amount_text(r, need[r])}{bad}"
                )
    if not fair_share:
        return None
    alloc = {r: max(0, v - back[r]) for r, v in snap.allocated[queue].items()}
    fair = snap.fair_share[queue]
    for r in TRACKED:
        if need[r] <= 0 or alloc[r] + need[r] <= fair.get(r, 0):
            continue
        for h in snap.waiters(r, besides=queue):
            if h.group == who:
                continue
            if not tree.is_leaf(h.queue) or not _within_share(snap, h.queue, h.need):
                continue
            if snap.free[r] >= need[r] + h.need[r]:
                continue  # room for both: no one is held
            if admission(snap, h.queue, h.need, h.group, fair_share=False) is not None:
                continue  # an ancestor's limit holds it: it could not use the room
            if h.lone and snap.idle is not None and snap.idle(h.group):
                continue  # no room for its pods where they may go, none being freed: it could not use it
            return (
                f"queue {queue} is at its fair share of {KAI_NAMES[r]} ({amount_text(r, alloc[r])} in use + "
                f"{amount_text(r, need[r])} needed > fair share {amount_text(r, fair.get(r, 0))}) while "
                f"{shown(h.group)} of queue {h.queue}, below its fair share, waits for the same capacity: "
                f"held so that queue {h.queue} gets its share first"
            )
    return None


def past_limit(snap: QueueSnapshot, queue: str) -> str | None:
    """Why `queue` or an ancestor uses more than its limit now (its held room included), or None. A
    plan admitted within the limits finds one past it when pods bound beside it meanwhile (a killed
    predecessor's bindings landing in the start-up fence) or a limit was lowered below it."""
    tree = snap.tree
    if queue not in tree.queues:
        return None
    for name in tree.ancestors(queue):
        for r in TRACKED:
            limit = tree.queues[name].resource(r).limit
            used = snap.allocated[name][r]
            if limit is not None and used > limit:
                return (
                    f"queue {name}: {KAI_NAMES[r]} limit {amount_text(r, limit)}, "
                    f"in use {amount_text(r, used)} with the plan's room"
                )
    return None


def _quantity(resource: str, units: int) -> str:
    return f"{units}m" if resource == "cpu" else str(units)


def status_of(snap: QueueSnapshot, name: str) -> dict[str, Any]:
    """The Queue's status fields KAI defines, `allocated` and `requested` (its descendants included),
    as Kubernetes quantities by resource name."""
    return {
        field: {r: _quantity(r, usage[name][r]) for r in TRACKED}
        for field, usage in (("allocated", snap.allocated), ("requested", snap.requested))
    }


def may_reclaim(snap: QueueSnapshot, queue: str, need: Mapping[str, int]) -> bool:
    """A gang of `queue` needing `need` that fits nowhere may reclaim: its queue is a leaf and stays
    within its fair share on every resource with it (KAI's fair-share reclaim), counting what its
    gangs preempting or reclaiming already will take."""
    if queue not in snap.tree.queues or queue in snap.tree.errors or not snap.tree.is_leaf(queue):
        return False
    need = _tracked(need)
    _add(need, snap.arriving.get(queue, {}))
    return _within_share(snap, queue, need)


def reclaimable(
    snap: QueueSnapshot,
    reclaimer: str,
    need: Mapping[str, int],
    freed_by_queue: Mapping[str, Mapping[str, int]],
) -> bool:
    """Whether evicting pods that free `freed_by_queue[q]` from each queue q, for a gang of `reclaimer`
    needing `need`, keeps the rules: each q is another queue, over its fair share on a resource it
    frees, and no ancestor of any q (q itself included) is taken below its quota on any resource it
    loses (a quota of -1 is never reclaimed from). Use is allocated - leaving: what earlier reclaims
    and preemptions are taking already is not taken again. An ancestor the reclaimer shares gets back
    what the gang takes, so it loses only what the gang does not make up."""
    tree = snap.tree
    if reclaimer not in tree.queues:
        return False
    mine = set(tree.ancestors(reclaimer))
    need = _tracked(need)
    lost: dict[str, dict[str, int]] = {}
    for victim_queue, freed in freed_by_queue.items():
        if victim_queue == reclaimer or victim_queue not in tree.queues:
            return False
        freed = _tracked(freed)
        use = _net(snap, victim_queue)
        fair = snap.fair_share[victim_queue]
        if not any(freed[r] > 0 and use[r] > fair.get(r, 0) for r in TRACKED):
            return False
        for ancestor in tree.ancestors(victim_queue):
            _add(lost.setdefault(ancestor, _tracked({})), freed)
    for name, freed in lost.items():
        use = _net(snap, name)
        for r in TRACKED:
            back = need[r] if name in mine else 0
            if freed[r] <= back:
                continue  # the reclaimer's gang makes up at least what leaves it
            quota = tree.queues[name].resource(r).quota
            if quota is None or use[r] - freed[r] + back < quota:
                return False
    return True


def _net(snap: QueueSnapshot, queue: str) -> dict[str, int]:
    """The queue's running use once what is leaving has gone (room held for its waiting gangs is not
    running work: a reclaim neither finds a queue over its share by it nor keeps it above quota)."""
    leaving = snap.leaving.get(queue, {})
    held = snap.held.get(queue, {})
    return {r: snap.allocated[queue][r] - leaving.get(r, 0) - held.get(r, 0) for r in TRACKED}


def describe(snap: QueueSnapshot, held: Mapping[GroupKey, tuple[str, str]]) -> list[dict[str, Any]]:
    """Every queue, for /debug/queues: spec in this project's units, usage, fair share, and the gangs
    held (`held`: gang -> (its queue, why))."""
    out = []
    for name in sorted({*snap.tree.queues, *snap.tree.errors}):
        error = {"error": snap.tree.errors[name]} if name in snap.tree.errors else {}
        if name not in snap.tree.queues:
            out.append({"queue": name, **error})
            continue
        q = snap.tree.queues[name]
        out.append(
            {
                "queue": name,
                **error,
                "parent": q.parent,
                "priority": q.priority,
                "leaf": snap.tree.is_leaf(name),
                "resources": {
                    KAI_NAMES[r]: {
                        "quota": q.resource(r).quota,
                        "limit": q.resource(r).limit,
                        "overQuotaWeight": float(q.resource(r).weight),
                        "allocated": snap.allocated[name][r],
                        "leaving": snap.leaving.get(name, {}).get(r, 0),
                        "requested": snap.requested[name][r],
                        "fairShare": snap.fair_share[name].get(r, 0),
                    }
                    for r in TRACKED
                },
                "held": {shown(g): why for g, (queue, why) in sorted(held.items()) if queue == name},
            }
        )
    return out
