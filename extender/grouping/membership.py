"""Which gang a pod belongs to, and which gangs a workload yields.

Precedence for a pod (first that applies wins):
1. External KAI PodGroup: `kai.scheduler/skip-podgrouper: "true"` on the pod or any readable
   owner, or an ownerless pod that already carries `pod-group-name`. The pod joins the
   `scheduling.run.ai` PodGroup its `pod-group-name` annotation names (missing: GROUP_MISSING, wait
   silently), at the leaf its `kai.scheduler/subgroup-name` label names (unknown: INVALID_SUBGROUP,
   only this pod is rejected). A skipping pod without `pod-group-name` falls through to 2. A
   PodGroup derived for a workload (ours or KAI's podgrouper's, `kai.derived_for`) takes only that
   workload's pods: any other pod naming it is INVALID.
2. `spec.schedulingGroup.podGroupName`: the scheduling.k8s.io PodGroup object of that name (any of
   the v1alpha2/v1alpha3/v1beta1 shapes). When it does not exist yet but the pod's JobSet has
   `spec.scheduling`, the group compiled from the JobSet (same name); otherwise GROUP_MISSING.
   Except the Job controller's default (1.37, WorkloadWithJob): a basic PodGroup it made for a Job
   that asked for nothing (no `spec.scheduling`, no delegation annotation) says no more than "pod by
   pod", so the pod falls through to 3 and a KAI-annotated Job keeps its gang. A PodGroup that names
   a parent CompositePodGroup (1.37) makes the pod a member of the whole tree under its root, at the
   leaf its PodGroup is (extender.grouping.composite).
3. The top owner's kind: a JobSet with `spec.scheduling` -> its compiled group (GROUP_MISSING while
   suspended); a JobSet without it, a batch Job, a PyTorchJob -> KAI's derived group. An owner of
   one of those kinds that cannot be read (not seen yet, or deleted with its pods still going): a
   pod naming a KAI PodGroup in `pod-group-name` joins it as in 1 (KAI's scheduler keeps it there;
   its podgrouper cannot rewrite what it cannot read); any other pod waits (GROUP_MISSING), since
   what the owner would make of it is unknown and, placed alone, it could be a gang's member.
4. Anything else (plain pods, owners of other kinds, read or not): a group of one.
A malformed workload yields INVALID with a message naming the field; nothing here raises.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar, cast

from extender.grouping import composite, kai
from extender.grouping.base import GroupingError, ListLookup, ObjectLookup, named_when_malformed, version_of
from extender.grouping.jobset_scheduling import (
    SCHEDULING_API_VERSION,
    SCHEDULING_API_VERSIONS,
    JobSetCompilation,
    compile_jobset,
    has_scheduling,
    is_suspended,
    spec_group,
)
from extender.grouping.owners import (
    OwnerChain,
    annotations,
    controller_ref,
    kind_of,
    labels,
    meta,
    walk_owners,
)
from extender.model import labels as keys
from extender.model.group import GroupSpec, Membership, MembershipState, Source
from extender.model.keys import api_group, group_key, single_pod_key

T = TypeVar("T")
K8S_PODGROUP = ("scheduling.k8s.io", "PodGroup")
K8S_WORKLOAD = ("scheduling.k8s.io", "Workload")
POD = ("", "Pod")


def invalid_subgroup_message(subgroup: str, group: GroupSpec) -> str:
    return f'Pod references subgroup "{subgroup}", which does not exist in PodGroup {group.key}'


def _namespace(obj: dict[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "default")


def single_pod_group(pod: dict[str, Any]) -> GroupSpec:
    ns, name = _namespace(pod), str(meta(pod).get("name", ""))
    return GroupSpec(
        key=single_pod_key(ns, name),
        source=Source.SINGLE_POD,
        min_member=1,
        priority_class=((pod.get("spec") or {}).get("priorityClassName") or None),
        owner=f"Pod {ns}/{name}",
    )


DEFAULT_SUBGROUP = "default"


WORKLOAD_KINDS = frozenset({kai.JOB, kai.JOBSET, kai.PYTORCHJOB})
"""The owner kinds a gang is derived from (rule 3): a pod whose owner of one of them is missing waits."""


def _missing_workload(chain: OwnerChain, lookup: ObjectLookup) -> str | None:
    """`Kind ns/name` of the owner of a WORKLOAD_KINDS kind the walk could not read, of a kind the
    lookup holds every object of (a kind it does not list says nothing by its absence), else None."""
    ref = chain.missing
    if ref is None:
        return None
    kind = (api_group(str(ref.get("apiVersion", ""))), str(ref.get("kind", "")))
    if kind not in WORKLOAD_KINDS or not lists(lookup, kind):
        return None
    return f"{ref.get('kind', '')} {_namespace(chain.pod)}/{ref.get('name', '')}"


def lists(lookup: ObjectLookup, kind: tuple[str, str]) -> bool:
    """Whether `lookup` holds every object of `kind`, so that one absent from it does not exist (or
    was not seen yet). A lookup that can tell has `lists(group, kind)`; any other holds them all."""
    fn = getattr(lookup, "lists", None)
    return True if fn is None else bool(fn(*kind))


def _waiting_for(missing: str) -> Membership:
    return Membership(
        state=MembershipState.GROUP_MISSING,
        message=f"waiting for its owner {missing} to be seen (not in this scheduler's cache: created a "
        "moment ago, or deleted, its pods going with it)",
    )


def _same_object(ref: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two references name one object: by uid when both carry one, else by kind and name."""
    if ref.get("uid") and other.get("uid"):
        return ref.get("uid") == other.get("uid")
    return (ref.get("kind"), ref.get("name")) == (other.get("kind"), other.get("name"))


