"""KAI queues: which queue a gang belongs to, what each queue uses, its fair share, and admission.

The scheduler asks `admission` before it plans a gang or passes a plain pod, and waits with the
reason it returns; a pod placed one by one has its queue's limits checked again at bind, since
kube-scheduler filters the next pod before the previous one's bind arrives. `admission`, `divide`
and `fair_shares` are pure functions over a `QueueSnapshot`; the `QueueBook` keeps the usage behind
a snapshot current from store events, so taking one costs the number of queues, not of pods.

Nothing is enforced until the cluster has at least one Queue object: a cluster without KAI queues
(or whose API server does not serve the Queue CRD) schedules exactly as it would without this module.

The queue of a gang is its KAI PodGroup's `spec.queue` (authoritative), else the `kai.scheduler/queue`
(or `project`) label of its workload or pod, else the configured default queue.

Accounting, per queue and resource (cpu, memory, nvidia.com/gpu):
- allocated = requests of bound, unfinished pods + capacity held for pods (a planned gang's members,
  a pod whose bind is in flight);
- requested = allocated + requests of live pending pods.
A queue's usage counts toward each of its ancestors. A pod of the default scheduler (the cluster's
other pods, which this service never places) counts only when it names a queue.

Fair share (KAI's division, docs/fairness/README.md), per resource, top-down: the cluster's
allocatable capacity is divided among the top-level queues, then each queue's share among its
children. At each level every queue first gets min(quota, requested, limit) (quotas beyond the
capacity are scaled down in proportion); what remains goes to queues that still want more, higher
`priority` first, in proportion to `overQuotaWeight` (a zero weight gets nothing over quota), never
past a queue's limit or its request. Exact fractions, then rounded down with the leftover units
given to the largest remainders (ties by name), so shares sum to what was divided.

Admission of a gang (or plain pod) of queue Q needing N waits when:
1. Q does not exist, is malformed, or has child queues (only leaf queues take workloads);
2. limit: Q's or any ancestor's allocated + N exceeds its limit on some resource;
3. fair-share hold: on some resource r, Q's allocated + N exceeds Q's fair share, while a ready,
   unplanned gang H of another queue P needs r, P's allocated + H's need stays within P's fair share
   on every resource H needs and within every limit of P and its ancestors, and the cluster's free r
   is short of N + H's need (they compete).
Why the hold cannot starve anyone: a gang that holds others is within its queue's share on every
resource, so it is itself never held; holds therefore never form a cycle, and each holder is
planned as soon as the capacity for it frees, since no over-share gang takes that capacity. A held
gang waits only while a within-share gang of another queue could use the same capacity: exactly the
order KAI's fair share asks for. The hold does not outlast its cause: the moment the holder is
planned, leaves or the free capacity covers both, the held gang is admitted.

Reclaim (KAI's fair-share reclaim, simplified to leaf queues): a gang that fits nowhere, of a queue
that stays within its fair share with it (`may_reclaim`), may evict whole gangs and plain pods of
other queues that are over their fair share on a resource the eviction frees, never taking such a
queue below its quota on any resource, all its victims together (`reclaimable`). The victims are
chosen, evicted and their room held by the gang-aware preemption (scheduling.preemptor), priority
playing no part: a preemption is within priorities, a reclaim between queues.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from extender.grouping import kai
from extender.grouping.owners import walk_owners
from extender.model import labels as keys
from extender.model.group import GroupSpec, MembershipState, Policy, Source
from extender.model.keys import GroupKey, PodKey, object_key
from extender.model.queue import (
    KAI_NAMES,
    QUEUE_API_GROUP,
    QUEUE_KIND,
    RESOURCES,
    Queue,
    QueueError,
    amount_text,
    parse_queue,
)
from extender.state.store import POD, ClusterStore, is_live, is_terminal


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

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)


def read_tree(objects: Iterable[Mapping[str, Any]]) -> QueueTree:
    """The queues of Queue objects; a malformed one, or one in a parent cycle, is an error, never raised.
    A queue whose parent does not exist is a top-level queue."""
    queues: dict[str, Queue] = {}
    errors: dict[str, str] = {}
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            q = parse_queue(obj)
        except QueueError as exc:
            errors[name or "?"] = str(exc)
            continue
        queues[q.name] = q
    for name in list(queues):
        seen = {name}
        parent = queues[name].parent
        while parent is not None and parent in queues:
            if parent in seen:
                errors[name] = f"spec.parentQueue: queue {name} is in a cycle of parent queues"
                break
            seen.add(parent)
            parent = queues[parent].parent
    for name in errors:
        queues.pop(name, None)
    children: dict[str | None, list[str]] = {}
    for q in sorted(queues.values(), key=lambda q: q.name):
        parent = q.parent if q.parent in queues else None
        children.setdefault(parent, []).append(q.name)
    return QueueTree(queues, errors, {k: tuple(v) for k, v in children.items()})


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
    """The gang's queue: the one it names, else `default`."""
    return named_queue(store, group, pod) or default


