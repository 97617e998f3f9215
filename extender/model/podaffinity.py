"""Required pod anti-affinity that the gang planner models: one member per node.

kube-scheduler enforces inter-pod anti-affinity itself, but only for the pod it is filtering;
a plan that puts two anti-affine members on one node is refused for the second one, and
replanning the same way would never converge. The cheap, common case (a term on the hostname
key whose selector matches the pod's own labels: "no two workers on one node") is modelled here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.model.nodematch import matches_expression

HOSTNAME = "kubernetes.io/hostname"
ONE_PER_NODE = "gang-extender.io/one-per-node"
"""A resource column no node offers and no pod requests: the planner fills it with one slot per
node for the duration of one plan, so members that must be alone take a node each."""


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; an empty selector matches every pod, a null one none."""
    if selector is None or not isinstance(selector, Mapping):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(matches_expression(labels, e) for e in selector.get("matchExpressions") or ())


def one_per_node(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's required anti-affinity keeps it off any node holding a pod like itself."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace") or "default"
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        if not isinstance(term, Mapping) or term.get("topologyKey") != HOSTNAME:
            continue
        namespaces = term.get("namespaces") or ()
        if namespaces and namespace not in namespaces:
            continue
        if selector_matches(term.get("labelSelector"), labels):
            return True
    return False
