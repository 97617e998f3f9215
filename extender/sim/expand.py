"""What workload controllers would create: a simulated Job, JobSet and PyTorchJob controller.

The simulator has no controllers, so this module plays their part once: a batch Job becomes its
pods, a JobSet its child Jobs and their pods (with exactly the labels and annotations the JobSet
controller writes), a PyTorchJob its master and worker pods. Every created object carries a
controller ownerReference to its creator, so grouping can walk the owner chain as it would on a
real cluster. Everything else (bare Pods, PodGroups, Topologies, Nodes, unknown kinds) passes
through unchanged.

Sequenced startup (JobSet `startupPolicyOrder: InOrder` or `dependsOn`) holds back the child Jobs
of later replicatedJobs; `Expansion.release` creates them once their predecessors are Ready
(in the simulator: every pod bound) or Complete (no pod ever finishes here, so bound counts too).

Output is deterministic for a given seed: UIDs and pod-name suffixes come from a seeded RNG; a
workload without a UID gets the same stand-in the grouping layer computes (`object_uid`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from extender.model import labels as L
from extender.model.keys import PodKey, api_group, object_uid, pod_key

DEFAULT_SCHEDULER = "gang-scheduler"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
GROUP_NAME = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX = "jobset.sigs.k8s.io/job-group-index"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
CONTROLLER_UID_LEGACY = "controller-uid"
PYTORCH_OPERATOR_NAME = "training.kubeflow.org/operator-name"
PYTORCH_JOB_ROLE = "training.kubeflow.org/job-role"

# Kubernetes' generateName alphabet (no vowels, no look-alikes)
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class ExpandError(ValueError):
    """A workload the simulated controller cannot expand; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Workload:
    """A top-level object the user applied, as the report names it."""

    kind: str
    namespace: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclasses.dataclass
class _HeldStep:
    """A JobSet replicatedJob whose Jobs wait for a predecessor to be Ready/Complete."""

    jobset: dict[str, Any]
    rjob_name: str
    after: str  # the replicatedJob it waits for
    condition: str  # "Ready" or "Complete"


@dataclasses.dataclass
class Expansion:
    """Everything the simulated controllers created, plus the steps they still hold back.

    `objects` is what to load into the cluster now, in creation order (workloads before the
    objects they own). `pods` are the pods among them; `workload_of` names each pod's top owner.
    """

    objects: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    workload_of: dict[PodKey, Workload]
    workloads: list[Workload]
    problems: list[str]
    _held: list[_HeldStep] = dataclasses.field(default_factory=list)
    _pods_of_rjob: dict[tuple[str, str, str], list[PodKey]] = dataclasses.field(default_factory=dict)
    _controller: _Controllers | None = None

    def held(self) -> list[str]:
        """ "ns/jobset/rjob" for every replicatedJob still waiting on its predecessor."""
        out = []
        for step in self._held:
            meta = step.jobset["metadata"]
            out.append(f"{meta.get('namespace', '')}/{meta['name']}/{step.rjob_name}")
        return out

    def release(self, is_ready: Callable[[PodKey], bool]) -> list[dict[str, Any]]:
        """Create the Jobs and pods of held replicatedJobs whose predecessor is now Ready.

        `is_ready(pod_key)` says whether one pod counts as ready (the simulator: bound). A
        replicatedJob with no pods (suspended, parallelism 0) counts as ready. Returns the new
        objects in creation order; they are also appended to `objects` and `pods`.
        """
        created: list[dict[str, Any]] = []
        progressed = True
        while progressed and self._held:
            progressed = False
            for step in list(self._held):
                meta = step.jobset["metadata"]
                key = (meta.get("namespace", ""), meta["name"], step.after)
                if key not in self._pods_of_rjob:
                    continue  # the predecessor itself has not been created yet
                if not all(is_ready(p) for p in self._pods_of_rjob[key]):
                    continue
                self._held.remove(step)
                assert self._controller is not None
                new = self._controller.jobset_rjob(step.jobset, step.rjob_name, self)
                created.extend(new)
                progressed = True
        return created


