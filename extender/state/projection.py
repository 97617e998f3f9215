"""What the store keeps of each object: the fields the decisions read, nothing else.

An API server's pod carries managedFields, container images, commands, env, probes, volumes and a
full status; a node carries its image list, addresses and every condition. None of it is read
here, and at 150,000 pods it is most of the service's memory. The sources apply `project` where
objects enter the store: the live source to every listed item as its page is decoded (so a page's
whole objects are dropped with the page) and to every watch event, the embedded cluster to every
object it feeds (it keeps the whole objects itself, as an API server does). A listed page of pods
or nodes is decoded into the kept fields alone (`page_decoder`): the rest is never built as objects.

Pods and nodes are cut to what `extender/` reads of them (grouping, resources, nodematch,
podaffinity, priority, disruption, the scheduler); any other kind loses only its managedFields
and the last-applied annotation: they are few, and grouping reads their specs and statuses deeply.
Parts equal across many nodes (taints, allocatable) are kept once (`shared`); a pod's are kept
once by the store, which keeps pods compact. A field of an unexpected shape is kept
as it came, so the decisions report it as they would have on the whole object.

tests/state/test_projection.py runs the decisions on whole objects and on their projections.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypedDict

import msgspec
import orjson

from extender.model.cycle import PROJECTED, cycle_needed
from extender.model.keys import api_group
from extender.model.labels import DEFAULT_SCHEDULER_NAME

DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

POD_METADATA = (  # not resourceVersion: the watch reads it from the event, and nothing else does
    "name",
    "namespace",
    "uid",
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
    PROJECTED,
)
CONTAINER = ("name", "resources", "restartPolicy")
CYCLE_READ = ("volumes", "resourceClaims", "topologySpreadConstraints")
"""Spec fields read only to tell whether a pending pod needs kube-scheduler's own cycle before it is
bound (model.cycle); the answer is kept, not they. A listed page leaves them (and the containers'
ports) undecoded."""
POD_STATUS = ("phase", "nominatedNodeName")
NODE_METADATA = ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels")
NODE_SPEC = ("unschedulable", "taints")
NODE_STATUS = ("allocatable", "capacity", "conditions")


_SHARED_KEPT = 4096  # recent parts; a list brings a workload's pods together
_shared_parts: OrderedDict[bytes, Any] = OrderedDict()


def sized(encoded: bytes) -> bytes:
    """`encoded` in a buffer of its own length: orjson answers in a 4 KiB buffer, however short the
    JSON, and a key kept in a cache would keep all of it (thousands of keys, megabytes)."""
    return bytes(memoryview(encoded))


def shared(value: Any) -> Any:
    """One object for every equal `value`: a Deployment's pods carry the same tolerations, owner,
    labels and container resources, and 150,000 copies of each cost more than the rest of a pod.

    The canonical copy is decoded from the encoding, so it is no source's object: a source that
    edits its own objects in place (the embedded cluster) never edits another pod's part. Nothing
    may edit a stored object's parts in place; sources replace objects, they do not patch them.
    """
    if not value or not isinstance(value, (dict, list)):
        return value
    try:
        encoded = orjson.dumps(value)
    except orjson.JSONEncodeError:  # nested past orjson's depth limit: kept as it came
        return value
    found = _shared_parts.get(encoded)
    if found is not None:
        _shared_parts.move_to_end(encoded)
        return found
    found = _shared_parts[sized(encoded)] = orjson.loads(encoded)
    if len(_shared_parts) > _SHARED_KEPT:
        _shared_parts.popitem(last=False)
    return found


def _name(value: Any) -> Any:
    """Node names, namespaces and the like, one string each."""
    return sys.intern(value) if type(value) is str else value


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


# A pod's parts that pods have alike are kept once by the store (`store.PodRecord.keep`, in shared
# templates); the projection only interns the strings a record keeps of its own.
_NAMED_POD_METADATA = ("namespace", "creationTimestamp")
# Values every reader takes an absent field for (queues._another_schedulers, priority.may_preempt):
# left out, pods that differ only there share one template.
_DEFAULT_POD_SPEC = (("schedulerName", DEFAULT_SCHEDULER_NAME), ("preemptionPolicy", "PreemptLowerPriority"))
_POD_SPEC_DEFAULTS = dict(_DEFAULT_POD_SPEC)


def _pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The kept spec, built in one pass."""
    kept: dict[str, Any] = {}
    for field in POD_SPEC:
        if field in spec:
            value = spec[field]
            if field in _POD_SPEC_DEFAULTS and value == _POD_SPEC_DEFAULTS[field]:
                continue
            kept[field] = value
    if "nodeName" in kept:
        kept["nodeName"] = _name(kept["nodeName"])
    if not kept.get("nodeName") and PROJECTED not in kept:  # pending: a bound pod is never released
        why = _cycle_reason(spec)
        if why:
            kept[PROJECTED] = why
    for field in ("containers", "initContainers"):
        if field in spec:
            kept[field] = _containers(spec[field])
    return kept


def _loaded(value: Any) -> Any:
    """A part a listed page left undecoded, decoded now (only a pending pod's are)."""
    return orjson.loads(bytes(value)) if isinstance(value, msgspec.Raw) else value


