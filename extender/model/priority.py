"""A pod's scheduling priority and whether it may preempt, as admission and kube-scheduler read them."""

from __future__ import annotations

from typing import Any


def pod_priority(pod: dict[str, Any]) -> int:
    """spec.priority (admission fills it from the PriorityClass); absent or malformed = 0."""
    value = (pod.get("spec") or {}).get("priority")
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value


def may_preempt(pod: dict[str, Any]) -> bool:
    """Whether the pod may evict lower-priority pods: its preemptionPolicy is not Never."""
    return (pod.get("spec") or {}).get("preemptionPolicy") != "Never"