class _Controllers:
    """The simulated controllers, sharing one seeded RNG so a run is reproducible."""

    def __init__(self, *, seed: int, scheduler_name: str) -> None:
        self._rng = random.Random(seed)
        self._scheduler_name = scheduler_name

    # identity ---------------------------------------------------------------------------------

    def uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def suffix(self) -> str:
        return "".join(self._rng.choice(_SUFFIX_ALPHABET) for _ in range(5))

    # pods -------------------------------------------------------------------------------------

    def pod(
        self,
        template: dict[str, Any],
        *,
        name: str,
        namespace: str,
        owner: dict[str, Any],
        labels: dict[str, str],
        annotations: dict[str, str],
        hostname: str | None = None,
    ) -> dict[str, Any]:
        meta_t = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        spec.setdefault("schedulerName", self._scheduler_name)
        if hostname:
            spec.setdefault("hostname", hostname)
        pod_labels = {**(meta_t.get("labels") or {}), **labels}
        pod_annotations = {**(meta_t.get("annotations") or {}), **annotations}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": self.uid(),
                "labels": pod_labels,
                "annotations": pod_annotations,
                "ownerReferences": [_owner_ref(owner)],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }

    # batch/v1 Job -----------------------------------------------------------------------------

    def job_pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        meta = job["metadata"]
        spec = job.get("spec") or {}
        where = f"Job {meta.get('namespace', '')}/{meta['name']}"
        if spec.get("suspend") is True:
            return []
        parallelism = _count(spec.get("parallelism", 1), where=f"{where}: spec.parallelism")
        completions_raw = spec.get("completions")
        n = parallelism
        if completions_raw is not None:
            n = min(n, _count(completions_raw, where=f"{where}: spec.completions"))
        template = spec.get("template")
        if not isinstance(template, dict):
            raise ExpandError(f"{where}: spec.template is missing; a Job needs a pod template")
        indexed = spec.get("completionMode") == "Indexed"
        uid = meta["uid"]
        base = {
            L.CONTROLLER_UID: uid,
            CONTROLLER_UID_LEGACY: uid,
            L.JOB_NAME: meta["name"],
            L.JOB_NAME_LEGACY: meta["name"],
        }
        subdomain = (template.get("spec") or {}).get("subdomain")
        pods = []
        for i in range(n):
            labels = dict(base)
            annotations: dict[str, str] = {}
            hostname = None
            if indexed:
                labels[L.JOB_COMPLETION_INDEX] = str(i)
                annotations[L.JOB_COMPLETION_INDEX] = str(i)
                name = f"{meta['name']}-{i}-{self.suffix()}"
                if subdomain:
                    hostname = f"{meta['name']}-{i}"
            else:
                name = f"{meta['name']}-{self.suffix()}"
            pods.append(
                self.pod(
                    template,
                    name=name,
                    namespace=meta.get("namespace", "default"),
                    owner=job,
                    labels=labels,
                    annotations=annotations,
                    hostname=hostname,
                )
            )
        return pods

    # JobSet ----------------------------------------------------------------------------------

    def jobset_rjob(self, js: dict[str, Any], rjob_name: str, out: Expansion) -> list[dict[str, Any]]:
        """The child Jobs of one replicatedJob, then their pods; recorded into `out`."""
        meta = js["metadata"]
        ns = meta.get("namespace", "default")
        rjobs = js["spec"]["replicatedJobs"]
        rjob = next(r for r in rjobs if r["name"] == rjob_name)
        created: list[dict[str, Any]] = []
        pod_keys: list[PodKey] = []
        for idx in range(_replicas(rjob, js)):
            job = self.child_job(js, rjob, idx)
            created.append(job)
            pods = self.job_pods(job)
            created.extend(pods)
            for p in pods:
                key = pod_key(ns, p["metadata"]["name"])
                pod_keys.append(key)
                out.workload_of[key] = Workload("JobSet", ns, meta["name"])
            out.pods.extend(pods)
        out._pods_of_rjob[(ns, meta["name"], rjob_name)] = pod_keys
        out.objects.extend(created)
        return created

    def child_job(self, js: dict[str, Any], rjob: dict[str, Any], idx: int) -> dict[str, Any]:
        meta = js["metadata"]
        spec = js.get("spec") or {}
        ns = meta.get("namespace", "default")
        rtemplate = rjob.get("template") or {}
        rmeta = rtemplate.get("metadata") or {}
        job_name = f"{meta['name']}-{rjob['name']}-{idx}"
        stamp = self._jobset_stamp(js, rjob, idx, job_name=job_name)
        exclusive = {}
        for source in (meta.get("annotations") or {}, rmeta.get("annotations") or {}):
            if EXCLUSIVE_TOPOLOGY in source:
                exclusive[EXCLUSIVE_TOPOLOGY] = source[EXCLUSIVE_TOPOLOGY]
                if NODE_SELECTOR_STRATEGY in source:
                    exclusive[NODE_SELECTOR_STRATEGY] = source[NODE_SELECTOR_STRATEGY]
        job_spec = copy.deepcopy(rtemplate.get("spec") or {})
        pod_template = job_spec.setdefault("template", {})
        pt_meta = pod_template.setdefault("metadata", {})
        pt_meta["labels"] = {**(pt_meta.get("labels") or {}), **stamp}
        pt_meta["annotations"] = {**(pt_meta.get("annotations") or {}), **stamp, **exclusive}
        network = spec.get("network") or {}
        if network.get("enableDNSHostnames") is True:
            pod_template.setdefault("spec", {})["subdomain"] = network.get("subdomain") or meta["name"]
        job_spec["suspend"] = spec.get("suspend") is True
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": ns,
                "uid": self.uid(),
                "labels": {**(rmeta.get("labels") or {}), **stamp},
                "annotations": {**(rmeta.get("annotations") or {}), **stamp, **exclusive},
                "ownerReferences": [_owner_ref(js)],
            },
            "spec": job_spec,
        }

    def _jobset_stamp(
        self, js: dict[str, Any], rjob: dict[str, Any], idx: int, *, job_name: str
    ) -> dict[str, str]:
        """The labels the JobSet controller puts on a child Job and its pod template (also as annotations)."""
        meta = js["metadata"]
        spec = js.get("spec") or {}
        ns = meta.get("namespace", "default")
        rjobs = spec["replicatedJobs"]
        global_index = 0
        for r in rjobs:
            if r["name"] == rjob["name"]:
                break
            global_index += _replicas(r, js)
        group = rjob.get("groupName") or "default"
        group_members = [r for r in rjobs if (r.get("groupName") or "default") == group]
        group_index = 0
        for r in group_members:
            if r["name"] == rjob["name"]:
                break
            group_index += _replicas(r, js)
        stamp = {
            L.JOBSET_NAME: meta["name"],
            L.REPLICATED_JOB_NAME: rjob["name"],
            L.RESTART_ATTEMPT: str((js.get("status") or {}).get("restarts", 0)),
            L.REPLICATED_JOB_REPLICAS: str(_replicas(rjob, js)),
            L.GLOBAL_REPLICAS: str(sum(_replicas(r, js) for r in rjobs)),
            L.JOB_INDEX: str(idx),
            # upstream jobHashKey: SHA1 hex of "<namespace>/<jobName>"
            L.JOB_KEY: hashlib.sha1(f"{ns}/{job_name}".encode()).hexdigest(),
            L.JOB_GLOBAL_INDEX: str(global_index + idx),
            L.JOBSET_UID: meta["uid"],
            GROUP_NAME: group,
            GROUP_REPLICAS: str(sum(_replicas(r, js) for r in group_members)),
            JOB_GROUP_INDEX: str(group_index + idx),
        }
        coordinator = spec.get("coordinator")
        if isinstance(coordinator, dict) and coordinator.get("replicatedJob"):
            subdomain = (spec.get("network") or {}).get("subdomain") or meta["name"]
            stamp[COORDINATOR] = (
                f"{meta['name']}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}"
                f"-{coordinator.get('podIndex', 0)}.{subdomain}"
            )
        return stamp

    # kubeflow.org/v1 PyTorchJob ---------------------------------------------------------------

    def pytorch_pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        meta = job["metadata"]
        spec = job.get("spec") or {}
        where = f"PyTorchJob {meta.get('namespace', '')}/{meta['name']}"
        if (spec.get("runPolicy") or {}).get("suspend") is True:
            return []
        replica_specs = spec.get("pytorchReplicaSpecs")
        if not isinstance(replica_specs, dict) or not replica_specs:
            raise ExpandError(f"{where}: spec.pytorchReplicaSpecs must map Master/Worker to replica specs")
        pods = []
        # the operator creates Master before Worker; keep that order whatever the file says
        order = sorted(replica_specs, key=lambda t: (t.lower() != "master", t.lower()))
        for rtype in order:
            rspec = replica_specs[rtype]
            if not isinstance(rspec, dict):
                raise ExpandError(f"{where}: spec.pytorchReplicaSpecs.{rtype} must be a map")
            n = _count(rspec.get("replicas", 1), where=f"{where}: spec.pytorchReplicaSpecs.{rtype}.replicas")
            template = rspec.get("template")
            if not isinstance(template, dict):
                raise ExpandError(f"{where}: spec.pytorchReplicaSpecs.{rtype}.template is missing")
            lower = rtype.lower()
            for i in range(n):
                labels = {
                    PYTORCH_OPERATOR_NAME: "pytorchjob-controller",
                    L.PYTORCH_JOB_NAME: meta["name"],
                    L.PYTORCH_REPLICA_TYPE: lower,
                    L.PYTORCH_REPLICA_INDEX: str(i),
                }
                if lower == "master":
                    labels[PYTORCH_JOB_ROLE] = "master"
                pods.append(
                    self.pod(
                        template,
                        name=f"{meta['name']}-{lower}-{i}",
                        namespace=meta.get("namespace", "default"),
                        owner=job,
                        labels=labels,
                        annotations={},
                    )
                )
        return pods


