"""JobSet `spec.scheduling` compiled exactly as the JobSet controller (PR #1250) compiles it: one
`scheduling.k8s.io` Workload owned by the JobSet and one PodGroup per PodGroupTemplate.

The objects are written in the shape of the `scheduling.k8s.io` version asked for (`api_version`):
- `v1beta1` (the default) and `v1alpha3`, what Kubernetes 1.37 serves (v1beta1 with the GenericWorkload
  gate): a PodGroup names its template with `spec.workloadRef.{workloadName, templateName}` and
  `disruptionMode` is the union `{single: {}}` or `{all: {}}`;
- `v1alpha2`, what 1.36 serves (and 1.37 removed): `spec.podGroupTemplateRef.workload.{workloadName,
  podGroupTemplateName}` and the string "Pod" or "PodGroup".
Every version's PodGroup carries its own `schedulingPolicy` (required), copied from the template as the
controller copies it. Checked against 1.36.2's and 1.37.2's API servers by creating the objects there.
The JobSet side keeps its own API (`disruptionMode: {all: {}}` / `{single: {}}`). Reading takes every
shape (`spec_group`, and `membership.k8s_group`).

Models (mutually exclusive):
- top level (`schedulingPolicy` / `schedulingConstraints` / `disruptionMode`, or `{}`): one
  PodGroup for the whole JobSet, gang minCount = Σ parallelism × replicas;
- under sequenced startup (`InOrder` or any `dependsOn`) the top level becomes one PodGroup per
  replicatedJob instead (an explicit top-level gang is rejected);
- `replicatedJobs[]` entries: one PodGroup per entry, minCount summed over its targets;
- an entry's `job`: one PodGroup per Job replica ("gang of gangs"), minCount = parallelism.
minCount is recomputed from the live spec on every compile, which is how elastic scaling moves it;
only an explicit non-zero `job.schedulingPolicy.gang.minCount` is a fixed quorum (the top level
and entries take the controller's composite policy, which has no count of its own). Names use the controller's
identity-hash scheme so our keys equal the real PodGroup names.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from typing import Any

from extender.grouping.base import GroupingError, named_when_malformed
from extender.grouping.kai import replicated_jobs, rj_parallelism, rj_replicas
from extender.grouping.owners import meta
from extender.model import labels as keys
from extender.model.group import (
    Disruption,
    GroupSpec,
    Policy,
    ResourceClaimRef,
    Source,
    TopologyConstraint,
)
from extender.model.keys import GroupKey, group_key, object_uid

SCHEDULING_GROUP = "scheduling.k8s.io"
# The versions compile_jobset writes, newest first: 1.37 serves v1beta1 and v1alpha3, 1.36 v1alpha2.
SCHEDULING_API_VERSIONS = (
    f"{SCHEDULING_GROUP}/v1beta1",
    f"{SCHEDULING_GROUP}/v1alpha3",
    f"{SCHEDULING_GROUP}/v1alpha2",
)
SCHEDULING_API_VERSION = SCHEDULING_API_VERSIONS[0]
LEGACY_SCHEDULING_API_VERSION = f"{SCHEDULING_GROUP}/v1alpha2"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
MAX_NAME_LENGTH = 63
HASH_LENGTH = 10
MAX_TEMPLATES = 8  # Workload.spec.podGroupTemplates cap
MAX_RESOURCE_CLAIMS = 4
ROOT = "spec.scheduling"
# PodGroup and PodGroupTemplate `disruptionMode`: v1alpha2's enum, and the union of later versions
LEGACY_DISRUPTION_MODE = {Disruption.SINGLE: "Pod", Disruption.ALL: "PodGroup"}
DISRUPTION_MODE = {Disruption.SINGLE: {"single": {}}, Disruption.ALL: {"all": {}}}


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _identity_hash(kind: str, namespace: str, name: str) -> str:
    return _sha1(f"{kind}/{namespace}/{name}")[:HASH_LENGTH]


def _hashed_name(prefix: str, digest: str) -> str:
    name = f"{prefix}-{digest}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    return f"{prefix[: MAX_NAME_LENGTH - 1 - len(digest)]}-{digest}"


def workload_name(namespace: str, jobset: str) -> str:
    return _hashed_name(jobset, _identity_hash("JobSet", namespace, jobset))


def top_level_template_name(namespace: str, jobset: str) -> str:
    return _hashed_name(jobset, _identity_hash("JobSet", namespace, jobset))


def per_rj_template_name(namespace: str, jobset: str, rj: str) -> str:
    return _hashed_name(rj, _identity_hash("ReplicatedJob", namespace, f"{jobset}/{rj}"))


def group_template_name(namespace: str, jobset: str, targets: list[str]) -> str:
    joined = "-".join(targets)
    return _hashed_name(joined, _identity_hash("ReplicatedJobGroup", namespace, f"{jobset}/{joined}"))


def per_job_template_name(namespace: str, jobset: str, rj: str, job_index: int) -> str:
    return _hashed_name(f"{rj}-{job_index}", _identity_hash("Job", namespace, f"{jobset}/{rj}/{job_index}"))


def podgroup_name(jobset: str, template: str) -> str:
    name = f"{jobset}-{template}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = _sha1(f"{jobset}/{template}")[:HASH_LENGTH]
    return f"{jobset[: MAX_NAME_LENGTH - 1 - HASH_LENGTH]}-{digest}"


@dataclasses.dataclass(frozen=True)
class _Settings:
    """One level's parsed policy/constraints/disruption/claims; None means "not set here"."""

    policy: Policy | None = None
    explicit_min_count: int | None = None
    min_count_field: str = ""
    topology_key: str | None = None
    disruption: Disruption | None = None
    claims: tuple[ResourceClaimRef, ...] = ()

    def is_empty(self) -> bool:
        return (
            self.policy is None and self.topology_key is None and self.disruption is None and not self.claims
        )