def _made_by_the_missing(obj: dict[str, Any], chain: OwnerChain) -> bool:
    """Whether `obj`'s controller is the owner the pod's walk could not read."""
    ref, missing = controller_ref(obj), chain.missing
    return ref is not None and missing is not None and _same_object(ref, missing)


def is_single_pod(pod: dict[str, Any], lookup: ObjectLookup) -> bool:
    """Whether the pod is surely a group of one (rule 4): no grouping annotation, no scheduling group
    and no readable owner. At most one lookup, so a cache can tell its plain pods (most of a cluster)
    apart without deriving a membership for each; False when unsure (derive_membership decides)."""
    spec = pod.get("spec")
    if spec is not None and not isinstance(spec, dict):
        return False
    if spec and spec.get("schedulingGroup") is not None:
        return False
    if pod.get("kind") == kai.JOBSET[1] and kind_of(pod) == kai.JOBSET:
        return False
    m = pod.get("metadata")
    if not isinstance(m, dict):
        m = {}
    notes = m.get("annotations")
    if notes and (
        not isinstance(notes, dict) or keys.POD_GROUP_NAME in notes or keys.SKIP_PODGROUPER in notes
    ):
        return False
    if not m.get("ownerReferences"):
        return True
    ref = controller_ref(pod)
    if ref is None:
        return True
    kind = (api_group(str(ref.get("apiVersion", ""))), str(ref.get("kind", "")))
    found = lookup.get(*kind, m.get("namespace"), str(ref.get("name", "")))
    # a workload kind missing from the cache is unsure: it waits (derive_membership says why)
    return found is None and not (kind in WORKLOAD_KINDS and lists(lookup, kind))


def derive_membership(pod: dict, lookup: ObjectLookup) -> Membership:
    """The pod's gang and leaf. Pure; never raises."""
    try:
        return _derive(pod, lookup)
    except GroupingError as err:
        return Membership(state=MembershipState.INVALID, message=str(err))
    except (TypeError, AttributeError, KeyError, ValueError) as err:
        # a shape we did not anticipate: reject this pod with a message rather than crash the caller
        return Membership(state=MembershipState.INVALID, message=f"malformed object: {err!r}")