def _another_schedulers(pod: dict[str, Any]) -> bool:
    """Placed by the default scheduler (the cluster's other pods: system daemons, services), which
    this service never sees; such a pod counts toward a queue only when it names one."""
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler") == "default-scheduler"


# ================================================================= accounting
@dataclasses.dataclass(frozen=True)
class Waiter:
    """A gang (or pod) waiting unplanned: its queue and what its pending pods request."""

    group: GroupKey
    queue: str
    need: dict[str, int]


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
    groups: Mapping[GroupKey, _GroupTally] = dataclasses.field(default_factory=dict, repr=False)
    planned: frozenset[GroupKey] = frozenset()

    def waiters(self, resource: str, *, besides: str) -> Iterator[Waiter]:
        """Ready, unplanned gangs (and pods) of existing queues other than `besides` whose pending pods
        ask for `resource`, in the order the book first saw them. A generator: a fair-share hold stops
        at the first that qualifies, and the cheap tests come first."""
        for key, t in self.groups.items():
            if t.queue == besides or t.pending <= 0 or t.need.get(resource, 0) <= 0:
                continue
            if key in self.planned or t.queue not in self.tree.queues:
                continue
            if t.spec.policy is Policy.BASIC or t.spec.ready_leaves(t.live) is not None:
                yield Waiter(key, t.queue, dict(t.need))


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
    need: dict[str, int]
    group: GroupSpec | None
    leaf: str | None