def expand(
    objects: Iterable[dict[str, Any]], *, seed: int = 0, scheduler_name: str = DEFAULT_SCHEDULER
) -> Expansion:
    """Expand workloads into what their controllers create; see the module docstring.

    Objects with the same kind, namespace and name replace earlier ones, as `kubectl apply` of
    the files in order would (so a scale patch after its JobSet leaves the scaled JobSet). A
    workload that cannot be expanded is skipped and named in `problems`; the rest still run.
    """
    ctl = _Controllers(seed=seed, scheduler_name=scheduler_name)
    out = Expansion(objects=[], pods=[], workload_of={}, workloads=[], problems=[], _controller=ctl)
    for i, raw in enumerate(_last_applied(objects, problems=out.problems)):
        obj = copy.deepcopy(raw)
        meta = obj.setdefault("metadata", {})
        kind = obj.get("kind", "")
        ns = meta.get("namespace")
        if kind in ("Job", "JobSet", "PyTorchJob", "Pod"):
            if not ns:
                ns = meta["namespace"] = "default"
            if not meta.get("uid"):
                # the grouping layer's stand-in, so derived group names match what it computes
                meta["uid"] = object_uid(obj)
        group = api_group(str(obj.get("apiVersion", "")))
        try:
            if kind == "Job" and group == "batch":
                pods = ctl.job_pods(obj)
                _record(out, obj, pods=pods, workload=Workload("Job", ns or "", meta["name"]))
            elif kind == "JobSet" and group == "jobset.x-k8s.io":
                _expand_jobset(ctl, obj, out)
            elif kind == "PyTorchJob" and group == "kubeflow.org":
                pods = ctl.pytorch_pods(obj)
                _record(out, obj, pods=pods, workload=Workload("PyTorchJob", ns or "", meta["name"]))
            elif kind == "Pod" and group == "":
                obj.setdefault("spec", {}).setdefault("schedulerName", scheduler_name)
                obj.setdefault("status", {}).setdefault("phase", "Pending")
                _record(out, obj, pods=[], workload=Workload("Pod", ns or "", meta["name"]), bare=True)
            else:
                out.objects.append(obj)
        except ExpandError as exc:
            out.problems.append(f"object #{i + 1}: {exc}; skipped")
        except (KeyError, TypeError, AttributeError) as exc:
            out.problems.append(
                f"object #{i + 1} ({kind} {meta.get('name', '?')}): malformed near {exc!s}; skipped"
            )
    return out


