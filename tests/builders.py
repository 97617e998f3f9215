"""Builders for plain Kubernetes objects used across the tests (raw dicts, as the API serves them)."""

from __future__ import annotations

from typing import Any


def make_node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    gpu: str | None = None,
    rack: str | None = None,
    block: str | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    taints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpu is not None:
        alloc["nvidia.com/gpu"] = gpu
    lab = {"kubernetes.io/hostname": name}
    if rack:
        lab["topology.kubernetes.io/rack"] = rack
    if block:
        lab["example.com/block"] = block
    lab.update(labels or {})
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": lab},
        "spec": {},
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    if taints:
        node["spec"]["taints"] = taints
    return node


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    node: str | None = None,
    scheduling_group: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    req = {"cpu": cpu, "memory": memory}
    if gpu is not None:
        req["nvidia.com/gpu"] = gpu
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if uid:
        meta["uid"] = uid
    if owner:
        meta["ownerReferences"] = [controller_ref(owner)]
    spec: dict[str, Any] = {
        "schedulerName": "gang-scheduler",
        "containers": [{"name": "main", "image": "sleep:v0.1.0", "resources": {"requests": req}}],
    }
    if node:
        spec["nodeName"] = node
    if scheduling_group:
        spec["schedulingGroup"] = {"podGroupName": scheduling_group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference a controller writes into what it makes of `owner`."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"].get("uid", ""),
        "controller": True,
    }


def make_job(
    name: str,
    *,
    parallelism: int,
    min_member: int | None = None,
    uid: str | None = None,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A batch Job of `parallelism` completions, its KAI batch-min-member annotation `min_member`."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"{name}-uid"}
    if labels:
        meta["labels"] = dict(labels)
    if min_member is not None:
        meta["annotations"] = {"kai.scheduler/batch-min-member": str(min_member)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": {}}},
        "status": {},
    }


def make_kai_podgroup(
    name: str,
    *,
    namespace: str = "default",
    min_member: int | None = None,
    subgroups: list[dict[str, Any]] | None = None,
    topology: dict[str, Any] | None = None,
    queue: str = "default-queue",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": queue}
    if min_member is not None:
        spec["minMember"] = min_member
    if subgroups:
        spec["subGroups"] = subgroups
    if topology:
        spec["topologyConstraint"] = topology
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def gang_pod(name: str, group: str, **kw: Any) -> dict[str, Any]:
    """A bare pod joining an external KAI PodGroup (the user-managed path)."""
    ann = {"pod-group-name": group, **kw.pop("annotations", {})}
    return make_pod(name, annotations=ann, **kw)


def rack_cluster(
    *, racks: int = 2, nodes_per_rack: int = 4, blocks: int = 1, cpu: str = "8"
) -> list[dict[str, Any]]:
    """Nodes n-<block>-<rack>-<i> in racks r<b><r> of blocks b<b>."""
    out = []
    for b in range(blocks):
        for r in range(racks):
            for i in range(nodes_per_rack):
                out.append(make_node(f"n{b}{r}{i}", cpu=cpu, rack=f"r{b}{r}", block=f"b{b}"))
    return out