def _derive(pod: dict[str, Any], lookup: ObjectLookup) -> Membership:
    if is_single_pod(pod, lookup):
        return Membership(state=MembershipState.MEMBER, group=single_pod_group(pod))
    chain = walk_owners(pod, lookup)
    ns = _namespace(pod)

    # 1. external KAI PodGroup
    pg_name = annotations(pod).get(keys.POD_GROUP_NAME)
    skipping = any(kai.is_skip_podgrouper(o) for o in (pod, *chain.owners))
    ownerless = not (meta(pod).get("ownerReferences") or [])
    if pg_name and (skipping or ownerless):
        return _external_kai(chain, ns, str(pg_name), lookup)

    # 2. scheduling.k8s.io PodGroup named by the pod
    sg = (pod.get("spec") or {}).get("schedulingGroup")
    k8s_name = sg.get("podGroupName") if isinstance(sg, dict) else None
    obj = lookup.get(*K8S_PODGROUP, ns, str(k8s_name)) if k8s_name else None
    if obj is not None and composite.parent_name(obj) is not None:
        return _composite_member(obj, ns, lookup)
    missing = _missing_workload(chain, lookup)
    if obj is not None and missing is not None and _made_by_the_missing(obj, chain) and _basic(obj, lookup):
        # the Job controller's basic PodGroup, the Job not readable: whether the pod is placed pod by
        # pod depends on that Job (its KAI annotations make it a gang): it waits
        return _waiting_for(missing)
    if obj is not None and not _job_default_podgroup(obj, chain, lookup):
        return Membership(state=MembershipState.MEMBER, group=k8s_group(obj, lookup))
    if k8s_name and obj is None:
        if kind_of(chain.top) == kai.JOBSET and is_suspended(chain.top):
            # the controller deletes the PodGroups of a suspended JobSet; nothing to schedule
            return Membership(
                state=MembershipState.GROUP_MISSING,
                message=f"JobSet {ns}/{meta(chain.top).get('name')} is suspended: it has no PodGroups",
            )
        compiled = _jobset_compiled(chain, lookup)
        if compiled is not None and compiled.key == group_key(ns, str(k8s_name)):
            return Membership(state=MembershipState.MEMBER, group=compiled)
        return Membership(
            state=MembershipState.GROUP_MISSING,
            message=f"waiting for PodGroup {ns}/{k8s_name} (scheduling.k8s.io) to exist",
        )

    if missing is not None:
        # a workload that makes gangs, not in the cache: not seen yet (its pods' watch event came
        # first), or deleted, its pods being collected. Whether it skips the podgrouper is unknown: a
        # pod naming a PodGroup someone else made stays in it (as KAI's scheduler keeps it, its
        # podgrouper unable to rewrite it), and so does a bound one (it runs in that gang and
        # queue until the collector deletes it); a pending one naming the PodGroup made for that
        # workload (KAI's podgrouper's) waits as any other, since the gang is derived from the
        # workload once it is seen, under the same key, and the PodGroup may say otherwise (a
        # quorum, a queue) meanwhile; placed alone it could be a gang's member bound early
        named = lookup.get(*kai.KAI_PODGROUP, ns, str(pg_name)) if pg_name else None
        made_for_it = named is not None and _made_by_the_missing(named, chain)
        if pg_name and (not made_for_it or (pod.get("spec") or {}).get("nodeName")):
            return _external_kai(chain, ns, str(pg_name), lookup)
        return _waiting_for(missing)

    if skipping:
        # skip-podgrouper: no group is derived for this workload; without a PodGroup to join the
        # pod waits, as KAI leaves it unscheduled
        return Membership(
            state=MembershipState.GROUP_MISSING,
            message=f"{keys.SKIP_PODGROUPER} is set but the pod has no {keys.POD_GROUP_NAME} annotation: "
            "it waits for a PodGroup to name",
        )

    # 3. the top owner's kind
    top = chain.top
    if kind_of(top) == kai.JOBSET and has_scheduling(top):
        if is_suspended(top):
            return Membership(
                state=MembershipState.GROUP_MISSING,
                message=f"JobSet {ns}/{meta(top).get('name')} is suspended: it has no PodGroups",
            )
        compiled = _jobset_compiled(chain, lookup)
        return Membership(state=MembershipState.MEMBER, group=compiled)
    if top is not pod:
        group = _derived_cached(top, chain.owners, pod, lookup)
        if group is not None:
            leaf = kai.leaf_for_pod(group, top, (pod, *chain.owners))
            return Membership(state=MembershipState.MEMBER, group=group, subgroup=leaf)

    # 4. a group of one
    return Membership(state=MembershipState.MEMBER, group=single_pod_group(pod))


