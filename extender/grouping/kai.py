"""KAI Scheduler's grouping contract: the podgrouper's derivation per workload kind, external
`scheduling.run.ai/v2alpha2` PodGroups, and rendering our groups back as KAI PodGroups.

Derived groups are named like KAI's podgrouper names them, `pg-<topOwnerName>-<topOwnerUID>`.

Where we deliberately differ from KAI (each because a quorum larger than the pods that can ever
exist would wait forever):
- a batch Job's `kai.scheduler/batch-min-member` is clamped to the pods the Job runs at once
  (min(parallelism, completions)); KAI does not clamp;
- a replicatedJob template's `batch-min-member` is clamped to that Job's parallelism (KAI logs);
- `dependsOn` counts as sequenced startup like `InOrder` for the JobSet root `minSubGroup`;
- a PyTorchJob's minAvailable / elastic minReplicas is clamped to its replicas.
Priority class is only set when the workload names one (KAI would default to `train`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extender.grouping.base import GroupingError
from extender.grouping.owners import annotations, controller_ref, kind_of, labels, meta
from extender.model import labels as keys
from extender.model.group import (
    MAX_SUBGROUP_DEPTH,
    MAX_SUBGROUPS,
    GroupSpec,
    Policy,
    Source,
    SubGroup,
    TopologyConstraint,
)
from extender.model.keys import GroupKey, api_group, group_key, object_uid

DEFAULT_QUEUE = "default-queue"
PROJECT_LABEL = "project"
KAI_API_VERSION = "scheduling.run.ai/v2alpha2"

JOB = ("batch", "Job")
JOBSET = ("jobset.x-k8s.io", "JobSet")
PYTORCHJOB = ("kubeflow.org", "PyTorchJob")
KAI_PODGROUP = ("scheduling.run.ai", "PodGroup")


def api_group_of(ref: dict[str, Any]) -> str:
    return api_group(str(ref.get("apiVersion", "")))


def derived_name(top: dict[str, Any]) -> str:
    return f"pg-{meta(top).get('name', '')}-{object_uid(top)}"


def derived_key(top: dict[str, Any]) -> GroupKey:
    return group_key(str(meta(top).get("namespace") or "default"), derived_name(top))


def is_skip_podgrouper(obj: dict[str, Any]) -> bool:
    return annotations(obj).get(keys.SKIP_PODGROUPER) == "true"


def is_managed(pg: dict[str, Any]) -> bool:
    """A PodGroup this service created and keeps (spec and status); any other is never written."""
    return labels(pg).get(keys.MANAGED_BY) == keys.MANAGER


def derived_for(pg: dict[str, Any]) -> dict[str, Any] | None:
    """The owner reference of the workload a PodGroup was derived for (ours, or KAI's podgrouper's:
    owned by the workload and named `pg-<name>-<uid>` after it), or None for a PodGroup someone
    created to be joined (the external PodGroup contract)."""
    ref = controller_ref(pg)
    if ref is None:
        return None
    if is_managed(pg) or meta(pg).get("name") == f"pg-{ref.get('name', '')}-{ref.get('uid', '')}":
        return ref
    return None


def template_pod(top: dict[str, Any]) -> dict[str, Any]:
    """The pod template a workload stamps out, for reading queue and priority without a live pod."""
    spec = top.get("spec") if isinstance(top.get("spec"), dict) else {}
    group_kind = kind_of(top)
    tmpl: Any = None
    if group_kind == JOB:
        tmpl = spec.get("template")
    elif group_kind == JOBSET:
        rjs = spec.get("replicatedJobs") or []
        if rjs and isinstance(rjs[0], dict):
            tmpl = ((rjs[0].get("template") or {}).get("spec") or {}).get("template")
    elif group_kind == PYTORCHJOB:
        specs = spec.get("pytorchReplicaSpecs") or {}
        for role in ("Master", "Worker"):
            if isinstance(specs.get(role), dict):
                tmpl = specs[role].get("template")
                break
    return tmpl if isinstance(tmpl, dict) else {}


def _parse_positive(value: Any, field: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise GroupingError(field, f"must be a positive integer, got {value!r}") from None
    if n < 1:
        raise GroupingError(field, f"must be a positive integer, got {value!r}")
    return n


def _annotation_field(prefix: str, key: str) -> str:
    return f'{prefix}metadata.annotations["{key}"]'


def topology_from(anns: dict[str, str]) -> TopologyConstraint | None:
    """KAI's three topology annotations; a constraint needs a topology and at least one level."""
    name = anns.get(keys.TOPOLOGY) or None
    required = anns.get(keys.TOPOLOGY_REQUIRED) or None
    preferred = anns.get(keys.TOPOLOGY_PREFERRED) or None
    if name is None or (required is None and preferred is None):
        return None
    return TopologyConstraint(topology=name, required_level=required, preferred_level=preferred)


