"""Lagging: the refusals this cache may owe to being behind kube-scheduler's, answered as a retry.

kube-scheduler runs its own NodeResourcesFit on its own cache before it calls filter; both caches
follow the API server, not in step. When kube-scheduler offers a node with room for the pod's core
resources (cpu, memory, pods, ephemeral-storage: what its fit always counts) and this cache, with no
reservation of its own on that node, has less, the two disagree about the pods bound there: most
often one ended that kube-scheduler has seen go and this cache has not yet. Refused then, the pod
would wait in kube-scheduler's unschedulable queue with NodeResourcesFit among the plugins that
rejected it (on the nodes not offered), and since kube-scheduler 1.31 only an event that plugin's
queueing hint accepts brings it back (the end of a pod it already saw end is not one), or a nudge
where one follows (a hold made ready). A plain pod, or a gang with no hold, could wait for
kube-scheduler's five-minute flush: on 1.37.2 a plain pod was still pending a minute after the
service caught up (tests/e2e/test_e2e_requeue.py, before this answer).

So such a refusal is answered as an error, which kube-scheduler retries after the pod's backoff
(an error names no rejecting plugin); for at most `retry_s` per pod, past which the two caches
disagree for some reason other than lag and the refusal stands. Owns, per pod, when its run of
such answers began.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import numpy as np

from extender.model.keys import PodKey
from extender.model.resources import CORE_RESOURCES
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

RETRY_S = 30.0
"""How long one pod's refusals may be answered as a retry: a watch that lags kube-scheduler's is
behind by milliseconds, seconds when the service is busy; kube-scheduler's backoff grows to 10 s."""

KEPT = 4096
"""Pods whose run is remembered at most; past it, runs older than RETRY_S are forgotten."""

RETRY_TEXT = "retrying after kube-scheduler's backoff"
"""In every such answer: what the pod's events say, and what tells it from an internal fault."""


def retry_text(reason: str, node: str) -> str:
    """The error a refusal that may owe to lag is answered with: the refusal's reason, and why retried."""
    return (
        f"{reason} (kube-scheduler found room on node {node} that this cache does not see yet: {RETRY_TEXT})"
    )


_GAVE_UP = -math.inf


class Lagging:
    def __init__(self, store: ClusterStore, *, clock: Callable[[], float], retry_s: float = RETRY_S) -> None:
        self.store = store
        self.clock = clock
        self.retry_s = retry_s
        self._since: dict[PodKey, float] = {}  # pod -> when its run of retry answers began

    def behind_on(self, rows: np.ndarray, requests: dict[str, int]) -> int | None:
        """The index of the first offered row that is schedulable, holds no reservation, could hold the
        pod's own core request empty, and has less free here than it: kube-scheduler's fit counted
        room there. None."""
        if not len(rows):
            return None
        core = len(CORE_RESOURCES)  # the first columns of every store
        request = self.store.vector({n: v for n, v in requests.items() if n in CORE_RESOURCES})[:core]
        if not request.any():
            return None
        arrays = self.store.arrays
        short = (arrays.free[rows, :core] < request).any(axis=1) & arrays.schedulable[rows]
        short &= (arrays.allocatable[rows, :core] >= request).all(axis=1)  # room there is possible at all
        for i in np.flatnonzero(short):
            if not self.store.reserved_on(int(rows[i])):
                return int(i)
        return None

    def retry(
        self,
        key: PodKey,
        rows: np.ndarray,
        node_names: Sequence[str],
        requests: dict[str, int],
        *,
        coming: str | None = None,
    ) -> str | None:
        """For a refusal of `key`: the offered node this cache may be behind on, when the refusal
        should be answered as a retry; None when it stands. `coming`: the node kube-scheduler's
        preemption is freeing for the pod (it is nominated there and its victims are leaving): offered,
        it may be that kube-scheduler has seen them go and this cache has not, whatever resource
        they free and whatever else is reserved there."""
        i = self.behind_on(rows, requests)
        if i is None and coming is not None:
            i = next((j for j, name in enumerate(node_names) if name == coming), None)
        if i is None:
            self._since.pop(key, None)  # the caches agree: a later disagreement starts a new run
            return None
        now = self.clock()
        since = self._since.get(key)
        if since is None:
            if len(self._since) >= KEPT:
                self._forget_old(now)
            self._since[key] = since = now
        if now - since <= self.retry_s:
            return node_names[i]
        if since != _GAVE_UP:
            self._since[key] = _GAVE_UP
            log.warning(
                "pod %s: kube-scheduler has offered node %s for %.0f s with room this cache does not see "
                "(it counts those pods' requests differently?); refusing it as unschedulable",
                key,
                node_names[i],
                now - since,
            )
        return None

    def forget(self, key: PodKey) -> None:
        """The pod passed, or a preemption begins freeing room for it: its run, if any, ended."""
        self._since.pop(key, None)

    def _forget_old(self, now: float) -> None:
        old = [k for k, s in self._since.items() if now - s > self.retry_s]
        for k in old:
            del self._since[k]
        if len(self._since) >= KEPT:
            self._since.clear()  # every run is young: a pod forgotten starts a new one, no worse

    def __len__(self) -> int:
        return len(self._since)