def _composite_member(podgroup: dict[str, Any], ns: str, lookup: ObjectLookup) -> Membership:
    """A pod of a PodGroup in a 1.37 CompositePodGroup tree: a member of the whole tree's gang, at the
    leaf its PodGroup is. The tree is compiled once per version of its root and its nodes."""
    try:
        root = composite.root_of(podgroup, lookup)
    except composite.MissingComposite as missing:
        return Membership(
            state=MembershipState.GROUP_MISSING,
            message=f"waiting for CompositePodGroup {ns}/{missing.name} (scheduling.k8s.io) to exist",
        )
    nodes = composite.tree_nodes(root, lookup)
    try:
        group = _versioned(
            "composite",
            root,
            _tree_versions(nodes, lookup),
            lambda: composite.tree_group(root, nodes),
            lookup,
        )
    except composite.TreeIncomplete as incomplete:
        return Membership(state=MembershipState.GROUP_MISSING, message=str(incomplete))
    return Membership(state=MembershipState.MEMBER, group=group, subgroup=str(meta(podgroup).get("name", "")))


def _tree_versions(nodes: list[composite.TreeNode], lookup: ObjectLookup) -> tuple[Any, ...] | None:
    """What identifies the tree beyond its root: each node's name and version (so a node added, gone
    or edited builds it again); None when the lookup has no versions."""
    out: list[Any] = []
    for node in nodes:
        version = version_of(lookup, node.obj)
        if version is None:
            return None
        out.append((node.composite, meta(node.obj).get("name"), version))
    return tuple(out)


def has_native_scheduling(job: dict[str, Any]) -> bool:
    """Whether a Job asks the Workload API for its scheduling (1.37): `spec.scheduling`, a parent's
    delegation annotation, or a pod template already naming a PodGroup. Such a Job's group is the
    scheduling.k8s.io PodGroup, never one derived from KAI's annotations."""
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    if spec.get("scheduling") is not None or keys.GROUP_TEMPLATE_NAME in annotations(job):
        return True
    pod_spec = (
        ((spec.get("template") or {}).get("spec") or {}) if isinstance(spec.get("template"), dict) else {}
    )
    return isinstance(pod_spec, dict) and bool(pod_spec.get("schedulingGroup"))


def _job_default_podgroup(obj: dict[str, Any], chain: OwnerChain, lookup: ObjectLookup) -> bool:
    """Whether `obj` is the basic PodGroup the Job controller makes for every new Job when
    WorkloadWithJob is on (its controller the pod's Job, which asked for no scheduling)."""
    ref = controller_ref(obj)
    if (
        ref is None
        or not chain.owners
        or (api_group(str(ref.get("apiVersion", ""))), ref.get("kind")) != kai.JOB
    ):
        return False
    job = chain.owners[0]
    if kind_of(job) != kai.JOB or meta(job).get("name") != ref.get("name"):
        return False
    if has_native_scheduling(job):
        return False
    return _basic(obj, lookup)


