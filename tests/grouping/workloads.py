"""A small workload expander for grouping tests: the Jobs and pods a JobSet, Job or PyTorchJob
would create, with the owner references and labels their controllers write."""

from __future__ import annotations

import copy
from typing import Any

from extender.grouping import GroupingError, compile_jobset
from extender.model import labels as keys
from extender.model.keys import object_uid


def _owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": object_uid(owner),
        "controller": True,
    }


def _pod(name: str, ns: str, template: dict[str, Any], owner: dict[str, Any], extra_labels: dict) -> dict:
    tmeta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {**(tmeta.get("labels") or {}), **extra_labels},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [_owner_ref(owner)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def job_pods(job: dict[str, Any], extra_labels: dict | None = None) -> list[dict]:
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    count = parallelism if completions is None else min(parallelism, completions)
    ns = job["metadata"].get("namespace", "default")
    name = job["metadata"]["name"]
    return [
        _pod(
            f"{name}-{i}",
            ns,
            spec.get("template") or {},
            job,
            {**(extra_labels or {}), keys.JOB_NAME: name, keys.JOB_COMPLETION_INDEX: str(i)},
        )
        for i in range(count)
    ]


def expand(obj: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """(intermediate owners, pods) the workload's controllers would create."""
    kind = obj.get("kind")
    if kind == "Job":
        return [], job_pods(obj)
    if kind == "JobSet":
        return _expand_jobset(obj)
    if kind == "PyTorchJob":
        return [], _expand_pytorch(obj)
    return [], []


def _expand_jobset(js: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    ns = js["metadata"].get("namespace", "default")
    name = js["metadata"]["name"]
    compiled = None
    if js["spec"].get("scheduling") is not None and not js["spec"].get("suspend"):
        try:
            compiled = compile_jobset(js)
        except GroupingError:
            compiled = None
    jobs, pods = [], []
    for rj in js["spec"]["replicatedJobs"]:
        tmpl = rj.get("template") or {}
        for j in range(rj.get("replicas", 1)):
            jl = {
                keys.JOBSET_NAME: name,
                keys.REPLICATED_JOB_NAME: rj["name"],
                keys.JOB_INDEX: str(j),
            }
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rj['name']}-{j}",
                    "namespace": ns,
                    "labels": {**((tmpl.get("metadata") or {}).get("labels") or {}), **jl},
                    "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [_owner_ref(js)],
                },
                "spec": copy.deepcopy(tmpl.get("spec") or {}),
            }
            jobs.append(job)
            job_pod_list = job_pods(job, jl)
            if compiled is not None:
                pg = compiled.group_of(rj["name"], j).partition("/")[2]
                for p in job_pod_list:
                    p["spec"]["schedulingGroup"] = {"podGroupName": pg}
            pods.extend(job_pod_list)
    return jobs, pods


def _expand_pytorch(job: dict[str, Any]) -> list[dict]:
    ns = job["metadata"].get("namespace", "default")
    name = job["metadata"]["name"]
    pods = []
    for role, rs in job["spec"]["pytorchReplicaSpecs"].items():
        for i in range(rs.get("replicas", 1)):
            pods.append(
                _pod(
                    f"{name}-{role.lower()}-{i}",
                    ns,
                    rs.get("template") or {},
                    job,
                    {keys.PYTORCH_REPLICA_TYPE: role.lower(), keys.PYTORCH_REPLICA_INDEX: str(i)},
                )
            )
    return pods
