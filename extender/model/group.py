"""The gang: a tree of subgroups with quorums and topology constraints, and a pod's place in it.

This is the one shape every source of grouping compiles to (KAI PodGroups, KAI auto-grouping of
Jobs, JobSets and PyTorchJobs, scheduling.k8s.io PodGroups, JobSet `spec.scheduling`), and the
one shape the gang cache and the placement core consume.

Quorum rules (KAI's, which subsume the flat scheduling.k8s.io `gang.minCount`):
1. A leaf is ready when at least `min_member` of its pods exist.
2. An inner node (or the root, when it has subgroups) is ready when at least `min_subgroup` of its
   direct children are ready; `min_subgroup=None` means all children.
3. A root without subgroups is one leaf: `min_member` pods (None means 1).
Policy BASIC means no gang at all: pods are placed one by one (a constraint still holds).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping

from extender.model.keys import GroupKey

MAX_SUBGROUPS = 10_000
"""Subgroups a PodGroup or a JobSet's derived gang may have (KAI's cap on generated segments; a
derived PodGroup of that many still fits an API object). A larger tree is refused where it is read,
before it is built. A PyTorchJob keeps KAI's own cap: 10,000 segments, plus master and worker."""
MAX_SUBGROUP_DEPTH = 32
"""Levels of subgroups below the root (topology hierarchies have a handful)."""


class Policy(enum.Enum):
    GANG = "gang"
    BASIC = "basic"


class Disruption(enum.Enum):
    SINGLE = "single"  # pods may be disrupted one at a time
    ALL = "all"  # the whole gang is disrupted (preempted) together


class Source(enum.Enum):
    """Where a group's definition comes from; decides naming and what `podgroups` prints."""

    SINGLE_POD = "single-pod"  # a pod with no gang: a group of one
    KAI_DERIVED = "kai-derived"  # KAI podgrouper semantics over the pod's workload
    KAI_PODGROUP = "kai-podgroup"  # an external scheduling.run.ai/v2alpha2 PodGroup
    K8S_PODGROUP = "k8s-podgroup"  # a scheduling.k8s.io PodGroup object
    K8S_COMPOSITE = "k8s-composite"  # a scheduling.k8s.io CompositePodGroup tree (1.37), keyed by its root
    JOBSET_SCHEDULING = "jobset-scheduling"  # compiled from JobSet spec.scheduling


@dataclasses.dataclass(frozen=True)
class TopologyConstraint:
    """Where a (sub)group must or should sit.

    `topology` names a KAI Topology object whose levels give the label keys; the levels here are
    then a level's nodeLabel or alias. With `topology=None` the levels are node label keys
    themselves (scheduling.k8s.io `schedulingConstraints.topology[].key` is a required level).
    """

    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None

    def is_empty(self) -> bool:
        return self.required_level is None and self.preferred_level is None


@dataclasses.dataclass(frozen=True)
class ResourceClaimRef:
    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