@dataclasses.dataclass(frozen=True)
class _Item:
    template: str
    settings: _Settings
    derived_min_count: int
    priority_class: str | None
    members: tuple[tuple[str, int | None], ...]  # (replicatedJob, job index or None for every index)


@dataclasses.dataclass(frozen=True)
class JobSetCompilation:
    """What the controller would create for one JobSet: the Workload, its PodGroups, and our groups."""

    workload: dict | None
    podgroups: list[dict]
    groups: list[GroupSpec]
    _by_member: dict[tuple[str, int | None], GroupKey] = dataclasses.field(default_factory=dict, repr=False)

    def group_of(self, rj_name: str, job_index: int) -> GroupKey:
        """The group of the pods of Job `job_index` of replicatedJob `rj_name`; KeyError if none."""
        found = self._by_member.get((rj_name, job_index)) or self._by_member.get((rj_name, None))
        if found is None:
            raise KeyError(f"replicatedJob {rj_name!r} job {job_index} has no compiled group")
        return found


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _parse_policy(raw: Any, path: str, *, allow_min_count: bool = True) -> tuple[Policy, int | None]:
    if not _is_dict(raw) or ("basic" in raw) == ("gang" in raw):
        raise GroupingError(path, "set exactly one of basic: {} or gang: {}")
    if "basic" in raw:
        return Policy.BASIC, None
    gang = raw.get("gang") or {}
    if not _is_dict(gang):
        raise GroupingError(f"{path}.gang", "must be an object such as {} or {minCount: N}")
    min_count = gang.get("minCount")
    if min_count is None or min_count == 0:
        return Policy.GANG, None
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 0:
        raise GroupingError(f"{path}.gang.minCount", f"must be a positive integer, got {min_count!r}")
    if not allow_min_count:
        raise GroupingError(f"{path}.gang.minCount", "is not allowed here")
    return Policy.GANG, min_count


