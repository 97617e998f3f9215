"""Shared reads over the cluster store and the ledger: what a pod is, which gang it is in, the rows
offered nodes map to, what a gang's members count, and whether kube-scheduler has a pod parked.

Owns `preemption.Evictions`, the preemptors kube-scheduler is evicting victims for: the filter and
the queues read it to treat their pods as waiting for room that is coming. Writes nothing to the
store or the ledger.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from extender.gang.entry import Phase
from extender.model import resources
from extender.model.group import GroupSpec, Membership, MembershipState
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.scheduling import preemption
from extender.scheduling.decisions import UnknownNodesError
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore, PodRecord


@dataclasses.dataclass(frozen=True)
class FilterCall:
    """One filter request, resolved: the pod, its gang and the nodes kube-scheduler offered."""

    pod: dict[str, Any]
    key: PodKey
    uid: str
    group: GroupSpec
    membership: Membership
    rows: np.ndarray  # int32[k] store rows of node_names
    node_names: Sequence[str]
    requests: dict[str, int]


def marked_unschedulable(pod: dict[str, Any]) -> bool:
    """kube-scheduler wrote PodScheduled=False on the pod: its last attempt failed (a filter, ours or
    its own, or a bind), so it waits in the backoff or unschedulable queue."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False":
            return True
    return False


def pod_identity(pod: dict[str, Any]) -> tuple[PodKey, str]:
    meta = pod.get("metadata") or {}
    key = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    return key, str(meta.get("uid") or "")


class View:
    def __init__(self, store: ClusterStore, ledger: GangLedger, *, native_gang_scheduling: bool) -> None:
        self.store = store
        self.ledger = ledger
        self.native_gang_scheduling = native_gang_scheduling
        self.evictions = preemption.Evictions()
        """What kube-scheduler evicts for each preemptor, so its retry is not turned away by a cache
        that has not yet seen the victims go."""

    def gated_natively(self, pod: dict[str, Any]) -> bool:
        """kube-scheduler's own GangScheduling plugin gates this pod (see GangSettings): one gate only."""
        if not self.native_gang_scheduling:
            return False
        group = (pod.get("spec") or {}).get("schedulingGroup")
        return isinstance(group, dict) and bool(group.get("podGroupName"))

    def rows_of(self, node_names: Sequence[str]) -> np.ndarray:
        rows = self.store.node_rows
        try:
            return np.fromiter(map(rows.__getitem__, node_names), dtype=np.int32, count=len(node_names))
        except KeyError:
            raise self._unknown_nodes(node_names) from None

    def _unknown_nodes(self, node_names: Sequence[str]) -> UnknownNodesError:
        unknown = [n for n in node_names if n not in self.store.node_rows]
        shown = ", ".join(repr(n[:64]) for n in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        return UnknownNodesError(
            f"{len(unknown)} node name(s) unknown to the extender's cluster cache: {shown}{more}"
        )

    def requests_of(self, pod: dict[str, Any], key: PodKey, uid: str) -> dict[str, int]:
        """The pod's requests; from the cache when it holds this very pod (the watch keeps them
        current, in-place resize included)."""
        rec = self.store.pods.get(key)
        if rec is not None and uid and rec.uid == uid:
            return rec.requests
        return resources.pod_requests(pod)  # the wire layer validated the quantities

    def gang_of_pod(self, pod: dict[str, Any]) -> GroupKey | None:
        if self.gated_natively(pod):
            return None
        m = self.store.membership_of(pod)
        if m.state is not MembershipState.MEMBER or m.group is None or not m.group.is_gang():
            return None
        return m.group.key

    def spec_of(self, gang: GroupKey, members: Sequence[PodRecord]) -> GroupSpec | None:
        """The gang's definition: as its members say now, else as its plan was made."""
        if members:
            return self.store.membership(members[0]).group
        entry = self.ledger.entry(gang)
        return entry.spec if entry else None

    def phase_of(self, gang: GroupKey) -> Phase:
        return self.ledger.phase(gang, self.spec_of(gang, self.store.group_members(gang)))

    def live_leaf_counts(self, key: GroupKey, spec: GroupSpec) -> dict[str | None, int]:
        """subgroup -> live members of the gang in the cache, and those that ran to completion (None:
        the gang without subgroups)."""
        counts = self.store.finished_counts(spec)
        for rec in self.store.group_members(key):
            if rec.live:
                leaf = self.store.membership(rec).subgroup
                counts[leaf] = counts.get(leaf, 0) + 1
        return counts

    def turned_away(self, pk: PodKey) -> bool:
        """Whether the pod sits in kube-scheduler's backoff or unschedulable queue: this process turned
        it away, or kube-scheduler marked it PodScheduled=False (a previous process, or its own
        filters, turned it away). The second is read from the pod, so a restart loses nothing."""
        if self.ledger.was_rejected(pk):
            return True
        rec = self.store.pods.get(pk)
        return rec is not None and not rec.node_name and marked_unschedulable({"status": rec.status})