@dataclasses.dataclass(frozen=True)
class SubGroup:
    """A node of the tree below the root. Pods attach to leaves only."""

    name: str
    parent: str | None = None  # None: a direct child of the root
    min_member: int | None = None  # leaves
    min_subgroup: int | None = None  # inner nodes; None = all children
    topology: TopologyConstraint | None = None


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One gang. `key` is "namespace/name" of the group (a PodGroup's name where one exists)."""

    key: GroupKey
    source: Source
    policy: Policy = Policy.GANG
    min_member: int | None = None  # root quorum when there are no subgroups (None = 1)
    min_subgroup: int | None = None  # root quorum over its direct children (None = all)
    topology: TopologyConstraint | None = None
    subgroups: tuple[SubGroup, ...] = ()  # parents before their children
    queue: str | None = None
    priority_class: str | None = None
    priority: int | None = None
    """A scheduling.k8s.io PodGroup's own `spec.priority` (1.37, filled by admission from its class):
    authoritative for every member in preemption, as victim and as preemptor. None: each pod's own."""
    preemption_policy: str | None = None  # its `spec.preemptionPolicy`; "Never": the gang never preempts
    disruption: Disruption = Disruption.SINGLE
    resource_claims: tuple[ResourceClaimRef, ...] = ()
    owner: str | None = None  # "Kind namespace/name" of the workload it came from, for messages

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    # The tree's indices, built once per spec (a spec is shared by every member of its gang):
    # `children`, `leaves` and `subgroup` are asked per member and per call, and each would otherwise
    # scan every subgroup. `cached_property` writes the instance dict, which a frozen dataclass allows.
    @functools.cached_property
    def _by_name(self) -> dict[str, SubGroup]:
        return {s.name: s for s in self.subgroups}

    @functools.cached_property
    def _children(self) -> dict[str | None, tuple[SubGroup, ...]]:
        out: dict[str | None, list[SubGroup]] = {}
        for s in self.subgroups:
            out.setdefault(s.parent, []).append(s)
        return {parent: tuple(kids) for parent, kids in out.items()}

    @functools.cached_property
    def _leaves(self) -> tuple[SubGroup, ...]:
        parents = self._children
        return tuple(s for s in self.subgroups if s.name not in parents)

    @functools.cached_property
    def leaf_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self._leaves)

    def children(self, parent: str | None) -> tuple[SubGroup, ...]:
        return self._children.get(parent, ())

    def leaves(self) -> tuple[SubGroup, ...]:
        return self._leaves

    def subgroup(self, name: str) -> SubGroup | None:
        return self._by_name.get(name)

    def is_gang(self) -> bool:
        return self.policy is Policy.GANG and self.quorum_upper_bound() > 1

    def leaf_quorum(self, leaf: str | None) -> int:
        """Pods a leaf needs (None: the root of a group without subgroups, whose default is 1)."""
        if leaf is None:
            return self.min_member if self.min_member is not None else 1
        sg = self.subgroup(leaf)
        return (sg.min_member or 0) if sg else 0

    def quorum_upper_bound(self) -> int:
        """Pods needed when every leaf that counts is required (ignoring minSubGroup < all)."""
        if not self.subgroups:
            return self.leaf_quorum(None)
        return sum(leaf.min_member or 0 for leaf in self.leaves())

    def ready_leaves(self, pods_per_leaf: Mapping[str | None, int]) -> tuple[str | None, ...] | None:
        """Leaves whose quorum counts once the gang is ready, or None while it is not ready.

        `pods_per_leaf` maps a leaf name (None for a root without subgroups) to the number of
        live, non-gated pods attached to it. A ready leaf under a parent that is not ready
        (too few ready siblings) does not count.

        Iterative and linear in the subgroups: no tree, however deep, costs stack or a scan per node.
        """
        if not self.subgroups:
            return (None,) if pods_per_leaf.get(None, 0) >= self.leaf_quorum(None) else None
        children = self._children
        # parents before children (depth-first from the root), then decided children first
        order: list[SubGroup] = []
        stack = list(children.get(None, ()))
        seen: set[str] = set()
        while stack:
            node = stack.pop()
            if node.name in seen:  # a malformed tree (grouping refuses these): never loop
                continue
            seen.add(node.name)
            order.append(node)
            stack.extend(children.get(node.name, ()))
        ready: set[str] = set()
        for node in reversed(order):
            kids = children.get(node.name, ())
            if kids:
                n_ready = sum(1 for k in kids if k.name in ready)
                ok = n_ready >= _need(node.min_subgroup, len(kids))
            else:
                ok = pods_per_leaf.get(node.name, 0) >= (node.min_member or 0)
            if ok:
                ready.add(node.name)
        top = children.get(None, ())
        if sum(1 for k in top if k.name in ready) < _need(self.min_subgroup, len(top)):
            return None
        # a leaf counts when it and every ancestor are ready: mark down from the root
        counted: set[str] = set()
        for node in order:  # parents come before their children
            if node.name in ready and (node.parent is None or node.parent in counted):
                counted.add(node.name)
        return tuple(leaf.name for leaf in self.leaves() if leaf.name in counted)


def _need(min_subgroup: int | None, n_children: int) -> int:
    return n_children if min_subgroup is None else min(min_subgroup, n_children)


class MembershipState(enum.Enum):
    """What grouping says about one pod."""

    MEMBER = "member"  # the pod belongs to `group`, leaf `subgroup`
    GROUP_MISSING = "group-missing"  # names a group object that does not exist yet: wait silently
    INVALID_SUBGROUP = "invalid-subgroup"  # names a subgroup its group lacks: only this pod is rejected
    INVALID = "invalid"  # the workload is malformed; `message` names the field


@dataclasses.dataclass(frozen=True)
class Membership:
    state: MembershipState
    group: GroupSpec | None = None
    subgroup: str | None = None  # leaf name; None for a root without subgroups
    message: str = ""
