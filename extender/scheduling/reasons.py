"""ReasonsTold: what each pending gang member and each group object was last told, so that a gang's
new reason reaches them once, and a gang whose reason stands still costs no write.

kube-scheduler writes the PodScheduled condition of the pod it filters, with the reason this
service answered; nothing else rewrites it until that pod is tried again (up to a minute on 1.20).
The siblings of a gang whose situation changed (its quorum arrived and it does not fit, it backs
off, it is planned) would go on saying what was true when each was last filtered. The scheduler
records here what every member was told and writes the gang's new reason to those whose condition
says something else.

Bounded: an entry goes with its pod (deleted, bound, or sent to bind) and with its gang.
"""

from __future__ import annotations

from extender.model.keys import GroupKey, PodKey


class ReasonsTold:
    def __init__(self) -> None:
        self.pods: dict[PodKey, str] = {}
        """pod -> the reason its PodScheduled condition carries (written by kube-scheduler from our
        answer, or by this service). A pod not here is kube-scheduler's to tell: never filtered yet,
        or sent to bind."""
        self.gangs: dict[GroupKey, str] = {}
        """gang -> the reason last told to its members: unchanged, nothing is written."""
        self.groups: dict[GroupKey, tuple[str, str]] = {}
        """gang -> (phase, reason) last written on its group object's status."""

    def told(self, pod: PodKey, reason: str) -> None:
        self.pods[pod] = reason

    def forget_pod(self, pod: PodKey) -> None:
        self.pods.pop(pod, None)

    def forget_gang(self, gang: GroupKey) -> None:
        self.gangs.pop(gang, None)
        self.groups.pop(gang, None)

    def stale(self, pod: PodKey, reason: str) -> bool:
        """Whether the pod's condition says something other than `reason` (and is ours to rewrite)."""
        said = self.pods.get(pod)
        return said is not None and said != reason

    def group_changed(self, gang: GroupKey, phase: str, reason: str) -> bool:
        """Whether the group object's status must be written; records it as written when so."""
        if self.groups.get(gang) == (phase, reason):
            return False
        self.groups[gang] = (phase, reason)
        return True
