"""A pod's priority and whether it may preempt, as the API server's admission leaves them on the pod,
or on its scheduling.k8s.io PodGroup (1.37), whose priority and preemptionPolicy speak for every member.

Admission resolves `spec.priorityClassName` into `spec.priority` (an int32) and
`spec.preemptionPolicy` when the pod is created, so the pod alone says both; the PriorityClass is
never looked up here. A pod without a priority (no class and no global default) ranks 0, as
kube-scheduler ranks it. A value of another type (a pod never admitted, a hand-made object) also
counts as 0 rather than failing: priority orders victims, it does not validate pods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from extender.model.group import GroupSpec

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


def member_priority(pod: dict[str, Any], group: GroupSpec | None) -> int:
    """The priority a gang member ranks at: its group's own priority where the group has one (a 1.37
    PodGroup's: "authoritative for all members"), else the pod's."""
    if group is not None and group.priority is not None:
        return group.priority
    return pod_priority(pod)


def member_may_preempt(pod: dict[str, Any], group: GroupSpec | None) -> bool:
    """Whether the member may evict others: not when its group's preemptionPolicy is Never (1.37),
    else as the pod's own policy says."""
    if group is not None and group.preemption_policy == NEVER:
        return False
    return may_preempt(pod)
