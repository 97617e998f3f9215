"""A gang's status written on its own group object, in that API's shape."""

from __future__ import annotations

from typing import Any

from extender.model.group import GroupSpec, Source
from extender.scheduling.decisions import Effect
from extender.state.store import ClusterStore


def group_status(store: ClusterStore, group: GroupSpec, phase: str, reason: str) -> Effect | None:
    """The status write for `group`; None when its source has no object to write to.

    KAI PodGroups (and this project's CRD) take a phase and the last reason. scheduling.k8s.io
    PodGroups carry only conditions: PodGroupScheduled (v1alpha2) or PodGroupInitiallyScheduled
    (later versions), written once the gang is bound, never turned back to False.
    """
    if group.source is Source.KAI_PODGROUP:
        target = ("scheduling.run.ai", "PodGroup")
        status: dict[str, Any] = {"phase": phase, "lastReason": reason}
    elif group.source is Source.K8S_PODGROUP and phase == "Running":
        target = ("scheduling.k8s.io", "PodGroup")
        obj = store.get(*target, group.namespace, group.name) or {}
        kind = (
            "PodGroupScheduled"
            if str(obj.get("apiVersion", "")).endswith("v1alpha2")
            else "PodGroupInitiallyScheduled"
        )
        condition = {"type": kind, "status": "True", "reason": "Scheduled", "message": reason}
        status = {"conditions": [condition]}
    else:
        return None
    return Effect(
        "group-status", group.namespace, group.name, {"group": target[0], "kind": target[1], "status": status}
    )
