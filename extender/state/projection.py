"""What the store keeps of each object: the fields the decisions read, nothing else.

An API server's pod carries managedFields, container images, commands, env, probes, volumes and a
full status; a node carries its image list, addresses and every condition. None of it is read
here, and at 150,000 pods it is most of the service's memory. `project` is applied where objects
enter the store (`ClusterStore.upsert`, which every list item and watch event goes through, and
each list page of the live source as it is decoded, so a page's raw objects are dropped at once).

Pods and nodes are cut to what `extender/` reads of them (grouping, resources, nodematch,
podaffinity, priority, disruption, the scheduler); any other kind loses only its managedFields
and the last-applied annotation: they are few, and grouping reads their specs and statuses deeply.
Kept parts are shared with the source object, not copied. A field of an unexpected shape is kept
as it came, so the decisions report it as they would have on the whole object.

tests/state/test_projection.py runs the decisions on whole objects and on their projections.
"""

from __future__ import annotations

from typing import Any

from extender.model.keys import api_group

DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
)
POD_SPEC = (
    "nodeName",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "nodeSelector",
    "tolerations",
    "affinity",
    "schedulingGates",
    "schedulingGroup",
    "overhead",
    "resources",
)
CONTAINER = ("name", "resources", "restartPolicy")
POD_STATUS = ("phase",)
NODE_METADATA = ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels")
NODE_SPEC = ("unschedulable", "taints")


def project(obj: dict[str, Any]) -> dict[str, Any]:
    """The part of `obj` the store keeps; a new top-level mapping, sharing the kept values."""
    kind = obj.get("kind")
    if not api_group(str(obj.get("apiVersion", ""))):
        if kind == "Pod":
            return project_pod(obj)
        if kind == "Node":
            return project_node(obj)
    return project_other(obj)


def _pick(part: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(part, dict):
        return part
    return {f: part[f] for f in fields if f in part}


def _annotations(meta: dict[str, Any]) -> None:
    notes = meta.get("annotations")
    if isinstance(notes, dict) and not DROPPED_ANNOTATIONS.isdisjoint(notes):
        meta["annotations"] = {k: v for k, v in notes.items() if k not in DROPPED_ANNOTATIONS}


def _containers(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [_pick(c, CONTAINER) for c in value]


def _pod_condition_read(cond: Any) -> bool:
    """PodScheduled=False (kube-scheduler's last attempt failed) and DisruptionTarget (an eviction or
    preemption under way) are the pod conditions read; a bound pod's PodScheduled=True, Ready and
    the rest are not, and every running pod has them."""
    if not isinstance(cond, dict):
        return True
    kind = cond.get("type")
    return kind == "DisruptionTarget" or (kind == "PodScheduled" and cond.get("status") != "True")


def project_pod(pod: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind")}
    if "metadata" in pod:
        out["metadata"] = meta = _pick(pod["metadata"], POD_METADATA)
        if isinstance(meta, dict):
            _annotations(meta)
    if "spec" in pod:
        spec = pod["spec"]
        out["spec"] = kept = _pick(spec, POD_SPEC)
        if isinstance(spec, dict):
            for field in ("containers", "initContainers"):
                if field in spec:
                    kept[field] = _containers(spec[field])
    if "status" in pod:
        status = pod["status"]
        out["status"] = kept = _pick(status, POD_STATUS)
        if isinstance(status, dict):
            conds = status.get("conditions")
            if isinstance(conds, list):
                read = [c for c in conds if _pod_condition_read(c)]
                if read:
                    kept["conditions"] = read
            elif conds is not None:
                kept["conditions"] = conds
    return out


def project_node(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": node.get("apiVersion"), "kind": node.get("kind")}
    if "metadata" in node:
        out["metadata"] = _pick(node["metadata"], NODE_METADATA)
    if "spec" in node:
        out["spec"] = _pick(node["spec"], NODE_SPEC)
    if "status" in node:
        status = node["status"]
        if not isinstance(status, dict):
            out["status"] = status
        else:
            kept = _pick(status, ("allocatable", "capacity"))  # capacity stands in for no allocatable
            conds = status.get("conditions")
            if isinstance(conds, list):
                ready = [c for c in conds if not isinstance(c, dict) or c.get("type") == "Ready"]
                if ready:
                    kept["conditions"] = ready
            elif conds is not None:
                kept["conditions"] = conds
            out["status"] = kept
    return out


def project_other(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    notes = meta.get("annotations")
    if "managedFields" not in meta and not (
        isinstance(notes, dict) and not DROPPED_ANNOTATIONS.isdisjoint(notes)
    ):
        return obj
    out = dict(obj)
    out["metadata"] = kept = {k: v for k, v in meta.items() if k != "managedFields"}
    _annotations(kept)
    return out