def _basic(obj: dict[str, Any], lookup: ObjectLookup) -> bool:
    """Whether the scheduling.k8s.io PodGroup `obj` (or its Workload's template) asks only for basic
    scheduling: pod by pod."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    policy = spec.get("schedulingPolicy")
    if not isinstance(policy, dict):
        template = _referenced_template(spec, _namespace(obj), lookup)
        policy = (template or {}).get("schedulingPolicy")
    return isinstance(policy, dict) and "basic" in policy and "gang" not in policy


def _jobset_compiled(chain: OwnerChain, lookup: ObjectLookup) -> GroupSpec | None:
    """The compiled spec.scheduling group of a JobSet pod, or None when the top owner is not such a
    JobSet. Raises GroupingError for an invalid spec or a pod that lacks the JobSet labels."""
    top = chain.top
    if kind_of(top) != kai.JOBSET or not has_scheduling(top):
        return None
    compilation = _compile_cached(top, lookup)
    rj = index = None
    for obj in (chain.pod, *chain.owners):
        rj = rj or labels(obj).get(keys.REPLICATED_JOB_NAME)
        index = index if index is not None else labels(obj).get(keys.JOB_INDEX)
    if rj is None or index is None:
        raise GroupingError(
            f"metadata.labels[{keys.REPLICATED_JOB_NAME!r}]",
            f"a JobSet pod needs labels {keys.REPLICATED_JOB_NAME} and {keys.JOB_INDEX}",
        )
    try:
        key = compilation.group_of(str(rj), int(index))
    except (KeyError, ValueError):
        raise GroupingError(
            f"metadata.labels[{keys.REPLICATED_JOB_NAME!r}]",
            f"replicatedJob {rj!r} job {index!r} is not part of JobSet {top['metadata'].get('name')}",
        ) from None
    return next(g for g in compilation.groups if g.key == key)


def _compile_cached(jobset: dict[str, Any], lookup: ObjectLookup) -> JobSetCompilation:
    """compile_jobset, once per JobSet version: every pod of a 4096-pod JobSet asks for the same one."""
    return _versioned("jobset", jobset, None, lambda: compile_jobset(jobset), lookup)


_KEPT: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_KEPT_WEIGHT = 200_000
"""Subgroups the kept trees hold, all together (the least recently asked go first): a gang's pods
hold their own tree, so this only bounds what workloads whose pods are gone keep."""
_kept_weight = 0


def _weight(found: Any) -> int:
    return 1 + (len(found.subgroups) if isinstance(found, GroupSpec) else 0)


def _versioned(tag: str, obj: dict[str, Any], extra: Any, build: Callable[[], T], lookup: ObjectLookup) -> T:
    """build(), once per version of `obj` and `extra`: every pod of a workload asks for the same tree,
    and building it costs the workload's size. The version is what the lookup says identifies what
    grouping reads of the object (`grouping_version`: the cluster cache's fingerprint of its spec,
    uid, labels, annotations and owners), so a status update, which only moves the
    resourceVersion, keeps the tree, and every pod of the gang shares one. An invalid one is kept
    too (its field and message), so each of its pods is refused without building it again. A lookup
    without versions (a manifest file) builds each time."""
    global _kept_weight
    version = version_of(lookup, obj)
    if version is None:
        return build()
    m = meta(obj)
    key = (tag, obj.get("apiVersion"), obj.get("kind"), m.get("namespace"), m.get("name"), version, extra)
    if key in _KEPT:
        _KEPT.move_to_end(key)
        found = _KEPT[key]
    else:
        try:
            found = build()
        except GroupingError as err:
            found = _Invalid(err.field, err.message)
        _KEPT[key] = found
        _kept_weight += _weight(found)
        while _kept_weight > _KEPT_WEIGHT and len(_KEPT) > 1:
            _kept_weight -= _weight(_KEPT.popitem(last=False)[1])
    if isinstance(found, _Invalid):
        raise GroupingError(found.field, found.message)
    return found


@dataclasses.dataclass(frozen=True)
class _Invalid:
    """A kept refusal: the field and message of the GroupingError that building raised."""

    field: str
    message: str


def _derived_cached(
    top: dict[str, Any], owners: tuple[dict[str, Any], ...], pod: dict[str, Any], lookup: ObjectLookup
) -> GroupSpec | None:
    """kai.derive_group, once per version of the top owner: the tree depends on it alone, and a pod
    adds only its queue and priority class (the same for a workload's pods, or a few variants)."""
    extra = (kai.resolve_queue(top, pod), kai.resolve_priority_class(owners, pod))
    return _versioned("kai", top, extra, lambda: kai.derive_group(top, owners=owners, pod=pod), lookup)


def _external_kai(chain: OwnerChain, ns: str, pg_name: str, lookup: ObjectLookup) -> Membership:
    pod = chain.pod
    obj = lookup.get(*kai.KAI_PODGROUP, ns, pg_name)
    if obj is None:
        return Membership(
            state=MembershipState.GROUP_MISSING, message=f"waiting for PodGroup {ns}/{pg_name} to exist"
        )
    workload = kai.derived_for(obj)
    if workload is not None and not _owned_by(chain, workload):
        missing = _missing_workload(chain, lookup)
        if missing is not None:
            # derived for a workload above the owner the walk could not read (a JobSet's PodGroup,
            # its Job not seen yet): whether the pod is part of it is told once that owner is
            return _waiting_for(missing)
        # the gang of a PodGroup derived for a workload is that workload's pods (its key is theirs):
        # a pod of anything else joining it would make up that workload's quorum
        what = f"{workload.get('kind', '')} {ns}/{workload.get('name', '')}"
        return Membership(
            state=MembershipState.INVALID,
            message=f"PodGroup {ns}/{pg_name} (named by {keys.POD_GROUP_NAME}) is the one derived for "
            f"{what}, and pod {ns}/{meta(pod).get('name', '')} is not part of it: create a PodGroup of "
            f"your own for pods of several workloads to share, and name it in {keys.POD_GROUP_NAME}",
        )
    group = cast(GroupSpec, _versioned("kai-podgroup", obj, None, lambda: kai.external_group(obj), lookup))
    # KAI: a pod without the label belongs to the subgroup "default"; a PodGroup without subgroups
    # is one pod set of that name; only leaves take pods; any other name is the contract's error
    wanted = labels(pod).get(keys.SUBGROUP_NAME) or DEFAULT_SUBGROUP
    if not group.subgroups:
        if wanted == DEFAULT_SUBGROUP:
            return Membership(state=MembershipState.MEMBER, group=group)
    elif wanted in group.leaf_names:
        return Membership(state=MembershipState.MEMBER, group=group, subgroup=wanted)
    return Membership(
        state=MembershipState.INVALID_SUBGROUP, group=group, message=invalid_subgroup_message(wanted, group)
    )


def _owned_by(chain: OwnerChain, ref: dict[str, Any]) -> bool:
    """Whether the object `ref` names is the pod itself or one of its owners (one the walk could not
    read counts by its reference)."""
    uid = ref.get("uid")
    if chain.missing is not None and _same_object(ref, chain.missing):
        return True
    for obj in (chain.pod, *chain.owners):
        if uid:
            if meta(obj).get("uid") == uid:
                return True
        elif obj.get("kind") == ref.get("kind") and meta(obj).get("name") == ref.get("name"):
            return True
    return False


def k8s_group(obj: dict[str, Any], lookup: ObjectLookup) -> GroupSpec:
    """A scheduling.k8s.io PodGroup object as a group. Its policy is read from the object, else from
    the Workload template it references (v1alpha3/v1beta1 `workloadRef`, v1alpha2
    `podGroupTemplateRef.workload`)."""
    ns, name = _namespace(obj), str(meta(obj).get("name", ""))
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if not isinstance(spec.get("schedulingPolicy"), dict):
        template = _referenced_template(spec, ns, lookup)
        if template is not None:
            spec = {**template, **{k: v for k, v in spec.items() if v is not None}}
    # 1.37's PodGroups (v1alpha3, v1beta1) carry a priority authoritative for their members; 1.36's
    # v1alpha2 one only behind WorkloadAwarePreemption, so there each pod's own counts
    newer = not str(obj.get("apiVersion", "")).endswith("/v1alpha2")
    return spec_group(spec, key=group_key(ns, name), owner=f"PodGroup {ns}/{name}", group_priority=newer)


def _referenced_template(spec: dict[str, Any], ns: str, lookup: ObjectLookup) -> dict[str, Any] | None:
    ref = spec.get("workloadRef")
    if isinstance(ref, dict):
        wl_name, tmpl_name = ref.get("workloadName") or ref.get("name"), ref.get("templateName")
    else:
        ref = (spec.get("podGroupTemplateRef") or {}).get("workload") or {}
        wl_name, tmpl_name = ref.get("workloadName"), ref.get("podGroupTemplateName")
    if not wl_name or not tmpl_name:
        return None
    workload = lookup.get(*K8S_WORKLOAD, ns, str(wl_name))
    if workload is None:
        return None
    for tmpl in (workload.get("spec") or {}).get("podGroupTemplates") or []:
        if isinstance(tmpl, dict) and tmpl.get("name") == tmpl_name:
            return tmpl
    return None


def groups_for_workload(obj: dict, lookup: ObjectLookup) -> list[GroupSpec]:
    """The groups a workload yields (treated as a top owner). Raises GroupingError when invalid, a
    shape no check anticipated included (as derive_membership, it never raises anything else)."""
    with named_when_malformed():
        return _groups_for_workload(obj, lookup)


def _groups_for_workload(obj: dict, lookup: ObjectLookup) -> list[GroupSpec]:
    group_kind = kind_of(obj)
    if group_kind == kai.JOBSET and has_scheduling(obj):
        compilation = compile_jobset(obj)
        return [] if is_suspended(obj) else list(compilation.groups)
    if group_kind == kai.KAI_PODGROUP:
        return [kai.external_group(obj)]
    if group_kind == K8S_PODGROUP and composite.parent_name(obj) is not None:
        member = _composite_member(obj, _namespace(obj), lookup)
        return [member.group] if member.group is not None else []
    if group_kind == K8S_PODGROUP:
        return [k8s_group(obj, lookup)]
    if group_kind == POD:
        membership = derive_membership(obj, lookup)
        if membership.state is MembershipState.INVALID:
            raise GroupingError("metadata", membership.message)
        return [membership.group] if membership.group is not None else []
    if kai.is_skip_podgrouper(obj) or (group_kind == kai.JOB and has_native_scheduling(obj)):
        return []  # a Job on the Workload API: the Job controller keeps its PodGroup
    group = kai.derive_group(obj, owners=(), pod=None)
    return [group] if group is not None else []


def podgroup_objects(
    objects: list[dict], *, api_version: str = SCHEDULING_API_VERSION, notes: list[str] | None = None
) -> list[dict]:
    """The group objects `gang-extender podgroups -f FILE` prints for the workloads in `objects`:
    scheduling.run.ai/v2alpha2 PodGroups for KAI-style grouping, and the scheduling.k8s.io Workload +
    PodGroups in `api_version`'s shape (v1beta1, what 1.37 serves, by default; v1alpha2 for 1.36) for a
    JobSet with spec.scheduling. A pod no group can be derived for from `objects` (its owner or the
    group it names is not among them, or that group lacks the subgroup it names) is left out, and
    `notes` told why, one line per reason. Raises GroupingError when
    invalid, ValueError for an unknown version."""
    if api_version not in SCHEDULING_API_VERSIONS:
        raise ValueError(
            f"api_version must be one of {', '.join(SCHEDULING_API_VERSIONS)}, got {api_version!r}"
        )
    objects = [o for o in objects if isinstance(o, dict)]
    lookup = ListLookup(objects)
    present = {(kind_of(o), _namespace(o), meta(o).get("name")) for o in objects}
    out: list[dict] = []
    left: dict[str, list[str]] = {}  # why -> the pods left out for it
    for obj in objects:
        ref = meta(obj).get("ownerReferences") or []
        if any(
            isinstance(r, dict)
            and ((kai.api_group_of(r), r.get("kind")), _namespace(obj), r.get("name")) in present
            for r in ref
        ):
            continue  # grouped by its owner, which is in the file too
        group_kind = kind_of(obj)
        if group_kind == kai.JOBSET and has_scheduling(obj):
            compilation = compile_jobset(obj, api_version=api_version)
            if not is_suspended(obj) and compilation.workload is not None:
                out.append(compilation.workload)
                out.extend(compilation.podgroups)
            continue
        if group_kind == K8S_PODGROUP:
            continue  # already a group object; nothing to derive
        if group_kind == kai.KAI_PODGROUP:
            out.append(kai.podgroup_object(kai.external_group(obj)))
            continue
        if group_kind == POD:
            m = derive_membership(obj, lookup)
            if m.state is MembershipState.INVALID:
                raise GroupingError("metadata", m.message)
            if m.state in (MembershipState.GROUP_MISSING, MembershipState.INVALID_SUBGROUP):
                owner = _missing_workload(walk_owners(obj, lookup), lookup)
                why = (
                    f"the owner {owner} is not in the files given (the gang is derived from it)"
                    if owner
                    else m.message
                )
                left.setdefault(why, []).append(f"{_namespace(obj)}/{meta(obj).get('name')}")
            if m.group is not None and m.group.source is Source.SINGLE_POD:
                derived = kai.podgroup_object(
                    GroupSpec(
                        key=kai.derived_key(obj),
                        source=Source.KAI_DERIVED,
                        min_member=1,
                        queue=kai.resolve_queue(obj, obj),
                        priority_class=m.group.priority_class,
                    ),
                    top=obj,
                )
                out.append(derived)
            continue
        for group in groups_for_workload(obj, lookup):
            out.append(kai.podgroup_object(group, top=obj))
    for why, pods in left.items() if notes is not None else ():
        named = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
        notes.append(f"{'pod' if len(pods) == 1 else f'{len(pods)} pods'} ({named}) left out: {why}")
    return out
