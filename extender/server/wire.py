"""kube-scheduler's extender v1 wire format (k8s.io/kube-scheduler/extender/v1), exactly.

The Go structs carry no json tags, so keys are the Go field names (PascalCase) and absent lists
are `null`, never omitted. The prioritize reply is a bare array; the preempt reply always uses
`NodeNameToMetaVictims`, whichever mode the request came in. Every way a body can be wrong
raises WireError with one line an operator can act on; the handler turns it into HTTP 400.
Every field of the extender's own structs is checked by one rule: a field Go declares as a string or
an int64 is absent (Go's zero value) or of that type, never null, which Go never writes for one;
null stands only where Go writes it, for pointers, maps and slices (Pod, Nodes, NodeNames, Pods).

The Pod is checked here, once per call, for every field the scheduling code reads (identity,
labels, annotations, owner references, containers and their quantities, overhead, node selector,
tolerations, node and pod affinity), in the shapes the API server would have enforced, so nothing
malformed reaches the scheduler, on the filter fast path (`peek_pod`) too. Reasons echo input only
through `quote`, and WireError cuts every reason to one line of about 300 characters, so a value
of a megabyte or with a newline in it cannot bloat a reason or forge a second line.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import orjson

from extender.model import resources

_QUOTED_CHARS = 200  # an input value echoed in a reason
_KEY_CHARS = 48  # a map key echoed inside a field path
_REASON_CHARS = 300  # a whole reason
_INT64_MAX = 2**63 - 1
_MAX_DEPTH = 254  # orjson encodes no deeper; no Kubernetes object comes near it


def _one_line(text: str, limit: int = _REASON_CHARS) -> str:
    """`text` with every unprintable character escaped (so one line), cut to about `limit` chars."""
    cut = len(text) > limit
    text = text[:limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        if len(text) > limit:
            text, cut = text[:limit], True
    return text + "…" if cut else text


REPLY_REASON_CHARS = 2048
"""The longest reason a filter reply carries, per node: reasons are built from the cache too (a
gang's names, its levels, its queues), whose objects no request bound."""


def reply_reason(text: str) -> str:
    """A decision's reason as a reply carries it: one line, at most about REPLY_REASON_CHARS."""
    if len(text) <= REPLY_REASON_CHARS and text.isprintable():
        return text
    return _one_line(text, REPLY_REASON_CHARS)


def quote(value: Any, limit: int = _QUOTED_CHARS) -> str:
    """An input value as a reason may show it: one line, at most about `limit` characters.

    Strings are quoted with their control characters and newlines escaped, as repr does; objects
    and arrays are named, not shown.
    """
    if isinstance(value, str):
        return repr(value[:limit]) + ("…" if len(value) > limit else "")
    if value is None or isinstance(value, (bool, dict, list)):
        return _kind(value)
    return _one_line(repr(value), limit)


def _kind(value: Any) -> str:
    """The JSON type of a decoded value, for "must be X, got Y" reasons."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return f"the number {_one_line(repr(value), 40)}"
    return type(value).__name__


# what the API server allows (so a name can never carry a newline into a reason or a log line)
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,62}")


def _path_key(key: str) -> str:
    """A map key as a step of a field path: `.cpu` when plain, else `['quoted…']`."""
    return f".{key}" if _PLAIN_KEY.fullmatch(key) else f"[{quote(key, _KEY_CHARS)}]"


class WireError(ValueError):
    """A request that does not follow the extender protocol; the message is one bounded line."""

    def __init__(self, reason: object = "") -> None:
        super().__init__(_one_line(str(reason)))


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
        # orjson refuses nesting beyond 1024 levels and numbers beyond a double, as JSON errors
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError(f"request body must be a JSON object, got {_kind(doc)}")
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


# ------------------------------------------------------------------ shapes
def _object(value: Any, where: str) -> dict[str, Any]:
    """`value` when it is an object; {} for null (Go decodes null as the zero value)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"{where} must be an object, got {_kind(value)}")
    return value