def _parse_settings(
    raw: dict[str, Any], path: str, *, claims_allowed: bool, fixed_quorum: bool = False
) -> _Settings:
    """One level's settings. Only a `job` policy's gang.minCount is a fixed quorum: the top level and
    replicatedJobs[] entries take the controller's composite policy, whose count it always derives
    from the live pod count (so elastic scaling moves it), whatever the manifest says."""
    policy, explicit = None, None
    if raw.get("schedulingPolicy") is not None:
        policy, explicit = _parse_policy(raw["schedulingPolicy"], f"{path}.schedulingPolicy")
        if not fixed_quorum:
            explicit = None
    topology_key = None
    if raw.get("schedulingConstraints") is not None:
        constraints = raw["schedulingConstraints"]
        cpath = f"{path}.schedulingConstraints"
        if not _is_dict(constraints):
            raise GroupingError(cpath, "must be an object with topology: [{key: LABEL}]")
        topo = constraints.get("topology") or []
        if not isinstance(topo, list) or len(topo) > 1:
            raise GroupingError(f"{cpath}.topology", "at most one topology constraint is supported")
        if topo:
            key = topo[0].get("key") if _is_dict(topo[0]) else None
            if not isinstance(key, str) or not key:
                raise GroupingError(f"{cpath}.topology[0].key", "must name a node label key")
            topology_key = key
    disruption = None
    if raw.get("disruptionMode") is not None:
        mode = raw["disruptionMode"]
        if not _is_dict(mode) or ("single" in mode) == ("all" in mode):
            raise GroupingError(f"{path}.disruptionMode", "set exactly one of single: {} or all: {}")
        disruption = Disruption.ALL if "all" in mode else Disruption.SINGLE
    claims: list[ResourceClaimRef] = []
    if raw.get("resourceClaims") is not None:
        rpath = f"{path}.resourceClaims"
        if not claims_allowed:
            raise GroupingError(rpath, "resourceClaims are only supported under replicatedJobs[] entries")
        items = raw["resourceClaims"]
        if not isinstance(items, list) or len(items) > MAX_RESOURCE_CLAIMS:
            raise GroupingError(rpath, f"must be a list of at most {MAX_RESOURCE_CLAIMS} claims")
        for i, c in enumerate(items):
            if not _is_dict(c) or not c.get("name"):
                raise GroupingError(f"{rpath}[{i}].name", "every resource claim needs a name")
            by_name, by_template = c.get("resourceClaimName"), c.get("resourceClaimTemplateName")
            if bool(by_name) == bool(by_template):
                raise GroupingError(
                    f"{rpath}[{i}]", "set exactly one of resourceClaimName or resourceClaimTemplateName"
                )
            claims.append(ResourceClaimRef(str(c["name"]), by_name or None, by_template or None))
    return _Settings(
        policy=policy,
        explicit_min_count=explicit,
        min_count_field=f"{path}.schedulingPolicy.gang.minCount",
        topology_key=topology_key,
        disruption=disruption,
        claims=tuple(claims),
    )


def _fallback(own: _Settings, global_: _Settings) -> _Settings:
    """A leaf's own settings, each unset one taken from the JobSet level (as the controller does)."""
    return dataclasses.replace(
        own,
        policy=own.policy if own.policy is not None else global_.policy,
        explicit_min_count=own.explicit_min_count if own.policy is not None else global_.explicit_min_count,
        min_count_field=own.min_count_field if own.policy is not None else global_.min_count_field,
        topology_key=own.topology_key if own.topology_key is not None else global_.topology_key,
        disruption=own.disruption if own.disruption is not None else global_.disruption,
    )


