"""CompositePodGroup trees (scheduling.k8s.io/v1alpha3, Kubernetes 1.37, gate CompositePodGroup) as
one gang.

Owns: finding the root CompositePodGroup above a PodGroup that names a parent, listing the tree below
it, and compiling that tree to the subgroup tree every source compiles to (extender.model.group), with
the rules of KEP-6012 and the 1.37 types:
- the whole tree is one gang, placed and bound together; a composite of `gang: {minGroupCount: N}` is
  ready when N of its direct children are (KAI's minSubGroup), a `basic` one when any one is (its
  children wait for no sibling); a leaf PodGroup's `gang.minCount` is its minMember (`basic`: 1);
- topology is resolved top-down: each node's `schedulingConstraints.topology[0].key` is its required
  level, inside the domain its parent's constraint chose;
- the root's priority (authoritative, unset 0, as kube-scheduler 1.37 ranks a tree by its topmost
  composite), priorityClassName and preemptionPolicy are the gang's;
- `disruptionMode: {all: {}}` anywhere in the tree disrupts the whole tree together (the gang has one
  mode, and the one that never leaves a part of an `all` subtree running is taken);
- a tree kube-scheduler marks Invalid is refused with why: a cycle, a PodGroup deeper than
  WorkloadMaxTreeDepth (4) levels from its root, nodes referencing more than one Workload, a name twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.grouping.base import GroupingError, ObjectLookup
from extender.grouping.owners import meta
from extender.model.group import Disruption, GroupSpec, Policy, Source, SubGroup, TopologyConstraint
from extender.model.keys import group_key

K8S_PODGROUP = ("scheduling.k8s.io", "PodGroup")
K8S_COMPOSITE = ("scheduling.k8s.io", "CompositePodGroup")
MAX_TREE_DEPTH = 4  # scheduling.k8s.io WorkloadMaxTreeDepth: the root at 0, a PodGroup at most at 3
PARENT_FIELD = "parentCompositePodGroupName"


def parent_name(obj: dict[str, Any]) -> str | None:
    spec = obj.get("spec")
    parent = spec.get(PARENT_FIELD) if isinstance(spec, dict) else None
    return str(parent) if parent else None


class TreeIncomplete(Exception):
    """The tree's groups are not all there yet (a composite with fewer children than its
    minGroupCount, or none): its pods wait, as kube-scheduler's would. The message says what for."""


