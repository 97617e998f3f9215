"""kube-scheduler's extender v1 wire format (k8s.io/kube-scheduler/extender/v1), exactly.

The Go structs carry no json tags, so keys are the Go field names (PascalCase) and absent lists
are `null`, never omitted. The prioritize reply is a bare array; the preempt reply always uses
`NodeNameToMetaVictims`, whichever mode the request came in. Every way a body can be wrong
raises WireError with one line an operator can act on; the handler turns it into HTTP 400.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson


class WireError(ValueError):
    """A request that does not follow the extender protocol."""


@dataclasses.dataclass
class ExtenderArgs:
    pod: dict[str, Any]
    node_names: list[str]
    nodes: list[dict[str, Any]] | None  # full Node objects when nodeCacheCapable is false

    @property
    def cache_mode(self) -> bool:
        return self.nodes is None


@dataclasses.dataclass
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@dataclasses.dataclass
class PreemptionArgs:
    pod: dict[str, Any]
    victims: dict[str, dict[str, Any]]  # node -> {"Pods": [{"UID": ...}], "NumPDBViolations": n}


def _loads(body: bytes) -> dict[str, Any]:
    if not body:
        raise WireError("empty request body: expected a JSON object")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError(f"request body must be a JSON object, got {type(doc).__name__}")
    return doc


def _field(doc: dict[str, Any], name: str) -> Any:
    """Go's decoder matches keys case-insensitively; so do we, preferring the exact name."""
    if name in doc:
        return doc[name]
    lower = name.lower()
    for k, v in doc.items():
        if k.lower() == lower:
            return v
    return None


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    pod = _field(doc, "Pod")
    if pod is None:
        raise WireError("missing Pod: the request must carry the pod being scheduled")
    if not isinstance(pod, dict):
        raise WireError(f"Pod must be an object, got {type(pod).__name__}")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise WireError("Pod.metadata.name is missing or not a string")
    ns = meta.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise WireError("Pod.metadata.namespace must be a string")
    spec = pod.get("spec")
    if spec is not None and not isinstance(spec, dict):
        raise WireError("Pod.spec must be an object")
    return pod


def parse_extender_args(body: bytes) -> ExtenderArgs:
    doc = _loads(body)
    pod = _pod(doc)
    names = _field(doc, "NodeNames")
    nodes = _field(doc, "Nodes")
    if names is not None:
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise WireError("NodeNames must be an array of strings or null")
        return ExtenderArgs(pod=pod, node_names=names, nodes=None)
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items", []), list):
            raise WireError('Nodes must be a NodeList object ({"items": [...]}) or null')
        items = nodes.get("items") or []
        node_names = []
        for i, item in enumerate(items):
            name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                raise WireError(f"Nodes.items[{i}].metadata.name is missing or not a string")
            node_names.append(name)
        return ExtenderArgs(pod=pod, node_names=node_names, nodes=items)
    return ExtenderArgs(pod=pod, node_names=[], nodes=None)


_NODES_KEY = b',"Nodes":'


def peek_pod(body: bytes) -> dict[str, Any] | None:
    """The Pod of a filter body without decoding its node list, or None if the shape is unusual.

    Go marshals ExtenderArgs in field order (Pod, Nodes, NodeNames) and escapes quotes inside
    strings, so the first `,"Nodes":` ends the Pod. Any doubt returns None and the caller decodes
    the whole body.
    """
    if not body.startswith(b'{"Pod":'):
        return None
    end = body.find(_NODES_KEY)
    if end < 0:
        return None
    try:
        doc = orjson.loads(body[:end] + b"}")
    except orjson.JSONDecodeError:
        return None
    pod = doc.get("Pod") if isinstance(doc, dict) and len(doc) == 1 else None
    return pod if isinstance(pod, dict) and isinstance((pod.get("metadata") or {}).get("name"), str) else None


def names_contain(body: bytes, node: str) -> bool:
    """Whether `node` is among the NodeNames of a cache-mode body (names need no JSON escaping)."""
    start = body.find(b'"NodeNames":[')
    return start >= 0 and body.find(b'"' + node.encode() + b'"', start) >= 0


def parse_binding_args(body: bytes) -> BindingArgs:
    doc = _loads(body)
    values = {}
    for field in ("PodName", "PodNamespace", "PodUID", "Node"):
        v = _field(doc, field)
        if v is None:
            v = ""
        if not isinstance(v, str):
            raise WireError(f"{field} must be a string, got {type(v).__name__}")
        values[field] = v
    for required in ("PodName", "PodNamespace", "Node"):
        if not values[required]:
            raise WireError(f"missing {required}: a binding needs PodName, PodNamespace and Node")
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


def parse_preemption_args(body: bytes) -> PreemptionArgs:
    doc = _loads(body)
    pod = _pod(doc)
    meta_victims = _field(doc, "NodeNameToMetaVictims")
    full_victims = _field(doc, "NodeNameToVictims")
    victims: dict[str, dict[str, Any]] = {}
    if meta_victims is not None:
        if not isinstance(meta_victims, dict):
            raise WireError("NodeNameToMetaVictims must be an object of node name to MetaVictims")
        for node, v in meta_victims.items():
            if not isinstance(v, dict) or not isinstance(v.get("Pods") or [], list):
                raise WireError(f'NodeNameToMetaVictims[{node!r}] must be {{"Pods": [...], ...}}')
            pods = [{"UID": str(p.get("UID", ""))} for p in v.get("Pods") or [] if isinstance(p, dict)]
            victims[node] = {"Pods": pods, "NumPDBViolations": int(v.get("NumPDBViolations") or 0)}
    elif full_victims is not None:
        if not isinstance(full_victims, dict):
            raise WireError("NodeNameToVictims must be an object of node name to Victims")
        for node, v in full_victims.items():
            if not isinstance(v, dict) or not isinstance(v.get("Pods") or [], list):
                raise WireError(f'NodeNameToVictims[{node!r}] must be {{"Pods": [...], ...}}')
            pods = [
                {"UID": str((p.get("metadata") or {}).get("uid", ""))}
                for p in v.get("Pods") or []
                if isinstance(p, dict)
            ]
            victims[node] = {"Pods": pods, "NumPDBViolations": int(v.get("NumPDBViolations") or 0)}
    return PreemptionArgs(pod=pod, victims=victims)


def filter_result(
    *,
    args: ExtenderArgs,
    passed: list[str],
    failed: dict[str, str] | None,
    unresolvable: dict[str, str] | None,
    error: str = "",
) -> bytes:
    if args.cache_mode:
        doc: dict[str, Any] = {"Nodes": None, "NodeNames": passed}
    else:
        keep = set(passed)
        items = [n for n in args.nodes or [] if n["metadata"]["name"] in keep]
        doc = {"Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    doc["FailedNodes"] = failed or {}
    doc["FailedAndUnresolvableNodes"] = unresolvable or {}
    doc["Error"] = error
    return orjson.dumps(doc)


def filter_error(error: str, *, cache_mode: bool = True) -> bytes:
    return orjson.dumps(
        {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": None,
            "FailedAndUnresolvableNodes": None,
            "Error": error,
        }
    )


def prioritize_result(scores: list[tuple[str, int]]) -> bytes:
    return orjson.dumps([{"Host": host, "Score": max(0, min(10, score))} for host, score in scores])


def binding_result(error: str = "") -> bytes:
    return orjson.dumps({"Error": error})


def preemption_result(victims: dict[str, dict[str, Any]]) -> bytes:
    return orjson.dumps({"NodeNameToMetaVictims": victims})
