"""A pod's priority and whether it may preempt, as the API server's admission leaves them on the pod.

Admission resolves `spec.priorityClassName` into `spec.priority` (an int32) and
`spec.preemptionPolicy` when the pod is created, so the pod alone says both; the PriorityClass is
never looked up here. A pod without a priority (no class and no global default) ranks 0, as
kube-scheduler ranks it. A value of another type (a pod never admitted, a hand-made object) also
counts as 0 rather than failing: priority orders victims, it does not validate pods.
"""

from __future__ import annotations

from typing import Any

NEVER = "Never"  # spec.preemptionPolicy that forbids preempting; the default is PreemptLowerPriority


def pod_priority(pod: dict[str, Any]) -> int:
    """`spec.priority`, or 0 when it is absent or not an integer."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value


def may_preempt(pod: dict[str, Any]) -> bool:
    """Whether the pod may evict lower-priority pods: any `spec.preemptionPolicy` but "Never"."""
    spec = pod.get("spec")
    return not (isinstance(spec, dict) and spec.get("preemptionPolicy") == NEVER)