def _priority(rj: dict[str, Any]) -> str | None:
    pod_spec = ((((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
    value = pod_spec.get("priorityClassName")
    return str(value) if value else None


def is_sequenced(jobset: dict[str, Any]) -> bool:
    spec = jobset.get("spec") if _is_dict(jobset.get("spec")) else {}
    startup = spec.get("startupPolicy") if _is_dict(spec.get("startupPolicy")) else {}
    if startup.get("startupPolicyOrder") == "InOrder":
        return True
    return any(_is_dict(rj) and rj.get("dependsOn") for rj in spec.get("replicatedJobs") or [])


def has_scheduling(jobset: dict[str, Any]) -> bool:
    spec = jobset.get("spec") if _is_dict(jobset.get("spec")) else {}
    return spec.get("scheduling") is not None


def is_suspended(jobset: dict[str, Any]) -> bool:
    spec = jobset.get("spec") if _is_dict(jobset.get("spec")) else {}
    return spec.get("suspend") is True


def _items(jobset: dict[str, Any]) -> list[_Item]:
    spec = jobset["spec"]
    scheduling = spec["scheduling"]
    if not _is_dict(scheduling):
        raise GroupingError(ROOT, "must be an object ({} for the defaults)")
    namespace = str(meta(jobset).get("namespace") or "default")
    name = str(meta(jobset).get("name", ""))
    rjs = replicated_jobs(jobset)
    index_of = {str(rj["name"]): i for i, rj in enumerate(rjs)}
    pods = {str(rj["name"]): rj_replicas(rj, i) * rj_parallelism(rj, i) for i, rj in enumerate(rjs)}
    sequenced = is_sequenced(jobset)
    global_ = _parse_settings(scheduling, ROOT, claims_allowed=False)
    entries = scheduling.get("replicatedJobs")

    if entries:
        if not global_.is_empty():
            top_field = next(
                f"{ROOT}.{f}"
                for f in ("schedulingPolicy", "schedulingConstraints", "disruptionMode")
                if scheduling.get(f) is not None
            )
            raise GroupingError(
                top_field,
                f"is mutually exclusive with {ROOT}.replicatedJobs: use the top-level fields for one "
                "JobSet-wide group, or target every replicatedJob from replicatedJobs[] entries",
            )
        if not isinstance(entries, list):
            raise GroupingError(f"{ROOT}.replicatedJobs", "must be a list of entries")
        items: list[_Item] = []
        targeted: dict[str, int] = {}
        for e, entry in enumerate(entries):
            epath = f"{ROOT}.replicatedJobs[{e}]"
            if not _is_dict(entry):
                raise GroupingError(epath, "must be an object with targetReplicatedJobs")
            targets = entry.get("targetReplicatedJobs")
            if not isinstance(targets, list) or not targets:
                raise GroupingError(f"{epath}.targetReplicatedJobs", "must list at least one replicatedJob")
            for t, target in enumerate(targets):
                tpath = f"{epath}.targetReplicatedJobs[{t}]"
                if not isinstance(target, str):
                    raise GroupingError(tpath, f"must be a replicatedJob's name, not {type(target).__name__}")
                if target not in index_of:
                    raise GroupingError(
                        tpath, f"replicatedJob {target!r} does not exist (known: {', '.join(index_of)})"
                    )
                if target in targeted:
                    raise GroupingError(
                        tpath,
                        f"replicatedJob {target!r} is already targeted by "
                        f"{ROOT}.replicatedJobs[{targeted[target]}]; target each exactly once",
                    )
                targeted[target] = e
            job = entry.get("job")
            if job is not None:
                if len(targets) != 1:
                    raise GroupingError(f"{epath}.targetReplicatedJobs", "job requires exactly one target")
                for f in ("schedulingPolicy", "schedulingConstraints", "disruptionMode", "resourceClaims"):
                    if entry.get(f) is not None:
                        raise GroupingError(
                            f"{epath}.{f}", f"cannot be combined with {epath}.job: set it inside job"
                        )
                if not _is_dict(job):
                    raise GroupingError(f"{epath}.job", "must be an object")
                settings = _fallback(
                    _parse_settings(job, f"{epath}.job", claims_allowed=True, fixed_quorum=True), global_
                )
                rj_name = str(targets[0])
                rj = rjs[index_of[rj_name]]
                parallelism = rj_parallelism(rj, index_of[rj_name])
                if settings.explicit_min_count is not None and settings.explicit_min_count > parallelism:
                    raise GroupingError(
                        settings.min_count_field,
                        f"minCount {settings.explicit_min_count} exceeds the {parallelism} pods of one "
                        f"Job of replicatedJob {rj_name!r}",
                    )
                replicas = rj_replicas(rj, index_of[rj_name])
                if len(items) + replicas > MAX_TEMPLATES:
                    # checked before building: replicas may be in the millions
                    raise GroupingError(
                        f"{epath}.job",
                        f"one PodGroupTemplate per Job would make {len(items) + replicas} templates; "
                        f"a Workload holds at most {MAX_TEMPLATES}",
                    )
                for j in range(replicas):
                    items.append(
                        _Item(
                            template=per_job_template_name(namespace, name, rj_name, j),
                            settings=settings,
                            derived_min_count=parallelism,
                            priority_class=_priority(rj),
                            members=((rj_name, j),),
                        )
                    )
                continue
            settings = _fallback(_parse_settings(entry, epath, claims_allowed=True), global_)
            members = [str(t) for t in targets]
            priorities = {_priority(rjs[index_of[m]]) for m in members}
            if len(priorities) > 1:
                raise GroupingError(
                    f"{epath}.targetReplicatedJobs",
                    "replicatedJobs sharing one PodGroup must use the same pod priorityClassName",
                )
            total = sum(pods[m] for m in members)
            if settings.explicit_min_count is not None and settings.explicit_min_count > total:
                raise GroupingError(
                    settings.min_count_field,
                    f"minCount {settings.explicit_min_count} exceeds the {total} pods of the targeted "
                    "replicatedJobs",
                )
            items.append(
                _Item(
                    template=group_template_name(namespace, name, members),
                    settings=settings,
                    derived_min_count=total,
                    priority_class=_priority(rjs[index_of[members[0]]]),
                    members=tuple((m, None) for m in members),
                )
            )
        missing = [n for n in index_of if n not in targeted]
        if missing:
            raise GroupingError(
                f"{ROOT}.replicatedJobs",
                "every replicatedJob must be targeted by exactly one entry; "
                f"not targeted: {', '.join(missing)}",
            )
        return items

    if sequenced:
        policy_raw = scheduling.get("schedulingPolicy")
        if _is_dict(policy_raw) and "gang" in policy_raw:
            raise GroupingError(
                f"{ROOT}.schedulingPolicy.gang",
                "an explicit top-level gang is rejected with dependsOn or InOrder startup (Jobs start one "
                "replicatedJob at a time); leave schedulingPolicy unset for one gang per replicatedJob",
            )
        return [
            _Item(
                template=per_rj_template_name(namespace, name, str(rj["name"])),
                settings=global_,
                derived_min_count=pods[str(rj["name"])],
                priority_class=_priority(rj),
                members=((str(rj["name"]), None),),
            )
            for rj in rjs
        ]

    total = sum(pods.values())
    if (global_.policy or Policy.GANG) is Policy.GANG:
        for i, rj in enumerate(rjs):
            if _priority(rj) != _priority(rjs[0]):
                raise GroupingError(
                    f"spec.replicatedJobs[{i}].template.spec.template.spec.priorityClassName",
                    "must match across replicatedJobs when top-level gang scheduling is used "
                    f"({_priority(rj)!r} vs {_priority(rjs[0])!r}): one PodGroup has one priority",
                )
    return [
        _Item(
            template=top_level_template_name(namespace, name),
            settings=global_,
            derived_min_count=total,
            priority_class=_priority(rjs[0]),
            members=tuple((str(rj["name"]), None) for rj in rjs),
        )
    ]


def _template_spec(item: _Item, *, legacy: bool) -> dict[str, Any]:
    s = item.settings
    policy = s.policy or Policy.GANG
    out: dict[str, Any] = {}
    if policy is Policy.BASIC:
        out["schedulingPolicy"] = {"basic": {}}
    else:
        min_count = s.explicit_min_count if s.explicit_min_count is not None else item.derived_min_count
        out["schedulingPolicy"] = {"gang": {"minCount": min_count}}
    if s.topology_key is not None:
        out["schedulingConstraints"] = {"topology": [{"key": s.topology_key}]}
    if s.disruption is not None:
        mode = (LEGACY_DISRUPTION_MODE if legacy else DISRUPTION_MODE)[s.disruption]
        out["disruptionMode"] = copy.deepcopy(mode)  # a fresh object: callers may edit what they get
    if s.claims:
        out["resourceClaims"] = [
            {"name": c.name, "resourceClaimName": c.resource_claim_name}
            if c.resource_claim_name
            else {"name": c.name, "resourceClaimTemplateName": c.resource_claim_template_name}
            for c in s.claims
        ]
    if item.priority_class:
        out["priorityClassName"] = item.priority_class
    return out


def _is_empty_gang(item: _Item) -> bool:
    return (item.settings.policy or Policy.GANG) is Policy.GANG and (
        item.settings.explicit_min_count is None and item.derived_min_count == 0
    )


def compile_jobset(jobset: dict, *, api_version: str = SCHEDULING_API_VERSION) -> JobSetCompilation:
    """spec.scheduling -> Workload + PodGroups in `api_version`'s shape (one of SCHEDULING_API_VERSIONS);
    raises GroupingError naming the field when invalid. A JobSet without spec.scheduling compiles to
    nothing (it keeps KAI-style grouping)."""
    if api_version not in SCHEDULING_API_VERSIONS:
        raise ValueError(
            f"api_version must be one of {', '.join(SCHEDULING_API_VERSIONS)}, got {api_version!r}"
        )
    with named_when_malformed():
        return _compile(jobset, api_version)


def _compile(jobset: dict, api_version: str) -> JobSetCompilation:
    legacy = api_version == LEGACY_SCHEDULING_API_VERSION
    if not _is_dict(jobset.get("spec")):
        raise GroupingError("spec", "a JobSet needs a spec")
    if not has_scheduling(jobset):
        return JobSetCompilation(workload=None, podgroups=[], groups=[])
    # A gang with no pods (its replicatedJobs scaled to zero replicas or parallelism) has nothing to
    # hold together, and the Workload API refuses a gang minCount of 0: it compiles to no template and
    # no PodGroup. A JobSet left with no group at all needs no Workload either.
    items = [i for i in _items(jobset) if not _is_empty_gang(i)]
    if not items:
        return JobSetCompilation(workload=None, podgroups=[], groups=[])
    if len(items) > MAX_TEMPLATES:
        raise GroupingError(
            ROOT, f"compiles to {len(items)} PodGroupTemplates; a Workload holds at most {MAX_TEMPLATES}"
        )
    seen: set[str] = set()
    for item in items:
        if item.template in seen:
            raise GroupingError(
                f"{ROOT}.replicatedJobs", f"generated template name {item.template!r} is not unique"
            )
        seen.add(item.template)

    namespace = str(meta(jobset).get("namespace") or "default")
    name = str(meta(jobset).get("name", ""))
    uid = object_uid(jobset)
    owner_ref = {
        "apiVersion": str(jobset.get("apiVersion") or JOBSET_API_VERSION),
        "kind": "JobSet",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    wl_name = workload_name(namespace, name)
    top_level = len(items) == 1 and items[0].template == top_level_template_name(namespace, name)

    def metadata(obj_name: str) -> dict[str, Any]:
        return {
            "name": obj_name,
            "namespace": namespace,
            "labels": {keys.JOBSET_NAME: name},
            "ownerReferences": [dict(owner_ref)],
        }

    templates = [{"name": item.template, **_template_spec(item, legacy=legacy)} for item in items]
    workload = {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": metadata(wl_name),
        "spec": {
            "controllerRef": {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": name},
            "podGroupTemplates": templates,
        },
    }
    podgroups: list[dict] = []
    groups: list[GroupSpec] = []
    by_member: dict[tuple[str, int | None], GroupKey] = {}
    for item in items:
        pg_name = item.template if top_level else podgroup_name(name, item.template)
        # the reference to the template, and the template's fields copied onto the PodGroup
        # (schedulingPolicy is required there) as the controller copies them
        ref: dict[str, Any] = (
            {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": wl_name, "podGroupTemplateName": item.template}
                }
            }
            if legacy
            else {"workloadRef": {"workloadName": wl_name, "templateName": item.template}}
        )
        pg_spec = {**ref, **_template_spec(item, legacy=legacy)}
        podgroups.append(
            {
                "apiVersion": api_version,
                "kind": "PodGroup",
                "metadata": metadata(pg_name),
                "spec": pg_spec,
            }
        )
        group = spec_group(pg_spec, key=group_key(namespace, pg_name), owner=f"JobSet {namespace}/{name}")
        groups.append(dataclasses.replace(group, source=Source.JOBSET_SCHEDULING))
        for member in item.members:
            by_member[member] = group.key
    return JobSetCompilation(workload=workload, podgroups=podgroups, groups=groups, _by_member=by_member)


def spec_group(
    spec: dict[str, Any], *, key: GroupKey, owner: str | None, group_priority: bool = False
) -> GroupSpec:
    """A scheduling.k8s.io PodGroup(Template) spec (v1alpha2, v1alpha3 or v1beta1 shape) as a group.

    `group_priority`: the spec's `priority` speaks for every member (a 1.37 PodGroup's, as
    kube-scheduler 1.37 ranks it: unset is 0); otherwise each pod's own priority counts."""
    policy_raw = spec.get("schedulingPolicy") or spec.get("policy")
    if not _is_dict(policy_raw):
        raise GroupingError("spec.schedulingPolicy", "must set basic: {} or gang: {minCount: N}")
    if "basic" in policy_raw:
        policy, min_member = Policy.BASIC, None
    elif "gang" in policy_raw:
        gang = policy_raw.get("gang") or {}
        min_count = gang.get("minCount") if _is_dict(gang) else None
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 0:
            raise GroupingError(
                "spec.schedulingPolicy.gang.minCount", f"must be an integer, got {min_count!r}"
            )
        policy, min_member = Policy.GANG, min_count
    else:
        raise GroupingError("spec.schedulingPolicy", "must set basic: {} or gang: {minCount: N}")
    topology = None
    constraints = spec.get("schedulingConstraints")
    if _is_dict(constraints) and isinstance(constraints.get("topology"), list) and constraints["topology"]:
        first = constraints["topology"][0]
        if _is_dict(first) and first.get("key"):
            topology = TopologyConstraint(required_level=str(first["key"]))
    legacy = spec.get("topologyConstraints")  # an early v1alpha2 draft
    if topology is None and isinstance(legacy, list) and legacy and _is_dict(legacy[0]):
        if legacy[0].get("topologyKey"):
            topology = TopologyConstraint(required_level=str(legacy[0]["topologyKey"]))
    mode = spec.get("disruptionMode")
    if mode == "PodGroup" or (_is_dict(mode) and "all" in mode):
        disruption = Disruption.ALL
    else:
        disruption = Disruption.SINGLE  # "Pod", {single: {}} or unset
    claims = tuple(
        ResourceClaimRef(
            str(c.get("name", "")),
            c.get("resourceClaimName") or None,
            c.get("resourceClaimTemplateName") or None,
        )
        for c in spec.get("resourceClaims") or []
        if _is_dict(c)
    )
    priority = spec.get("priority") if group_priority else None
    if group_priority and (isinstance(priority, bool) or not isinstance(priority, int)):
        priority = 0  # no class and no global default: kube-scheduler's PodGroupPriority is 0
    preemption_policy = spec.get("preemptionPolicy")
    return GroupSpec(
        key=key,
        source=Source.K8S_PODGROUP,
        policy=policy,
        min_member=min_member,
        topology=topology,
        priority_class=spec.get("priorityClassName") or None,
        priority=priority,
        preemption_policy=preemption_policy if isinstance(preemption_policy, str) else None,
        disruption=disruption,
        resource_claims=claims,
        owner=owner,
    )