class MissingComposite(Exception):
    """A CompositePodGroup on the way to the root does not exist (yet)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def root_of(podgroup: dict[str, Any], lookup: ObjectLookup) -> dict[str, Any]:
    """The root CompositePodGroup above `podgroup` (which names a parent). MissingComposite when one on
    the way is not there; GroupingError for a cycle or a tree deeper than MAX_TREE_DEPTH."""
    ns = str(meta(podgroup).get("namespace") or "default")
    seen: list[str] = []
    name = parent_name(podgroup)
    while name is not None:
        if name in seen:
            raise GroupingError(
                f"spec.{PARENT_FIELD}", f"CompositePodGroups {' -> '.join([*seen, name])} form a cycle"
            )
        seen.append(name)
        if len(seen) >= MAX_TREE_DEPTH:
            chain = " -> ".join(seen)
            raise GroupingError(
                f"spec.{PARENT_FIELD}",
                f"PodGroup {ns}/{meta(podgroup).get('name')} hangs {len(seen)} CompositePodGroups below its "
                f"root ({chain}); Kubernetes allows a tree of depth at most {MAX_TREE_DEPTH}",
            )
        obj = lookup.get(*K8S_COMPOSITE, ns, name)
        if obj is None:
            raise MissingComposite(name)
        parent = parent_name(obj)
        if parent is None:
            return obj
        name = parent
    raise GroupingError(f"spec.{PARENT_FIELD}", "names no CompositePodGroup")  # not reached: caller checks


def _policy(spec: dict[str, Any], what: str) -> tuple[str, int | None]:
    policy = spec.get("schedulingPolicy")
    if isinstance(policy, dict) and isinstance(policy.get("gang"), dict):
        gang = policy["gang"]
        count = gang.get("minGroupCount", gang.get("minCount"))
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise GroupingError(
                f"{what}.spec.schedulingPolicy.gang", f"needs a count of at least 1, got {count!r}"
            )
        return "gang", count
    if isinstance(policy, dict) and "basic" in policy:
        return "basic", None
    raise GroupingError(f"{what}.spec.schedulingPolicy", "must set basic: {} or gang: {...}")


def _topology(spec: dict[str, Any]) -> TopologyConstraint | None:
    constraints = spec.get("schedulingConstraints")
    levels = constraints.get("topology") if isinstance(constraints, dict) else None
    if isinstance(levels, list) and levels and isinstance(levels[0], dict) and levels[0].get("key"):
        return TopologyConstraint(required_level=str(levels[0]["key"]))
    return None


def _workload(obj: dict[str, Any]) -> str | None:
    ref = (obj.get("spec") or {}).get("workloadRef")
    return str(ref.get("workloadName")) if isinstance(ref, dict) and ref.get("workloadName") else None


def _is_all(spec: dict[str, Any]) -> bool:
    mode = spec.get("disruptionMode")
    return isinstance(mode, dict) and "all" in mode


@dataclasses.dataclass(frozen=True)
class TreeNode:
    """A group below the root: a CompositePodGroup (`composite`) or a leaf PodGroup."""

    parent: str  # the CompositePodGroup it names as its parent
    obj: dict[str, Any]
    composite: bool
    depth: int  # the root's children are at 1


def tree_nodes(root: dict[str, Any], lookup: ObjectLookup) -> list[TreeNode]:
    """The groups under the root CompositePodGroup `root`, breadth first (parents before children),
    each parent's by name. Listed one level past the deepest the API allows, so `tree_group` can
    refuse a tree that goes deeper; the one walk of the tree a derivation makes."""
    ns = str(meta(root).get("namespace") or "default")
    out: list[TreeNode] = []
    parents = [str(meta(root).get("name", ""))]
    for depth in range(1, MAX_TREE_DEPTH + 1):
        below: list[str] = []
        for parent in parents:
            kids = [
                *((o, True) for o in lookup.children(*K8S_COMPOSITE, ns, parent)),
                *((o, False) for o in lookup.children(*K8S_PODGROUP, ns, parent)),
            ]
            for obj, is_composite in sorted(kids, key=lambda k: str(meta(k[0]).get("name", ""))):
                out.append(TreeNode(parent, obj, is_composite, depth))
                if is_composite:
                    below.append(str(meta(obj).get("name", "")))
        parents = below
    return out


def tree_group(root: dict[str, Any], nodes: list[TreeNode]) -> GroupSpec:
    """The gang of the tree under the root CompositePodGroup `root`, whose groups are `nodes` (from
    `tree_nodes`). Raises GroupingError when the tree is one kube-scheduler would mark Invalid,
    TreeIncomplete while a composite has fewer child groups than its minGroupCount (or none)."""
    ns = str(meta(root).get("namespace") or "default")
    root_name = str(meta(root).get("name", ""))
    what = f"CompositePodGroup {ns}/{root_name}"
    spec = root.get("spec") if isinstance(root.get("spec"), dict) else {}
    root_policy, root_count = _policy(spec, what)
    kids_of: dict[str, list[TreeNode]] = {}
    for node in nodes:
        kids_of.setdefault(node.parent, []).append(node)
    workloads = {_workload(root)}
    subgroups: list[SubGroup] = []
    names = {root_name}
    any_all = _is_all(spec)
    # composites whose children come next, parents first: appended to while it is walked
    pending: list[tuple[str, str, int | None]] = [(root_name, root_policy, root_count)]
    for parent, policy_here, count_here in pending:
        kids = kids_of.get(parent, [])
        wanted = count_here if policy_here == "gang" and count_here else 1
        if len(kids) < wanted:
            raise TreeIncomplete(
                f"waiting for child groups of CompositePodGroup {ns}/{parent}: {len(kids)} exist, "
                f"minGroupCount {wanted}"
            )
        for node in kids:
            name = str(meta(node.obj).get("name", ""))
            kind = "CompositePodGroup" if node.composite else "PodGroup"
            if node.depth >= MAX_TREE_DEPTH:
                raise GroupingError(
                    f"{what}", f"{kind} {ns}/{name} is deeper than a tree of depth at most {MAX_TREE_DEPTH}"
                )
            if name in names:
                raise GroupingError(
                    f"{what}", f"the tree names {name!r} twice; its groups need distinct names"
                )
            names.add(name)
            workloads.add(_workload(node.obj))
            child_spec = node.obj.get("spec") if isinstance(node.obj.get("spec"), dict) else {}
            policy, count = _policy(child_spec, f"{kind} {ns}/{name}")
            any_all = any_all or _is_all(child_spec)
            quorum = count if policy == "gang" else 1
            subgroups.append(
                SubGroup(
                    name,
                    parent=None if parent == root_name else parent,
                    min_member=None if node.composite else quorum,
                    min_subgroup=quorum if node.composite else None,
                    topology=_topology(child_spec),
                )
            )
            if node.composite:
                pending.append((name, policy, count))
    if len(workloads) > 1:
        shown = ", ".join(sorted(str(w) for w in workloads))
        raise GroupingError(f"{what}", f"the tree's groups reference more than one Workload ({shown})")
    priority = spec.get("priority")
    preemption_policy = spec.get("preemptionPolicy")
    return GroupSpec(
        key=group_key(ns, root_name),
        source=Source.K8S_COMPOSITE,
        policy=Policy.GANG,
        min_subgroup=root_count if root_policy == "gang" else 1,
        topology=_topology(spec),
        subgroups=tuple(subgroups),
        priority_class=spec.get("priorityClassName") or None,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        preemption_policy=preemption_policy if isinstance(preemption_policy, str) else None,
        disruption=Disruption.ALL if any_all else Disruption.SINGLE,
        owner=what,
    )
