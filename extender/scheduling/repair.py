"""ConditionRepair: bound pods that a late status write of kube-scheduler's left marked unschedulable.

kube-scheduler 1.34 and later writes a failed attempt's PodScheduled=False asynchronously. When the pod
binds in a later attempt before that write lands (through this extender's bind, which kube-scheduler's
dispatcher does not order against the write), the pod runs with PodScheduled=False for good
(kubernetes/kubernetes#139417, mended upstream by #139602 in the releases that carry it): a running pod
that every reader of the condition takes for unschedulable. A CI run of the kwok e2e on 1.36.2 saw it.

The pods of the schedulers that call this extender (learned from the filter calls) seen bound with the
condition False are noted, and the tick writes PodScheduled=True on each, as the API server's binding
does; once per sighting, so a repeat of the late write is mended again. Owns the schedulers seen and the
pods due.
"""

from __future__ import annotations

from typing import Any

from extender.model.keys import PodKey
from extender.scheduling.decisions import Effect, pod_ref
from extender.scheduling.view import marked_unschedulable, pod_identity
from extender.state.store import ClusterStore, is_live, is_terminal, scheduler_name

DUE_KEPT = 4096
"""Pods waiting for the repair at most (a tick drains them all); past it, new sightings wait for the
pod's next change."""

SCHEDULERS_KEPT = 16


class ConditionRepair:
    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self._schedulers: set[str] = set()  # the schedulers whose pods this extender was asked about
        self._due: dict[PodKey, None] = {}

    def saw_filter(self, pod: dict[str, Any]) -> None:
        name = scheduler_name(pod)
        if name not in self._schedulers and len(self._schedulers) < SCHEDULERS_KEPT:
            self._schedulers.add(name)

    def on_pod(self, event: str, obj: dict[str, Any]) -> None:
        """A pod event from the store: note a bound pod of ours still marked unschedulable."""
        if event == "DELETED" or not (obj.get("spec") or {}).get("nodeName") or is_terminal(obj):
            return
        if scheduler_name(obj) not in self._schedulers or not marked_unschedulable(obj):
            return
        if len(self._due) < DUE_KEPT:
            self._due[pod_identity(obj)[0]] = None

    def take(self) -> list[Effect]:
        """PodScheduled=True for each noted pod still bound and still marked False."""
        due, self._due = self._due, {}
        effects = []
        for key in due:
            rec = self.store.pods.get(key)
            if rec is None or not rec.node_name or not is_live(rec.obj) or not marked_unschedulable(rec.obj):
                continue
            cond = {
                "type": "PodScheduled",
                "status": "True",
                "reason": "Bound",
                "message": f"bound to {rec.node_name}; a failed attempt's status, written after the binding, "
                "is replaced",
            }
            effects.append(Effect("condition", *pod_ref(key), cond))
        return effects