def _cycle_reason(spec: dict[str, Any]) -> str:
    try:
        probe = {f: _loaded(spec[f]) for f in (*CYCLE_READ, "schedulingGates", "affinity") if f in spec}
        for field in ("containers", "initContainers"):
            listed = spec.get(field)
            if isinstance(listed, list):
                probe[field] = [
                    {"ports": _loaded(c["ports"])} if isinstance(c, dict) and "ports" in c else c
                    for c in listed
                ]
    except orjson.JSONDecodeError:  # nested past orjson's depth: nothing to vouch for it with
        return "its spec is nested too deeply to read"
    return cycle_needed({"spec": probe})


def project_pod(pod: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind")}
    if "metadata" in pod:
        out["metadata"] = meta = _pick(pod["metadata"], POD_METADATA)
        if isinstance(meta, dict):
            _annotations(meta)
            for field in _NAMED_POD_METADATA:
                if field in meta:
                    meta[field] = _name(meta[field])
    if "spec" in pod:
        spec = pod["spec"]
        out["spec"] = _pod_spec(spec) if isinstance(spec, dict) else spec
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
    out: dict[str, Any] = {"apiVersion": _name(node.get("apiVersion")), "kind": _name(node.get("kind"))}
    if "metadata" in node:
        out["metadata"] = meta = _pick(node["metadata"], NODE_METADATA)
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if isinstance(labels, dict):
            # zone, rack, os, instance type: one string each across nodes, and the hostname the name's
            if "name" in meta:
                meta["name"] = _name(meta["name"])
            meta["labels"] = {_name(k): _name(v) for k, v in labels.items()}
    if "spec" in node:
        out["spec"] = kept = _pick(node["spec"], NODE_SPEC)
        if isinstance(kept, dict) and "taints" in kept:
            kept["taints"] = shared(kept["taints"])
    if "status" in node:
        status = node["status"]
        if not isinstance(status, dict):
            out["status"] = status
        else:
            # capacity stands in for a missing allocatable (resources.node_allocatable)
            kept = {f: shared(status[f]) for f in ("allocatable", "capacity") if f in status}
            conds = status.get("conditions")
            if isinstance(conds, list):
                # only Ready's status is read; its heartbeat times would make every node's differ
                ready = [
                    _pick(c, ("type", "status"))
                    for c in conds
                    if not isinstance(c, dict) or c.get("type") == "Ready"
                ]
                if ready:
                    kept["conditions"] = shared(ready)
            elif conds is not None:
                kept["conditions"] = conds
            out["status"] = kept
    return out


def _fields(name: str, fields: tuple[str, ...], **typed: Any) -> Any:
    """A TypedDict of `fields` (any JSON value each) whose decoding skips every other key."""
    return TypedDict(name, {**dict.fromkeys(fields, Any), **typed}, total=False)


_Container = _fields("Container", CONTAINER, ports=msgspec.Raw)
_Pod = _fields(
    "Pod",
    ("apiVersion", "kind"),
    metadata=_fields("PodMetadata", POD_METADATA),
    spec=_fields(
        "PodSpec",
        POD_SPEC,
        containers=list[_Container],
        initContainers=list[_Container],
        **dict.fromkeys(CYCLE_READ, msgspec.Raw),
    ),
    status=_fields("PodStatus", (*POD_STATUS, "conditions")),
)
_Node = _fields(
    "Node",
    ("apiVersion", "kind"),
    metadata=_fields("NodeMetadata", NODE_METADATA),
    spec=_fields("NodeSpec", NODE_SPEC),
    status=_fields("NodeStatus", NODE_STATUS),
)
_PAGE_DECODERS = {
    "Pod": msgspec.json.Decoder(_fields("PodList", ("metadata",), items=list[_Pod])),
    "Node": msgspec.json.Decoder(_fields("NodeList", ("metadata",), items=list[_Node])),
}
_ITEM_DECODERS = {"Pod": msgspec.json.Decoder(_Pod), "Node": msgspec.json.Decoder(_Node)}


def _lenient(decoder: Any) -> Callable[[bytes], dict[str, Any] | None]:
    def decode(data: bytes) -> dict[str, Any] | None:
        try:
            return decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return None  # decoded again whole: a shape kept as it came, or the JSON error as always

    return decode


def page_decoder(kind: str) -> Callable[[bytes], dict[str, Any] | None] | None:
    """For a core list of pods or nodes: a decoder of one page that builds only the fields `project`
    keeps (a served pod is mostly managedFields, images, env, probes and status, and decoding them
    into objects cost as much as the rest of the sync). It answers None for a page of another shape
    (a part that is not a mapping, an item that is not an object): decode that one whole and project
    it, which keeps or reports such fields as they came. Its items still go through `project`."""
    decoder = _PAGE_DECODERS.get(kind)
    return None if decoder is None else _lenient(decoder)


def item_decoder(kind: str) -> Callable[[bytes], dict[str, Any] | None] | None:
    """`page_decoder`'s counterpart for one core pod or node in JSON (an item of a cluster file)."""
    decoder = _ITEM_DECODERS.get(kind)
    return None if decoder is None else _lenient(decoder)


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