@dataclasses.dataclass
class _GroupTally:
    queue: str
    spec: GroupSpec
    need: dict[str, int]  # of its pending pods
    live: dict[str | None, int]  # live pods per leaf, bound or not
    pending: int = 0


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

    def _regrouped(self, pod: PodKey) -> None:
        """A workload or group object the pod's membership read changed: its gang or queue may have."""
        if self.tracking:
            self._dirty.add(pod)

    def _forget(self) -> None:
        self.tracking = False
        self._shares, self._dirty, self._held = {}, set(), set()
        self._counted = False
        self.own_allocated, self.own_pending, self.groups, self.pods_by_queue = {}, {}, {}, {}

    def refresh(self) -> None:
        store = self.store
        if not self._counted:  # the first refresh since queues came into use counts every pod
            self._counted = True
            self._dirty |= set(store.pods)
        held = {pk for pk in store.reservations if pk in store.pods}
        self._dirty |= held ^ self._held
        self._held = held
        dirty, self._dirty = self._dirty, set()
        for pk in dirty:
            old = self._shares.pop(pk, None)
            if old is not None:
                self._count(old, -1)
            new = self._share_of(pk)
            if new is not None:
                self._shares[pk] = new
                self._count(new, 1)

    def _share_of(self, pk: PodKey) -> _PodShare | None:
        rec = self.store.pods.get(pk)
        if rec is None or is_terminal(rec.obj):
            return None
        m = self.store.membership(rec)
        group = m.group if m.state is MembershipState.MEMBER else None
        queue = named_queue(self.store, group, rec.obj)
        if queue is None:
            if _another_schedulers(rec.obj):
                return None
            queue = self.default_queue
        allocated = bool(rec.node_name) or pk in self._held
        return _PodShare(
            queue=queue,
            allocated=allocated,
            pending=not allocated and is_live(rec.obj),
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
        elif share.pending:
            _add(self.own_pending.setdefault(share.queue, {}), share.need, sign)
        if share.group is None or not (share.allocated or share.pending):
            return
        key = share.group.key
        tally = self.groups.get(key)
        if tally is None:
            tally = self.groups[key] = _GroupTally(share.queue, share.group, {}, {})
        tally.queue, tally.spec = share.queue, share.group  # the latest definition
        tally.live[share.leaf] = tally.live.get(share.leaf, 0) + sign
        if share.pending:
            tally.pending += sign
            _add(tally.need, share.need, sign)
        if not any(tally.live.values()):
            del self.groups[key]

    def snapshot(self, planned: Iterable[GroupKey]) -> QueueSnapshot | None:
        """Every queue's usage and fair share now; None when the cluster has no Queue objects (no
        queues in use: nothing is enforced). `planned`: gangs holding a plan (they wait for nothing)."""
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
        for queue in tree.queues:
            for ancestor in tree.ancestors(queue):
                _add(allocated[ancestor], self.own_allocated.get(queue, {}))
                _add(requested[ancestor], self.own_allocated.get(queue, {}))
                _add(requested[ancestor], self.own_pending.get(queue, {}))
        capacity = _column_sums(self.store, "allocatable")
        return QueueSnapshot(
            tree=tree,
            allocated=allocated,
            requested=requested,
            fair_share=fair_shares(tree, requested, capacity),
            capacity=capacity,
            free=_column_sums(self.store, "free"),
            unknown={q: n for q, n in sorted(self.pods_by_queue.items()) if q not in tree.queues},
            # not copied (it costs the number of waiting gangs): the waiters are true until the book's
            # next snapshot, which is when the scheduler takes a new one
            groups=self.groups,
            planned=frozenset(planned),
        )


# ================================================================= admission
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
) -> str | None:
    """Why a gang (`what` = "gang") or plain pod ("pod") of `queue` needing `need` must wait, or None.
    `fair_share=False`: the queue's existence and limits only (rules 1 and 2)."""
    need = _tracked(need)
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
            used = snap.allocated[name][r]
            if used + need[r] > limit:
                return (
                    f"queue {name}: {KAI_NAMES[r]} limit {amount_text(r, limit)}, "
                    f"in use {amount_text(r, used)}, {what} needs {amount_text(r, need[r])}"
                )
    if not fair_share:
        return None
    alloc, fair = snap.allocated[queue], snap.fair_share[queue]
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
            return (
                f"queue {queue} is at its fair share of {KAI_NAMES[r]} ({amount_text(r, alloc[r])} in use + "
                f"{amount_text(r, need[r])} needed > fair share {amount_text(r, fair.get(r, 0))}) while "
                f"{h.group} of queue {h.queue}, below its fair share, waits for the same capacity: held so "
                f"that queue {h.queue} gets its share first"
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
    within its fair share on every resource with it (KAI's fair-share reclaim)."""
    if queue not in snap.tree.queues or not snap.tree.is_leaf(queue):
        return False
    return _within_share(snap, queue, _tracked(need))


def reclaimable(snap: QueueSnapshot, reclaimer: str, victim_queue: str, freed: Mapping[str, int]) -> bool:
    """Whether evicting pods that free `freed` from `victim_queue` for a gang of `reclaimer` keeps the
    rules: another queue, over its fair share on a resource it frees, and never taken below its quota
    on any (a quota of -1 is never reclaimed from)."""
    if victim_queue == reclaimer or victim_queue not in snap.tree.queues:
        return False
    q = snap.tree.queues[victim_queue]
    alloc, fair = snap.allocated[victim_queue], snap.fair_share[victim_queue]
    freed = _tracked(freed)
    over = False
    for r in TRACKED:
        if freed[r] <= 0:
            continue
        quota = q.resource(r).quota
        if quota is None or alloc[r] - freed[r] < quota:
            return False
        over = over or alloc[r] > fair.get(r, 0)
    return over


def describe(snap: QueueSnapshot, held: Mapping[GroupKey, tuple[str, str]]) -> list[dict[str, Any]]:
    """Every queue, for /debug/queues: spec in this project's units, usage, fair share, and the gangs
    held (`held`: gang -> (its queue, why))."""
    out = []
    for name in sorted({*snap.tree.queues, *snap.tree.errors}):
        if name in snap.tree.errors:
            out.append({"queue": name, "error": snap.tree.errors[name]})
            continue
        q = snap.tree.queues[name]
        out.append(
            {
                "queue": name,
                "parent": q.parent,
                "priority": q.priority,
                "leaf": snap.tree.is_leaf(name),
                "resources": {
                    KAI_NAMES[r]: {
                        "quota": q.resource(r).quota,
                        "limit": q.resource(r).limit,
                        "overQuotaWeight": float(q.resource(r).weight),
                        "allocated": snap.allocated[name][r],
                        "requested": snap.requested[name][r],
                        "fairShare": snap.fair_share[name].get(r, 0),
                    }
                    for r in TRACKED
                },
                "held": {str(g): why for g, (queue, why) in sorted(held.items()) if queue == name},
            }
        )
    return out