def labelled_queue(top: dict[str, Any], pod: dict[str, Any]) -> str | None:
    """The queue a workload's or pod's label names (`kai.scheduler/queue`, then `project`), if any."""
    for key in (keys.QUEUE, PROJECT_LABEL):
        for obj in (top, pod):
            value = labels(obj).get(key)
            if value:
                return str(value)
    return None


def resolve_queue(top: dict[str, Any], pod: dict[str, Any]) -> str:
    return labelled_queue(top, pod) or DEFAULT_QUEUE


def resolve_priority_class(owners: Sequence[dict[str, Any]], pod: dict[str, Any]) -> str | None:
    """`priorityClassName` label on an owner (nearest first), then on the pod, then the pod spec."""
    for obj in (*owners, pod):
        value = labels(obj).get(keys.PRIORITY_CLASS_LABEL)
        if value:
            return str(value)
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    value = spec.get("priorityClassName")
    return str(value) if value else None


def derive_group(
    top: dict[str, Any], *, owners: Sequence[dict[str, Any]], pod: dict[str, Any] | None
) -> GroupSpec | None:
    """The group KAI's podgrouper derives for a top owner, or None for kinds we leave to a group of
    one. `pod` is the live pod when there is one (else the workload's pod template is used)."""
    pod_like = pod if pod is not None else template_pod(top)
    group_kind = kind_of(top)
    common: dict[str, Any] = {
        "key": derived_key(top),
        "source": Source.KAI_DERIVED,
        "queue": resolve_queue(top, pod_like),
        "priority_class": resolve_priority_class(owners, pod_like),
        "owner": f"{group_kind[1]} {meta(top).get('namespace') or 'default'}/{meta(top).get('name', '')}",
    }
    if group_kind == JOB:
        return _job_group(top, common)
    if group_kind == JOBSET:
        group = _jobset_group(top, common)
    elif group_kind == PYTORCHJOB:
        group = _pytorch_group(top, common)
    else:
        return None
    _check_derived_tree(group)
    return group


def _check_derived_tree(group: GroupSpec) -> None:
    """A derived tree's names are unique and its parents known, as in an external PodGroup's (the
    kinds' own checks name the workload's field first; this is what no workload may get past). Its
    quorums are not held to the webhook's rules: a replicatedJob scaled to 0 replicas is a parent
    without children, which counts as ready."""
    names: set[str] = set()
    for sg in group.subgroups:
        if sg.name in names:
            raise GroupingError("spec", f"the derived PodGroup {group.key} has subgroup {sg.name!r} twice")
        names.add(sg.name)
    for sg in group.subgroups:
        if sg.parent is not None and sg.parent not in names:
            raise GroupingError("spec", f"the derived PodGroup {group.key} has no subgroup {sg.parent!r}")


