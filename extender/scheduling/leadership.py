"""Whether this replica acts on the cluster: the leader-election Lease of its own kube-scheduler.

Owns: the reading of that Lease. Only the leader's kube-scheduler calls its sidecar, but every sidecar
has a ticker; a replica whose kube-scheduler does not hold the Lease writes nothing on its own (no
PodGroups, no status, no Queue status, no events, no nudges, no evictions) and keeps its cache warm.
kube-scheduler's identity in the Lease is `<hostname>_<uuid>`, and a pod's containers share its
hostname (the pod's name): the sidecar holds the Lease when `holderIdentity` starts with its own name
and the Lease was renewed within its duration. A Lease not seen yet, held by another, or run out
(its holder stopped renewing: kube-scheduler gives up leading after its renewDeadline, shorter than
the duration) means follow. The decision is a pure function of the cached Lease and the wall clock.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from extender.model.lease import split_lease_ref
from extender.model.timestamps import parse_time_s

LEASE_KIND = ("coordination.k8s.io", "Lease")


class Role(enum.Enum):
    ALONE = "alone"  # no Lease configured: the only replica, it always acts
    LEADER = "leader"
    FOLLOWER = "follower"

    @property
    def acts(self) -> bool:
        return self is not Role.FOLLOWER


@dataclasses.dataclass(frozen=True)
class LeaderLease:
    """The Lease of this replica's kube-scheduler (its leaderElection resourceNamespace/resourceName)
    and the name it leads under (its pod's name)."""

    namespace: str
    name: str
    identity: str

    @classmethod
    def parse(cls, value: str, identity: str) -> LeaderLease:
        """`NAMESPACE/NAME`; ValueError saying what is wrong otherwise."""
        namespace, name = split_lease_ref(value)
        if not identity or "_" in identity:
            raise ValueError(
                f"--leader-identity must be this pod's name (kube-scheduler leads as <pod>_<uuid>), got "
                f"{identity!r}"
            )
        return cls(namespace, name, identity)


def _renewed_s(spec: dict[str, Any]) -> float | None:
    return parse_time_s(spec.get("renewTime") or spec.get("acquireTime"))


def role(lease: LeaderLease | None, obj: dict[str, Any] | None, now_s: float) -> tuple[Role, str]:
    """This replica's role and why, from the cached Lease `obj` at wall-clock `now_s`."""
    if lease is None:
        return Role.ALONE, "no leader lease configured: the only replica"
    where = f"Lease {lease.namespace}/{lease.name}"
    if obj is None:
        return Role.FOLLOWER, f"{where} not seen (yet): writing nothing until {lease.identity} holds it"
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    holder = str(spec.get("holderIdentity") or "")
    if not holder.startswith(lease.identity + "_"):
        shown = holder or "no one"
        return Role.FOLLOWER, f"{where} is held by {shown}, not {lease.identity}'s kube-scheduler"
    renewed = _renewed_s(spec)
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or isinstance(duration, bool) or not isinstance(duration, int | float):
        return Role.FOLLOWER, f"{where} has no renewTime or leaseDurationSeconds"
    if now_s > renewed + duration:
        return Role.FOLLOWER, (
            f"{where} of {lease.identity} ran out {now_s - renewed - duration:.0f} s ago (not renewed)"
        )
    return Role.LEADER, f"{lease.identity}'s kube-scheduler holds {where}"
