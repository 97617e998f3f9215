"""ReasonsTold: what each pending gang member and each group object was last told, so that a gang's
new reason reaches them once, and a gang whose reason stands still costs no write.

kube-scheduler writes the PodScheduled condition of the pod it filters, with the reason this
service answered; nothing else rewrites it until that pod is tried again (up to a minute on 1.20).
The siblings of a gang whose situation changed (its quorum arrived and it does not fit, it backs
off, it is planned) would go on saying what was true when each was last filtered. The scheduler
records here what every member was told and writes the gang's new reason to those whose condition
says something else.

A gang waiting for its pods changes its reason with every pod that arrives ("4 exist", "5 exist",
...). Told to every sibling each time, a gang of n pods created while kube-scheduler filters them
would cost about n*n/2 writes; so a count that only follows another count is told at most every
QUORUM_COUNT_REFRESH_S (the ticker tells the last one), while every other change is told at once.

Bounded: an entry goes with its pod (deleted, bound, or sent to bind) and with its gang.
"""

from __future__ import annotations

from extender.model.keys import GroupKey, PodKey

QUORUM_COUNT_REFRESH_S = 5.0
"""Shortest interval between two "waiting for pods: N exist" reasons told to a gang's members."""


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
        self.counts: dict[GroupKey, str] = {}
        """gang -> its latest "waiting for pods" reason (a count of the pods that exist)."""
        self.count_told_at: dict[GroupKey, float] = {}
        """gang -> when a count was last told, while the gang has been told counts only."""

    def told(self, pod: PodKey, reason: str) -> None:
        self.pods[pod] = reason

    def forget_pod(self, pod: PodKey) -> None:
        self.pods.pop(pod, None)

    def forget_gang(self, gang: GroupKey) -> None:
        self.gangs.pop(gang, None)
        self.groups.pop(gang, None)
        self.counts.pop(gang, None)
        self.count_told_at.pop(gang, None)

    def counting(self, gang: GroupKey, reason: str) -> None:
        """`reason` is the gang's count of the pods that exist (its quorum is short)."""
        self.counts[gang] = reason

    def hold_back(self, gang: GroupKey, reason: str, now: float) -> bool:
        """Whether telling `reason` now can wait: it is a count, the members were told a count less
        than QUORUM_COUNT_REFRESH_S ago. Records the telling when it cannot wait."""
        if self.counts.get(gang) != reason:
            self.count_told_at.pop(gang, None)  # anything but a count is told at once
            return False
        last = self.count_told_at.get(gang)
        if last is not None and now - last < QUORUM_COUNT_REFRESH_S:
            return True
        self.count_told_at[gang] = now
        return False

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