def _objects(value: Any, where: str) -> list[dict[str, Any]]:
    """`value` when it is an array of objects; [] for null."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError(f"{where} must be an array, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise WireError(f"{where}[{i}] must be an object, got {_kind(item)}")
    return value


def _string(obj: dict[str, Any], field: str, where: str) -> None:
    """obj[field] is a string when present."""
    v = obj.get(field)
    if v is not None and not isinstance(v, str):
        raise WireError(f"{where}.{field} must be a string, got {_kind(v)}")


def _strings(value: Any, where: str) -> None:
    """An array of strings, or null."""
    if value is None:
        return
    if not isinstance(value, list):
        raise WireError(f"{where} must be an array of strings, got {_kind(value)}")
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise WireError(f"{where}[{i}] must be a string, got {_kind(v)}")


def _string_map(value: Any, where: str) -> None:
    """A map of string to string (labels, annotations, nodeSelector), or null."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise WireError(f"{where} must be a map of string to string, got {_kind(value)}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise WireError(f"{where}{_path_key(k)} must be a string, got {_kind(v)}")


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NEGATIVE = re.compile(r"\s*-[0.]*[1-9]")  # a valid quantity string below zero ("-0" is zero)


def _quantity(name: str, value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise WireError(f"{where} must be a quantity (a string such as 100m or 64Mi), got {_kind(value)}")
    if isinstance(value, str) and not value.isascii():
        # Python's \d would read other scripts' digits; Kubernetes reads 0-9 only
        raise WireError(f"{where}: {quote(value)} is not a Kubernetes quantity (examples: 100m, 64Mi)")
    try:
        resources.to_units(name, value)
    except ValueError as exc:  # QuantityError, or int's limit on digits
        raise WireError(f"{where}: {exc}") from None
    if value < 0 if not isinstance(value, str) else _NEGATIVE.match(value):
        raise WireError(f"{where}: {quote(value)} is negative; the API server accepts no negative quantity")


def _resource_list(value: Any, where: str) -> None:
    """A ResourceList: a map of resource name to a non-negative quantity, or null."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise WireError(f"{where} must be a map of resource name to quantity, got {_kind(value)}")
    for name, q in value.items():
        _quantity(name, q, f"{where}{_path_key(name)}")


def _requirements(value: Any, where: str) -> None:
    """ResourceRequirements: requests and limits."""
    res = _object(value, where)
    _resource_list(res.get("requests"), f"{where}.requests")
    _resource_list(res.get("limits"), f"{where}.limits")


def _requirements_list(value: Any, where: str) -> None:
    """An array of label/field selector requirements: {key, operator, values}."""
    for j, expr in enumerate(_objects(value, where)):
        _string(expr, "key", f"{where}[{j}]")
        _string(expr, "operator", f"{where}[{j}]")
        _strings(expr.get("values"), f"{where}[{j}].values")


def _node_affinity(value: Any, where: str) -> None:
    """The node affinity terms a filter evaluates (nodeSelectorTerms and their requirements)."""
    node = _object(value, where)
    required = _object(node.get(_REQUIRED), f"{where}.{_REQUIRED}")
    at = f"{where}.{_REQUIRED}.nodeSelectorTerms"
    for i, term in enumerate(_objects(required.get("nodeSelectorTerms"), at)):
        for part in ("matchExpressions", "matchFields"):
            _requirements_list(term.get(part), f"{at}[{i}].{part}")
    _objects(node.get(_PREFERRED), f"{where}.{_PREFERRED}")


def _label_selector(value: Any, where: str) -> None:
    selector = _object(value, where)
    _string_map(selector.get("matchLabels"), f"{where}.matchLabels")
    _requirements_list(selector.get("matchExpressions"), f"{where}.matchExpressions")


def _pod_affinity(value: Any, where: str) -> None:
    """podAffinity / podAntiAffinity: the required terms the planner models, in full."""
    affinity = _object(value, where)
    for i, term in enumerate(_objects(affinity.get(_REQUIRED), f"{where}.{_REQUIRED}")):
        at = f"{where}.{_REQUIRED}[{i}]"
        _string(term, "topologyKey", at)
        _strings(term.get("namespaces"), f"{at}.namespaces")
        _label_selector(term.get("labelSelector"), f"{at}.labelSelector")
        _label_selector(term.get("namespaceSelector"), f"{at}.namespaceSelector")
    _objects(affinity.get(_PREFERRED), f"{where}.{_PREFERRED}")


def _check_spec(spec: dict[str, Any]) -> None:
    where = "Pod.spec"
    for field in ("containers", "initContainers"):
        for i, c in enumerate(_objects(spec.get(field), f"{where}.{field}")):
            _string(c, "restartPolicy", f"{where}.{field}[{i}]")
            _requirements(c.get("resources"), f"{where}.{field}[{i}].resources")
    _resource_list(spec.get("overhead"), f"{where}.overhead")
    _requirements(spec.get("resources"), f"{where}.resources")
    _string_map(spec.get("nodeSelector"), f"{where}.nodeSelector")
    for i, t in enumerate(_objects(spec.get("tolerations"), f"{where}.tolerations")):
        for field in ("key", "operator", "value", "effect"):
            _string(t, field, f"{where}.tolerations[{i}]")
    affinity = _object(spec.get("affinity"), f"{where}.affinity")
    _node_affinity(affinity.get("nodeAffinity"), f"{where}.affinity.nodeAffinity")
    for field in ("podAffinity", "podAntiAffinity"):
        _pod_affinity(affinity.get(field), f"{where}.affinity.{field}")
    for field in ("priorityClassName", "schedulerName", "nodeName"):
        _string(spec, field, where)
    group = _object(spec.get("schedulingGroup"), f"{where}.schedulingGroup")
    _string(group, "podGroupName", f"{where}.schedulingGroup")


def _check_pod(pod: dict[str, Any]) -> None:
    """Every field of the Pod the scheduling code reads, in the shape the API server enforces."""
    meta = pod.get("metadata")
    if meta is None:
        raise WireError("Pod.metadata.name is missing: the Pod has no metadata")
    if not isinstance(meta, dict):
        raise WireError(f"Pod.metadata must be an object, got {_kind(meta)}")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        got = "missing" if name is None else f"not a non-empty string: {quote(name)}"
        raise WireError(f"Pod.metadata.name is {got}")
    if not _DNS_SUBDOMAIN.fullmatch(name):
        raise WireError(f"Pod.metadata.name {quote(name, 80)} is not a valid name (a DNS-1123 subdomain)")
    for field in ("namespace", "uid"):
        _string(meta, field, "Pod.metadata")
    namespace = meta.get("namespace")
    if namespace and not _DNS_LABEL.fullmatch(namespace):
        raise WireError(
            f"Pod.metadata.namespace {quote(namespace, 80)} is not a valid namespace (a DNS-1123 label)"
        )
    _string_map(meta.get("labels"), "Pod.metadata.labels")
    _string_map(meta.get("annotations"), "Pod.metadata.annotations")
    for i, ref in enumerate(_objects(meta.get("ownerReferences"), "Pod.metadata.ownerReferences")):
        for field in ("apiVersion", "kind", "name", "uid"):
            _string(ref, field, f"Pod.metadata.ownerReferences[{i}]")
        controller = ref.get("controller")
        if controller is not None and not isinstance(controller, bool):
            raise WireError(
                f"Pod.metadata.ownerReferences[{i}].controller must be true or false, got {_kind(controller)}"
            )
    status = _object(pod.get("status"), "Pod.status")
    _string(status, "phase", "Pod.status")
    spec = pod.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise WireError(f"Pod.spec must be an object, got {_kind(spec)}")
        _check_spec(spec)
    try:
        resources.pod_requests(pod)
    except ValueError as exc:  # the checks above leave none; this keeps the promise if they drift
        raise WireError(f"Pod.{exc}") from None
    try:
        # fields this module does not read may nest arbitrarily; the scheduler encodes parts of the
        # pod with orjson, which stops at 254 levels
        orjson.dumps(pod)
    except orjson.JSONEncodeError:
        raise WireError(f"Pod nests deeper than {_MAX_DEPTH} levels: no Kubernetes object does") from None


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    pod = _field(doc, "Pod")
    if pod is None:
        raise WireError("missing Pod: the request must carry the pod being scheduled")
    if not isinstance(pod, dict):
        raise WireError(f"Pod must be an object, got {_kind(pod)}")
    _check_pod(pod)
    return pod


# ------------------------------------------------------------------ requests
def parse_extender_args(body: bytes) -> ExtenderArgs:
    doc = _loads(body)
    pod = _pod(doc)
    names = _field(doc, "NodeNames")
    nodes = _field(doc, "Nodes")
    if names is not None:
        # names are not checked one by one (thousands per call): the scheduler refuses unknown ones
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise WireError("NodeNames must be an array of strings or null")
        return ExtenderArgs(pod=pod, node_names=names, nodes=None)
    if nodes is not None:
        if not isinstance(nodes, dict):
            raise WireError(
                f'Nodes must be a NodeList object ({{"items": [...]}}) or null, got {_kind(nodes)}'
            )
        items = nodes.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise WireError(f"Nodes.items must be an array of Node objects, got {_kind(items)}")
        node_names = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise WireError(f"Nodes.items[{i}] must be a Node object, got {_kind(item)}")
            meta = item.get("metadata")
            if not isinstance(meta, dict):
                raise WireError(f"Nodes.items[{i}].metadata must be an object, got {_kind(meta)}")
            name = meta.get("name")
            if not isinstance(name, str) or not name:
                raise WireError(f"Nodes.items[{i}].metadata.name is missing or not a string")
            node_names.append(name)
        try:
            # the filter reply echoes these objects back at the same depth
            orjson.dumps({"Nodes": {"items": items}})
        except orjson.JSONEncodeError:
            raise WireError(f"Nodes.items nest deeper than {_MAX_DEPTH} levels: no Node does") from None
        return ExtenderArgs(pod=pod, node_names=node_names, nodes=items)
    return ExtenderArgs(pod=pod, node_names=[], nodes=None)


_NODES_KEY = b',"Nodes":'
_NAMES_AFTER_NODES = b'null,"NodeNames":['


def peek_pod(body: bytes) -> dict[str, Any] | None:
    """The Pod of a filter body without decoding its node list, or None if the shape is unusual.

    Go marshals ExtenderArgs in field order (Pod, Nodes, NodeNames) and escapes quotes inside
    strings, so the first `,"Nodes":` ends the Pod. Any doubt, a malformed Pod included, returns
    None and the caller decodes (and checks) the whole body.
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
    if not isinstance(pod, dict):
        return None
    try:
        # the whole Pod, as the full parse checks it: a malformed one is a 400 on either path
        _check_pod(pod)
    except WireError:
        return None
    return pod


def names_contain(body: bytes, node: str) -> bool:
    """Whether `node` is among the NodeNames of a cache-mode body (names need no JSON escaping).

    Only a body shaped as Go writes it counts: `{"Pod":…,"Nodes":null,"NodeNames":[…]}`, the
    names array being the rest of the body; the Pod ends where `peek_pod` says it does.
    """
    array = names_array(body)
    return array is not None and b'"' + node.encode() + b'"' in array


def names_array(body: bytes) -> bytes | None:
    """The NodeNames array of a body shaped as `names_contain` requires, as its raw bytes `[…]`, not
    decoded; None for any other shape. The bytes are not checked: decode them before trusting them."""
    start = body.find(_NODES_KEY)
    if start < 0 or not body.startswith(_NAMES_AFTER_NODES, start + len(_NODES_KEY)):
        return None
    start += len(_NODES_KEY) + len(_NAMES_AFTER_NODES) - 1
    end = body.find(b"]", start)
    if end < 0 or body[end + 1 :].strip() != b"}":
        return None
    return body[start : end + 1]


def node_names(array: bytes) -> list[str] | None:
    """A NodeNames array from `names_array`, decoded; None unless it is a JSON array of strings."""
    try:
        names = orjson.loads(array)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:
        return None
    return names


def filter_echo(array: bytes) -> bytes:
    """A cache-mode filter reply passing exactly the nodes of `array` (a checked NodeNames array)."""
    return b'{"Nodes":null,"NodeNames":' + array + _ECHO_TAIL


_ECHO_TAIL = b',"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def _present(doc: dict[str, Any], name: str) -> bool:
    return name in doc or any(k.lower() == name.lower() for k in doc)


def parse_binding_args(body: bytes) -> BindingArgs:
    doc = _loads(body)
    values = {}
    for field in ("PodName", "PodNamespace", "PodUID", "Node"):
        # Go strings: absent is "", as Go decodes it; null is no string (Go writes a string as one)
        v = _field(doc, field) if _present(doc, field) else ""
        if not isinstance(v, str):
            raise WireError(f"{field} must be a string, got {_kind(v)}")
        values[field] = v
    for required in ("PodName", "PodNamespace", "Node"):
        if not values[required]:
            raise WireError(f"missing {required}: a binding needs PodName, PodNamespace and Node")
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


def _pdb_violations(victims: dict[str, Any], where: str) -> int:
    """NumPDBViolations: an int64 count; absent is 0, as Go decodes it; null is no count."""
    if not _present(victims, "NumPDBViolations"):
        return 0
    n = _field(victims, "NumPDBViolations")
    if isinstance(n, bool) or not isinstance(n, int):
        raise WireError(f"{where}.NumPDBViolations must be an integer, got {quote(n)}")
    if not 0 <= n <= _INT64_MAX:
        raise WireError(f"{where}.NumPDBViolations must be a count from 0 to 2^63-1, got {quote(n)}")
    return n


def _victims(value: Any, field: str, *, meta: bool) -> dict[str, dict[str, Any]]:
    """NodeNameToMetaVictims (`meta`: Pods are MetaPods, {"UID": ...}) or NodeNameToVictims (Pods are
    v1.Pods), as node -> {"Pods": [{"UID": uid}], "NumPDBViolations": n}."""
    if not isinstance(value, dict):
        kind = "MetaVictims" if meta else "Victims"
        raise WireError(f"{field} must be an object of node name to {kind}, got {_kind(value)}")
    out: dict[str, dict[str, Any]] = {}
    for node, v in value.items():
        where = f"{field}[{quote(node, _KEY_CHARS)}]"
        if not isinstance(v, dict):
            raise WireError(
                f'{where} must be an object ({{"Pods": [...], "NumPDBViolations": n}}), got {_kind(v)}'
            )
        pods = []
        for i, p in enumerate(_objects(_field(v, "Pods"), f"{where}.Pods")):
            # A victim is named by its UID alone: one without a UID cannot be checked against gangs
            # or reservations, and kube-scheduler always sends it.
            if meta:
                uid, at = _field(p, "UID"), f"{where}.Pods[{i}].UID"
            else:
                pod_meta = _object(p.get("metadata"), f"{where}.Pods[{i}].metadata")
                uid, at = pod_meta.get("uid"), f"{where}.Pods[{i}].metadata.uid"
            if not isinstance(uid, str) or not uid:
                got = "an empty string" if uid == "" else _kind(uid)
                raise WireError(f"{at} must name the victim pod (a non-empty string), got {got}")
            pods.append({"UID": uid})
        out[node] = {"Pods": pods, "NumPDBViolations": _pdb_violations(v, where)}
    return out


def parse_preemption_args(body: bytes) -> PreemptionArgs:
    doc = _loads(body)
    pod = _pod(doc)
    meta_victims = _field(doc, "NodeNameToMetaVictims")
    full_victims = _field(doc, "NodeNameToVictims")
    victims: dict[str, dict[str, Any]] = {}
    if meta_victims is not None:
        victims = _victims(meta_victims, "NodeNameToMetaVictims", meta=True)
    elif full_victims is not None:
        victims = _victims(full_victims, "NodeNameToVictims", meta=False)
    return PreemptionArgs(pod=pod, victims=victims)


# ------------------------------------------------------------------ replies
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
