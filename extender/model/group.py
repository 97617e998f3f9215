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
from collections.abc import Mapping

from extender.model.keys import GroupKey


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
    subgroups: tuple[SubGroup, ...] = ()
    queue: str | None = None
    priority_class: str | None = None
    disruption: Disruption = Disruption.SINGLE
    resource_claims: tuple[ResourceClaimRef, ...] = ()
    owner: str | None = None  # "Kind namespace/name" of the workload it came from, for messages

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    def children(self, parent: str | None) -> tuple[SubGroup, ...]:
        return tuple(s for s in self.subgroups if s.parent == parent)

    def leaves(self) -> tuple[SubGroup, ...]:
        parents = {s.parent for s in self.subgroups}
        return tuple(s for s in self.subgroups if s.name not in parents)

    def subgroup(self, name: str) -> SubGroup | None:
        for s in self.subgroups:
            if s.name == name:
                return s
        return None

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
        """
        if not self.subgroups:
            return (None,) if pods_per_leaf.get(None, 0) >= self.leaf_quorum(None) else None
        ready: set[str] = set()

        def visit(node: SubGroup) -> bool:
            kids = self.children(node.name)
            if kids:
                n_ready = sum(visit(k) for k in kids)
                ok = n_ready >= _need(node.min_subgroup, len(kids))
            else:
                ok = pods_per_leaf.get(node.name, 0) >= (node.min_member or 0)
            if ok:
                ready.add(node.name)
            return ok

        top = self.children(None)
        if sum(visit(k) for k in top) < _need(self.min_subgroup, len(top)):
            return None
        by_name = {s.name: s for s in self.subgroups}

        def counts(leaf: SubGroup) -> bool:
            node: SubGroup | None = leaf
            while node is not None:
                if node.name not in ready:
                    return False
                node = by_name.get(node.parent) if node.parent is not None else None
            return True

        return tuple(leaf.name for leaf in self.leaves() if counts(leaf))


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
