"""Whether a node admits a pod regardless of capacity: kube-scheduler's placement-only filters.

NodeUnschedulable, TaintToleration (NoSchedule, NoExecute) and NodeAffinity (nodeSelector and the
required node-affinity terms), spelled with kube-scheduler's reasons. The planner uses this for
gang members whose own node list it has not seen (kube-scheduler's list for one member is the
eligible set only for members of the same template); the simulator uses it as its in-tree filters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


def placement_terms(
    pod: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], Mapping[str, Any], Mapping[str, Any] | None]:
    """(tolerations, nodeSelector, required node affinity) of a pod."""
    spec = pod.get("spec") or {}
    tolerations = [t for t in (spec.get("tolerations") or []) if isinstance(t, dict)]
    selector = spec.get("nodeSelector") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return tolerations, selector, affinity


def node_rejects(
    *,
    name: str,
    labels: Mapping[str, str],
    taints: list[dict[str, Any]],
    unschedulable: bool,
    tolerations: list[dict[str, Any]],
    selector: Mapping[str, Any],
    affinity: Mapping[str, Any] | None,
) -> str | None:
    """kube-scheduler's reason for rejecting the node, or None when it admits the pod."""
    if unschedulable and not tolerates({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}, tolerations):
        return UNSCHEDULABLE
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if taint.get("key") == UNSCHEDULABLE_TAINT and unschedulable:
            continue  # judged above, as NodeUnschedulable does
        if not tolerates(taint, tolerations):
            return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    if any(labels.get(str(k)) != str(v) for k, v in selector.items()):
        return AFFINITY_MISMATCH
    if affinity and not matches_affinity(name, labels, affinity):
        return AFFINITY_MISMATCH
    return None


def tolerates(taint: Mapping[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and str(t.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def matches_affinity(name: str, labels: Mapping[str, str], required: Mapping[str, Any]) -> bool:
    terms = required.get("nodeSelectorTerms") or []
    # terms are ORed; an empty term matches nothing, as the API defines it
    return any(_matches_term(name, labels, term) for term in terms if isinstance(term, dict))


def _matches_term(name: str, labels: Mapping[str, str], term: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for e in exprs:
        if not matches_expression(labels, e):
            return False
    for f in fields:
        if f.get("key") == "metadata.name" and not matches_expression({"metadata.name": name}, f):
            return False
    return True


def matches_expression(labels: Mapping[str, str], expr: Mapping[str, Any]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    values = [str(v) for v in (expr.get("values") or [])]
    present = key in labels
    value = labels.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(str(value)), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False
