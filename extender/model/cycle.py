"""What only kube-scheduler's own scheduling cycle checks for a pod: the filters a gang's plan does
not model.

A plan models requests (extended resources and the pod count too), node selectors and required node
affinity, taints and cordons, and keeps a gang's own one-per-node members apart. kube-scheduler's
default profile also filters on host ports, volumes (binding a claim, per-node limits, zones),
dynamic resource claims, topology spread and inter-pod affinity against every pod on a node. A
member that uses none of these may be bound by the service on its plan's node without a cycle of its
own (a gang released at its first member's bind); one that does is bound only after kube-scheduler
has filtered it there. Another pod's required anti-affinity against the member is the cluster's,
not the pod's: state.repelling keeps it, and the ledger asks both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROJECTED = "gang-extender.io/cycle"
"""The spec key under which the store's projection of a pod keeps `cycle_needed`'s answer when it is
not "": the fields it reads (volumes, ports, claims, spread) are not kept. No API field has a '/'."""

PLAIN_VOLUME_SOURCES = frozenset({"configMap", "secret", "emptyDir", "downwardAPI", "projected"})
"""Volume sources no kube-scheduler filter looks at: they need no node-side binding nor a limit."""


def cycle_needed(pod: Mapping[str, Any]) -> str:
    """Why the pod must pass kube-scheduler's own cycle before it is bound ("" when the plan covers
    every filter kube-scheduler would run for it)."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        return "its spec is not an object"
    marked = spec.get(PROJECTED)
    if marked is not None:
        return marked if isinstance(marked, str) else "its projection's mark is not a string"
    if spec.get("schedulingGates"):
        return "it has scheduling gates"
    for c in (*_listed(spec.get("initContainers")), *_listed(spec.get("containers"))):
        for port in _listed(c.get("ports")) if isinstance(c, Mapping) else ():
            if isinstance(port, Mapping) and port.get("hostPort"):
                number = port["hostPort"]
                return f"it asks for host port {number}" if type(number) is int else "it asks for a host port"
    for volume in _listed(spec.get("volumes")):
        if not isinstance(volume, Mapping):
            continue
        kinds = sorted(str(k) for k in volume if k != "name" and k not in PLAIN_VOLUME_SOURCES)
        if kinds:
            name = volume.get("name")
            shown = f"volume {name[:63]}" if isinstance(name, str) else "volume"
            return f"its {shown} is a {kinds[0][:63]} volume"
    if spec.get("resourceClaims"):
        return "it claims dynamic resources"
    if spec.get("topologySpreadConstraints"):
        return "it has topology spread constraints"
    affinity = spec.get("affinity")
    for kind, words in (("podAffinity", "pod affinity"), ("podAntiAffinity", "pod anti-affinity")):
        terms = affinity.get(kind) if isinstance(affinity, Mapping) else None
        if isinstance(terms, Mapping) and terms.get("requiredDuringSchedulingIgnoredDuringExecution"):
            # the plan keeps a gang's own members apart, not every pod a term can match
            return f"it has required {words}, which kube-scheduler checks against every pod on the node"
    return ""


def _listed(value: Any) -> list[Any]:
    """A list field as a list; any other shape as nothing (the API server validates these fields)."""
    return value if isinstance(value, list) else []
