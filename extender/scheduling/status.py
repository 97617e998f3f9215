"""A gang's status written on its own group object, in that API's shape."""

from __future__ import annotations

import itertools
from typing import Any

from extender.gang.entry import Phase
from extender.grouping import kai
from extender.model.group import GroupSpec, Source
from extender.model.keys import GroupKey
from extender.scheduling.decisions import Effect
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore

RUNNING = "Running"
PENDING = "Pending"
UNSCHEDULABLE_ON_NODE_POOL = "UnschedulableOnNodePool"
NODE_POOL = "default"  # KAI's name for the pool of a cluster that defines none
# Orders status decisions: effects run as batches in tasks of their own, and a batch decided earlier
# (a Pending behind its members' condition writes) may reach the writer after one decided later (the
# release's Running); the writer keeps to the order they were decided in.
_DECIDED = itertools.count()


def group_status(store: ClusterStore, group: GroupSpec, phase: str, reason: str) -> Effect | None:
    """The status write for `group`; None when its source has no object of ours to write to.

    KAI PodGroups (external ones, and the one the podgrouper keeps for a derived gang, never one
    someone else keeps) get only fields KAI's v2alpha2 CRD has, so the real CRD keeps them: phase,
    running and pending counts, and while the gang waits a schedulingCondition carrying the
    reason (cleared once it runs). scheduling.k8s.io PodGroups carry only conditions:
    PodGroupScheduled (v1alpha2) or PodGroupInitiallyScheduled (later versions), written once the
    gang is bound, never turned back to False; a CompositePodGroup tree's root carries
    CompositePodGroupInitiallyScheduled.
    """
    if group.source is Source.KAI_PODGROUP or group.source is Source.KAI_DERIVED:
        target = kai.KAI_PODGROUP
        if group.source is Source.KAI_DERIVED:
            obj = store.get(*target, group.namespace, group.name)
            if obj is None or not kai.is_managed(obj):
                return None
        status = kai_status(store, group, phase, reason)
    elif group.source is Source.K8S_COMPOSITE and phase == RUNNING:
        target = ("scheduling.k8s.io", "CompositePodGroup")
        condition = {"type": "CompositePodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled"}
        status = {"conditions": [{**condition, "message": reason}]}
    elif group.source is Source.K8S_PODGROUP and phase == RUNNING:
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
    data = {"group": target[0], "kind": target[1], "status": status, "decided": next(_DECIDED)}
    return Effect("group-status", group.namespace, group.name, data)


def kai_status(store: ClusterStore, group: GroupSpec, phase: str, reason: str) -> dict[str, Any]:
    """KAI's PodGroupStatus fields for the gang as the store holds it (a merge patch: None removes)."""
    running = pending = 0
    for rec in store.group_members(group.key):
        # a released member whose binding the API acknowledged may not have reached the watch yet;
        # it still holds its reservation then, and counts as running once the gang runs
        if rec.node_name or (phase == RUNNING and rec.key in store.reservations):
            running += 1
        else:
            pending += 1
    status: dict[str, Any] = {"phase": phase, "running": running, "pending": pending}
    if phase == RUNNING:
        status["schedulingConditions"] = None
    else:
        status["schedulingConditions"] = [
            {
                "type": UNSCHEDULABLE_ON_NODE_POOL,
                "nodePool": NODE_POOL,
                "status": "True",
                "reason": "Unschedulable",
                "message": reason,
                "reasons": [{"reason": "Unschedulable", "message": reason}],
            }
        ]
    return status


def status_now(store: ClusterStore, ledger: GangLedger, gang: GroupKey) -> Effect | None:
    """The status write for a gang whose group object appeared after the gang had moved on (the
    podgrouper's PodGroup lands a moment after the workload; the gang may be bound by then). None
    when the gang has no members, was never looked at, or the object already says its phase."""
    members = store.group_members(gang)
    spec = store.membership(members[0]).group if members else None
    if spec is None:
        return None
    entry = ledger.entry(gang)
    if ledger.phase(gang, spec) is Phase.BOUND:
        phase, reason = RUNNING, entry.last_reason if entry else "quorum bound"
    elif entry is not None and entry.last_reason:
        phase, reason = PENDING, entry.last_reason
    else:
        return None
    obj = store.get(*kai.KAI_PODGROUP, spec.namespace, spec.name) or {}
    if (obj.get("status") or {}).get("phase") == phase:
        return None
    return group_status(store, spec, phase, reason)


def counts_now(store: ClusterStore, ledger: GangLedger, spec: GroupSpec) -> Effect | None:
    """The status write for a gang whose KAI PodGroup says Running with counts that moved since they
    were written (members bound as they come beyond the quorum, created or gone since): running and
    pending say what the cluster holds, as KAI's own status does (the phase is left to the writes
    that decide it). None when nothing moved, or no KAI PodGroup of ours says Running. O(the
    gang's members), read only for a Running one."""
    if spec.source not in (Source.KAI_PODGROUP, Source.KAI_DERIVED):
        return None
    obj = store.get(*kai.KAI_PODGROUP, spec.namespace, spec.name) or {}
    status = obj.get("status") or {}
    if status.get("phase") != RUNNING:
        return None
    want = kai_status(store, spec, RUNNING, "")
    if (status.get("running"), status.get("pending")) == (want["running"], want["pending"]):
        return None
    entry = ledger.entry(spec.key)
    return group_status(
        store, spec, RUNNING, entry.last_reason if entry and entry.last_reason else "quorum bound"
    )