def _record(
    out: Expansion, obj: dict[str, Any], *, pods: list[dict[str, Any]], workload: Workload, bare: bool = False
) -> None:
    out.objects.append(obj)
    out.workloads.append(workload)
    if bare:
        pods = [obj]
    else:
        out.objects.extend(pods)
    out.pods.extend(pods)
    for p in pods:
        out.workload_of[pod_key(p["metadata"]["namespace"], p["metadata"]["name"])] = workload


def _expand_jobset(ctl: _Controllers, js: dict[str, Any], out: Expansion) -> None:
    meta = js["metadata"]
    where = f"JobSet {meta['namespace']}/{meta.get('name', '?')}"
    spec = js.get("spec")
    if not isinstance(spec, dict):
        raise ExpandError(f"{where}: spec is missing")
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise ExpandError(f"{where}: spec.replicatedJobs must be a non-empty list")
    names = []
    for i, r in enumerate(rjobs):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not r["name"]:
            raise ExpandError(f"{where}: spec.replicatedJobs[{i}].name must be a non-empty string")
        if not isinstance(r.get("template"), dict):
            raise ExpandError(f"{where}: spec.replicatedJobs[{i}].template is missing")
        _replicas(r, js)
        names.append(r["name"])
    in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
    steps: list[_HeldStep] = []
    first: list[str] = []
    for i, r in enumerate(rjobs):
        depends = r.get("dependsOn") or []
        if depends:
            dep = depends[0]
            if not isinstance(dep, dict) or dep.get("name") not in names:
                raise ExpandError(
                    f"{where}: spec.replicatedJobs[{i}].dependsOn[0].name must name another replicatedJob"
                )
            steps.append(_HeldStep(js, r["name"], dep["name"], str(dep.get("status", "Ready"))))
        elif in_order and i > 0:
            steps.append(_HeldStep(js, r["name"], rjobs[i - 1]["name"], "Ready"))
        else:
            first.append(r["name"])
    out.objects.append(js)
    out.workloads.append(Workload("JobSet", meta["namespace"], meta["name"]))
    if spec.get("suspend") is True:
        return  # a suspended JobSet's Jobs are created suspended: no pods, nothing to release
    for name in first:
        ctl.jobset_rjob(js, name, out)
    out._held.extend(steps)


def _last_applied(objects: Iterable[Any], *, problems: list[str]) -> list[dict[str, Any]]:
    """Objects in first-seen order, a later object with the same identity replacing the earlier."""
    by_key: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            problems.append(
                f"object #{i + 1}: expected a Kubernetes object (a map), got {type(obj).__name__}"
            )
            continue
        meta = obj.get("metadata")
        if not isinstance(obj.get("kind"), str) or not isinstance(meta, dict) or not meta.get("name"):
            problems.append(f"object #{i + 1}: needs kind and metadata.name; skipped")
            continue
        key = (
            api_group(str(obj.get("apiVersion", ""))),
            obj["kind"],
            str(meta.get("namespace", "")),
            meta["name"],
        )
        by_key[key] = obj  # dict keeps the first insertion position on overwrite
    return list(by_key.values())


def _owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _count(value: Any, *, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ExpandError(f"{where} must be a whole number >= 0, got {value!r}")
    return value


def _replicas(rjob: dict[str, Any], js: dict[str, Any]) -> int:
    where = f"JobSet {js['metadata'].get('namespace', '')}/{js['metadata'].get('name', '?')}"
    return _count(rjob.get("replicas", 1), where=f"{where}: replicatedJobs[{rjob.get('name')}].replicas")