def _int_field(value: Any, field: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GroupingError(field, f"must be a non-negative integer, got {value!r}")
    return value


def _job_group(job: dict[str, Any], common: dict[str, Any]) -> GroupSpec:
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    parallelism = _int_field(spec.get("parallelism"), "spec.parallelism", default=1)
    completions = spec.get("completions")
    at_once = parallelism
    if isinstance(completions, int) and not isinstance(completions, bool) and completions >= 0:
        at_once = min(parallelism, completions)
    min_member = 1
    raw = annotations(job).get(keys.BATCH_MIN_MEMBER)
    if raw is not None:
        wanted = _parse_positive(raw, _annotation_field("", keys.BATCH_MIN_MEMBER))
        min_member = max(1, min(wanted, at_once))
    return GroupSpec(
        policy=Policy.GANG, min_member=min_member, topology=topology_from(annotations(job)), **common
    )


def _is_sequenced(spec: dict[str, Any]) -> bool:
    startup = spec.get("startupPolicy") if isinstance(spec.get("startupPolicy"), dict) else {}
    if startup.get("startupPolicyOrder") == "InOrder":
        return True
    return any(isinstance(rj, dict) and rj.get("dependsOn") for rj in spec.get("replicatedJobs") or [])


def replicated_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    spec = jobset.get("spec") if isinstance(jobset.get("spec"), dict) else {}
    rjs = spec.get("replicatedJobs")
    if not isinstance(rjs, list) or not rjs:
        raise GroupingError("spec.replicatedJobs", "a JobSet needs at least one replicatedJob")
    for i, rj in enumerate(rjs):
        if not isinstance(rj, dict) or not rj.get("name"):
            raise GroupingError(f"spec.replicatedJobs[{i}].name", "every replicatedJob needs a name")
    return rjs


def rj_replicas(rj: dict[str, Any], index: int) -> int:
    return _int_field(rj.get("replicas"), f"spec.replicatedJobs[{index}].replicas", default=1)


def rj_parallelism(rj: dict[str, Any], index: int) -> int:
    job_spec = ((rj.get("template") or {}).get("spec")) or {}
    return _int_field(
        job_spec.get("parallelism"), f"spec.replicatedJobs[{index}].template.spec.parallelism", default=1
    )


def _jobset_group(jobset: dict[str, Any], common: dict[str, Any]) -> GroupSpec:
    spec = jobset.get("spec") if isinstance(jobset.get("spec"), dict) else {}
    rjs = replicated_jobs(jobset)
    raw = annotations(jobset).get(keys.BATCH_MIN_MEMBER)
    if raw is not None:
        root_min = min(_parse_positive(raw, _annotation_field("", keys.BATCH_MIN_MEMBER)), len(rjs))
    elif _is_sequenced(spec):
        root_min = 1
    else:
        root_min = len(rjs)
    # one subgroup per replicatedJob and one per Job replica: counted before any is built, since
    # replicas may be in the millions (a suspended JobSet has no pods to bound it)
    total = 0
    for i, rj in enumerate(rjs):
        total += 1 + rj_replicas(rj, i)
        if total > MAX_SUBGROUPS:
            total += sum(1 + rj_replicas(rest, j) for j, rest in enumerate(rjs) if j > i)
            raise GroupingError(
                f"spec.replicatedJobs[{i}].replicas",
                f"the JobSet's gang would have {total} subgroups (one per replicatedJob and one per "
                f"Job replica); a gang holds at most {MAX_SUBGROUPS}: use fewer replicas, split the "
                "JobSet, or group it with spec.scheduling (one PodGroup per replicatedJob)",
            )
    subgroups: list[SubGroup] = []
    made_by: dict[str, tuple[int, str]] = {}  # subgroup name -> (replicatedJob index, what it is of it)
    for i, rj in enumerate(rjs):
        name = str(rj["name"])
        replicas = rj_replicas(rj, i)
        parallelism = rj_parallelism(rj, i)
        rj_anns = (rj.get("template") or {}).get("metadata") or {}
        rj_anns = rj_anns.get("annotations") if isinstance(rj_anns.get("annotations"), dict) else {}
        leaf_min = parallelism
        if keys.BATCH_MIN_MEMBER in rj_anns:
            field = _annotation_field(f"spec.replicatedJobs[{i}].template.", keys.BATCH_MIN_MEMBER)
            leaf_min = min(_parse_positive(rj_anns[keys.BATCH_MIN_MEMBER], field), parallelism)
        leaf_topology = topology_from(rj_anns)
        subgroups.append(SubGroup(name=name, min_subgroup=replicas))
        _claim_name(made_by, name, i, "its subgroup", rjs)
        for j in range(replicas):
            leaf = f"{name}-replica-{j}"
            _claim_name(made_by, leaf, i, f"the subgroup of its replica {j}", rjs)
            subgroups.append(SubGroup(name=leaf, parent=name, min_member=leaf_min, topology=leaf_topology))
    return GroupSpec(
        policy=Policy.GANG,
        min_subgroup=root_min,
        topology=topology_from(annotations(jobset)),
        subgroups=tuple(subgroups),
        **common,
    )


def _claim_name(
    made_by: dict[str, tuple[int, str]], name: str, index: int, what: str, rjs: list[dict[str, Any]]
) -> None:
    """KAI names a replicatedJob's subgroups `<name>` and `<name>-replica-<j>`: two replicatedJobs
    can make the same one (`a`'s replica 0 and a replicatedJob named `a-replica-0`), and pods of both
    would then share a leaf the tree counts once."""
    other = made_by.get(name)
    if other is None:
        made_by[name] = (index, what)
        return
    j, other_what = other
    raise GroupingError(
        f"spec.replicatedJobs[{index}].name",
        f"replicatedJob {rjs[index]['name']!r} makes subgroup {name!r} ({what}), which replicatedJob "
        f"{rjs[j]['name']!r} makes too ({other_what}); KAI names a replicatedJob's subgroups <name> and "
        "<name>-replica-<index>: rename one of the replicatedJobs",
    )


MAX_SEGMENTS = 10_000  # KAI's cap on generated segment subgroups


def _pytorch_group(job: dict[str, Any], common: dict[str, Any]) -> GroupSpec:
    """KAI's PyTorchJob gang: master and worker in one group.

    Quorum: runPolicy.schedulingPolicy.minAvailable, else elasticPolicy.minReplicas, else every
    replica. With minAvailable set KAI does not validate the replica counts (a spec without
    `replicas` runs one). With `kai.scheduler/segment-size: S` on the Worker template, `worker`
    becomes a parent of segments `worker-0..` of S pods each (the last one the remainder), each with
    the segment topology constraint; segments past the ones the quorum needs have minMember 0.
    """
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    specs = spec.get("pytorchReplicaSpecs")
    if not isinstance(specs, dict) or not specs:
        raise GroupingError("spec.pytorchReplicaSpecs", "a PyTorchJob needs at least one replica spec")
    run_policy = spec.get("runPolicy") if isinstance(spec.get("runPolicy"), dict) else {}
    sched = run_policy.get("schedulingPolicy") if isinstance(run_policy.get("schedulingPolicy"), dict) else {}
    min_available = sched.get("minAvailable")
    counts: dict[str, int] = {}
    for role, rs in specs.items():
        replicas = rs.get("replicas") if isinstance(rs, dict) else None
        field = f"spec.pytorchReplicaSpecs.{role}.replicas"
        if replicas is None and min_available is not None:
            replicas = 1  # the training operator's default
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise GroupingError(field, f"must be a positive integer, got {replicas!r}")
        counts[role] = replicas
    total = sum(counts.values())
    min_member = total
    elastic = spec.get("elasticPolicy") if isinstance(spec.get("elasticPolicy"), dict) else {}
    if elastic.get("minReplicas") is not None:
        min_member = _int_field(elastic["minReplicas"], "spec.elasticPolicy.minReplicas", default=total)
    if min_available is not None:
        min_member = _int_field(min_available, "spec.runPolicy.schedulingPolicy.minAvailable", default=total)
    min_member = min(min_member, total)  # deliberate: a quorum above the pods that exist never forms
    subgroups: list[SubGroup] = []
    master_replicas = counts.get("Master", 0)
    if master_replicas:
        subgroups.append(SubGroup(name="master", min_member=master_replicas))
    if "Worker" in counts:
        worker_min = max(0, min_member - master_replicas)
        subgroups.extend(_worker_subgroups(job, specs["Worker"], counts["Worker"], worker_min))
    return GroupSpec(
        policy=Policy.GANG,
        min_member=min_member,
        topology=topology_from(annotations(job)),
        subgroups=tuple(subgroups),
        **common,
    )


def _worker_subgroups(
    job: dict[str, Any], worker: dict[str, Any], replicas: int, worker_min: int
) -> list[SubGroup]:
    template = worker.get("template") if isinstance(worker.get("template"), dict) else {}
    anns = annotations(template)
    raw = anns.get(keys.SEGMENT_SIZE)
    if raw is None:
        return [SubGroup(name="worker", min_member=worker_min)]
    field = f"spec.pytorchReplicaSpecs.Worker.template.metadata.annotations[{keys.SEGMENT_SIZE!r}]"
    size = _parse_positive(raw, field)
    n_segments = -(-replicas // size)
    if n_segments > MAX_SEGMENTS:
        raise GroupingError(
            field, f"{replicas} workers in segments of {size} make {n_segments}; at most {MAX_SEGMENTS}"
        )
    needed = -(-worker_min // size)
    required, preferred = anns.get(keys.SEGMENT_REQUIRED), anns.get(keys.SEGMENT_PREFERRED)
    topology = None
    if required or preferred:
        topology = TopologyConstraint(
            topology=annotations(job).get(keys.TOPOLOGY) or anns.get(keys.TOPOLOGY) or None,
            required_level=required or None,
            preferred_level=preferred or None,
        )
    out = [SubGroup(name="worker", min_subgroup=n_segments)]
    for i in range(n_segments):
        pods = min(size, replicas - i * size)
        out.append(
            SubGroup(
                name=f"worker-{i}", parent="worker", min_member=pods if i < needed else 0, topology=topology
            )
        )
    return out


def leaf_for_pod(group: GroupSpec, top: dict[str, Any], chain: Sequence[dict[str, Any]]) -> str | None:
    """The leaf of a KAI-derived group that a pod (first of `chain`, then its owners) belongs to."""
    if not group.subgroups:
        return None
    group_kind = kind_of(top)

    def label(key: str) -> str | None:
        for obj in chain:
            value = labels(obj).get(key)
            if value is not None:
                return str(value)
        return None

    if group_kind == JOBSET:
        rj, index = label(keys.REPLICATED_JOB_NAME), label(keys.JOB_INDEX)
        if rj is None or index is None:
            raise GroupingError(
                f"metadata.labels[{keys.REPLICATED_JOB_NAME!r}]",
                f"a JobSet pod needs labels {keys.REPLICATED_JOB_NAME} and {keys.JOB_INDEX}",
            )
        leaf = f"{rj}-replica-{index}"
    elif group_kind == PYTORCHJOB:
        role = label(keys.PYTORCH_REPLICA_TYPE)
        if role is None:
            raise GroupingError(
                f"metadata.labels[{keys.PYTORCH_REPLICA_TYPE!r}]", "a PyTorchJob pod needs its replica type"
            )
        leaf = role.lower()
        if leaf == "worker" and group.subgroup("worker-0") is not None:
            index = label(keys.PYTORCH_REPLICA_INDEX)
            segment = _segment_size(top)
            if index is None or not index.isdigit() or segment is None:
                raise GroupingError(
                    f"metadata.labels[{keys.PYTORCH_REPLICA_INDEX!r}]",
                    "a segmented PyTorchJob's worker pod needs its replica index",
                )
            leaf = f"worker-{int(index) // segment}"
    else:
        return None
    if leaf not in group.leaf_names:
        label_key = keys.REPLICATED_JOB_NAME if group_kind == JOBSET else keys.PYTORCH_REPLICA_TYPE
        raise GroupingError(
            f"metadata.labels[{label_key!r}]",
            f"pod maps to subgroup {leaf!r}, which {group.key} does not have",
        )
    return leaf


def _segment_size(top: dict[str, Any]) -> int | None:
    worker = ((top.get("spec") or {}).get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    raw = annotations(worker.get("template") or {}).get(keys.SEGMENT_SIZE)
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


# External PodGroups (scheduling.run.ai/v2alpha2)


def external_group(pg: dict[str, Any]) -> GroupSpec:
    """A user- or controller-created KAI PodGroup as a group; `spec.queue` is authoritative."""
    spec = pg.get("spec") if isinstance(pg.get("spec"), dict) else {}
    namespace = str(meta(pg).get("namespace") or "default")
    name = str(meta(pg).get("name", ""))

    def topo(raw: Any, where: str) -> TopologyConstraint | None:
        if not isinstance(raw, dict):
            return None
        tc = TopologyConstraint(
            topology=_name(raw.get("topology"), f"{where}.topology"),
            required_level=_name(
                raw.get("requiredTopologyLevel"), f"{where}.requiredTopologyLevel", LABEL_KEY_MAX
            ),
            preferred_level=_name(
                raw.get("preferredTopologyLevel"), f"{where}.preferredTopologyLevel", LABEL_KEY_MAX
            ),
        )
        return None if tc.is_empty() else tc

    raw_subgroups = spec.get("subGroups") or []
    if not isinstance(raw_subgroups, list):
        raise GroupingError("spec.subGroups", "must be a list of subgroups")
    if len(raw_subgroups) > MAX_SUBGROUPS:
        raise GroupingError(
            "spec.subGroups",
            f"has {len(raw_subgroups)} subgroups; a gang holds at most {MAX_SUBGROUPS}: split the "
            "workload into several PodGroups",
        )
    subgroups: list[SubGroup] = []
    names: set[str] = set()
    for i, sg in enumerate(raw_subgroups):
        if not isinstance(sg, dict) or not sg.get("name"):
            raise GroupingError(f"spec.subGroups[{i}].name", "every subgroup needs a name")
        where = f"spec.subGroups[{i}]"
        sg_name = _name(sg["name"], f"{where}.name")
        assert sg_name is not None
        if sg_name in names:
            raise GroupingError(f"{where}.name", f"duplicate subgroup {sg_name!r}")
        names.add(sg_name)
        subgroups.append(
            SubGroup(
                name=sg_name,
                parent=_name(sg.get("parent"), f"{where}.parent"),
                min_member=_optional_int(sg.get("minMember"), f"{where}.minMember"),
                min_subgroup=_optional_int(sg.get("minSubGroup"), f"{where}.minSubGroup"),
                topology=topo(sg.get("topologyConstraint"), f"{where}.topologyConstraint"),
            )
        )
    depth = _check_tree(subgroups, names)
    # KAI takes subgroups in any order; the gang's tree lists parents first (placement builds it
    # in one pass): a stable sort by depth keeps the given order within a level
    subgroups.sort(key=lambda sg: depth[sg.name])
    min_member = spec.get("minMember")
    if min_member is not None and spec.get("minSubGroup") is not None:
        raise GroupingError("spec.minSubGroup", "set minMember or minSubGroup on the root, not both")
    return GroupSpec(
        key=group_key(namespace, name),
        source=Source.KAI_PODGROUP,
        policy=Policy.GANG,
        min_member=_int_field(min_member, "spec.minMember", default=1) if min_member is not None else None,
        min_subgroup=_optional_int(spec.get("minSubGroup"), "spec.minSubGroup"),
        topology=topo(spec.get("topologyConstraint"), "spec.topologyConstraint"),
        subgroups=tuple(subgroups),
        queue=_name(spec.get("queue"), "spec.queue"),
        priority_class=_name(spec.get("priorityClassName"), "spec.priorityClassName"),
        owner=f"PodGroup {namespace}/{name}",
    )


NAME_MAX = 253
"""The longest object name the API server keeps (a DNS subdomain)."""
LABEL_KEY_MAX = 317
"""The longest label key: a 253-character prefix, a slash and a 63-character name."""


def _name(value: Any, field: str, limit: int = NAME_MAX) -> str | None:
    """A name or label key a PodGroup gives (a queue, a subgroup, a topology level): a string of one
    line within the API server's length, or absent (None, as an empty one). Refused naming the field
    otherwise: a number or a list would reach every comparison of queues or subgroups, a key of
    kilobytes every reason that names it."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise GroupingError(field, f"must be a string, not {type(value).__name__}")
    if len(value) > limit or not value.isprintable() or any(c.isspace() for c in value):
        shown = value[:40].encode("unicode_escape").decode() + ("..." if len(value) > 40 else "")
        raise GroupingError(field, f"{shown!r} is not a name (one word, at most {limit} characters)")
    return value


def _optional_int(value: Any, field: str) -> int | None:
    return None if value is None else _int_field(value, field, default=0)


def _check_tree(subgroups: list[SubGroup], names: set[str]) -> dict[str, int]:
    """KAI's PodGroup webhook rules: known parents, no cycles, leaves count pods and inner nodes
    count children (never both); and ours: at most MAX_SUBGROUP_DEPTH levels. Linear in the
    subgroups: each one's depth is found once, walking up only as far as an unknown depth. Returns
    each subgroup's depth (1: a child of the root)."""
    parents = {sg.parent for sg in subgroups if sg.parent is not None}
    by_name = {sg.name: sg for sg in subgroups}
    index = {sg.name: i for i, sg in enumerate(subgroups)}
    depth: dict[str, int] = {}
    for i, sg in enumerate(subgroups):
        where = f"spec.subGroups[{i}]"
        if sg.parent is not None and sg.parent not in names:
            raise GroupingError(f"{where}.parent", f"unknown parent subgroup {sg.parent!r}")
        path: list[str] = []
        on_path: set[str] = set()
        node: SubGroup | None = sg
        while node is not None and node.name not in depth:
            if node.name in on_path:
                raise GroupingError(
                    f"spec.subGroups[{index[node.name]}].parent",
                    f"subgroup {node.name!r} is its own ancestor",
                )
            path.append(node.name)
            on_path.add(node.name)
            node = by_name[node.parent] if node.parent is not None else None
        base = depth[node.name] if node is not None else 0
        for name in reversed(path):
            base += 1
            depth[name] = base
            if base > MAX_SUBGROUP_DEPTH:
                raise GroupingError(
                    f"spec.subGroups[{index[name]}].parent",
                    f"subgroup {name!r} is {base} levels deep; a gang's subgroups nest at most "
                    f"{MAX_SUBGROUP_DEPTH} levels below the root: flatten the tree",
                )
        if sg.min_member is not None and sg.min_subgroup is not None:
            raise GroupingError(f"{where}.minSubGroup", "set minMember or minSubGroup, not both")
        if sg.name in parents and sg.min_member is not None:
            raise GroupingError(f"{where}.minMember", "a subgroup with children counts them with minSubGroup")
        if sg.name not in parents and sg.min_subgroup is not None:
            raise GroupingError(f"{where}.minSubGroup", "a leaf subgroup counts pods with minMember")
        if sg.name not in parents and sg.min_member is None:
            raise GroupingError(f"{where}.minMember", "a leaf subgroup needs minMember")
    return depth


def podgroup_object(group: GroupSpec, *, top: dict[str, Any] | None = None) -> dict[str, Any]:
    """A group rendered as the `scheduling.run.ai/v2alpha2` PodGroup KAI would hold for it."""

    def topo(tc: TopologyConstraint | None) -> dict[str, str] | None:
        if tc is None or tc.is_empty():
            return None
        out = {"topology": tc.topology or ""}
        if tc.required_level:
            out["requiredTopologyLevel"] = tc.required_level
        if tc.preferred_level:
            out["preferredTopologyLevel"] = tc.preferred_level
        return out

    spec: dict[str, Any] = {}
    if group.min_subgroup is not None:
        spec["minSubGroup"] = group.min_subgroup
    elif group.min_member is not None or not group.subgroups:
        spec["minMember"] = group.min_member if group.min_member is not None else 1
    if group.queue:
        spec["queue"] = group.queue
    if group.priority_class:
        spec["priorityClassName"] = group.priority_class
    if (tc := topo(group.topology)) is not None:
        spec["topologyConstraint"] = tc
    if group.subgroups:
        rendered = []
        for sg in group.subgroups:
            entry: dict[str, Any] = {"name": sg.name}
            if sg.parent is not None:
                entry["parent"] = sg.parent
            if sg.min_member is not None:
                entry["minMember"] = sg.min_member
            if sg.min_subgroup is not None:
                entry["minSubGroup"] = sg.min_subgroup
            if (stc := topo(sg.topology)) is not None:
                entry["topologyConstraint"] = stc
            rendered.append(entry)
        spec["subGroups"] = rendered
    metadata: dict[str, Any] = {"name": group.name, "namespace": group.namespace}
    if top is not None:
        api_version = str(top.get("apiVersion", ""))
        metadata["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": top.get("kind", ""),
                "name": meta(top).get("name", ""),
                "uid": object_uid(top),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {"apiVersion": KAI_API_VERSION, "kind": "PodGroup", "metadata": metadata, "spec": spec}
