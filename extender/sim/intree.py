"""kube-scheduler's basic in-tree filters, as the simulated scheduler applies them before the extender.

NodeUnschedulable, TaintToleration (NoSchedule, NoExecute), NodeAffinity (nodeSelector and the
required node-affinity terms) and NodeResourcesFit, judged against the simulator's own view of
node usage. Reasons are spelled as kube-scheduler spells them, so the `0/N nodes are available`
summary reads like the real one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from extender.model.nodematch import node_rejects, placement_terms
from extender.model.resources import PODS, node_allocatable


@dataclasses.dataclass
class NodeState:
    """One node as the simulated scheduler sees it: labels, taints and what is allocated on it."""

    name: str
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    unschedulable: bool
    allocatable: dict[str, int]
    used: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeState:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        return cls(
            name=str(meta.get("name", "")),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            taints=[t for t in (spec.get("taints") or []) if isinstance(t, dict)],
            unschedulable=spec.get("unschedulable") is True,
            allocatable=node_allocatable(node),
        )

    def add(self, requests: Mapping[str, int], sign: int = 1) -> None:
        for k, v in requests.items():
            self.used[k] = self.used.get(k, 0) + sign * v

    def overcommitted(self) -> list[str]:
        """Resources whose allocated total exceeds allocatable."""
        return [k for k, v in self.used.items() if v > self.allocatable.get(k, 0)]


def filter_nodes(
    pod: Mapping[str, Any], requests: Mapping[str, int], nodes: Iterable[NodeState]
) -> tuple[list[str], Counter[str]]:
    """Names of the nodes that pass every filter, and a histogram of why the others failed."""
    tolerations, selector, affinity = placement_terms(pod)
    passed: list[str] = []
    reasons: Counter[str] = Counter()
    for node in nodes:
        reason = node_rejects(
            name=node.name,
            labels=node.labels,
            taints=node.taints,
            unschedulable=node.unschedulable,
            tolerations=tolerations,
            selector=selector,
            affinity=affinity,
        ) or _resource_failure(node, requests)
        if reason is None:
            passed.append(node.name)
        else:
            reasons[reason] += 1
    return passed, reasons


def fit_error(total: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's FitError text: `0/N nodes are available: 3 reason, 5 other reason.`"""
    if not reasons:
        return f"0/{total} nodes are available."
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
    return f"0/{total} nodes are available: {parts}."


def _resource_failure(node: NodeState, requests: Mapping[str, int]) -> str | None:
    if node.used.get(PODS, 0) + requests.get(PODS, 1) > node.allocatable.get(PODS, 0):
        return "Too many pods"
    for name, amount in sorted(requests.items()):
        if name == PODS or amount <= 0:
            continue
        if node.used.get(name, 0) + amount > node.allocatable.get(name, 0):
            return f"Insufficient {name}"
    return None
