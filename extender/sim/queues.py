"""The simulator's own account of KAI queue usage: what each queue's bound pods request, its peak,
its low point after an eviction, and every moment a queue went past its limit.

Counted by the driver bind by bind and eviction by eviction from the cluster's pods, not taken from
the service: the check must hold even if the service's own accounting were wrong. A queue's usage
counts toward each of its ancestors, as KAI counts it. Nothing is counted when the cluster has no
Queue objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.grouping.kai import labelled_queue
from extender.grouping.owners import walk_owners
from extender.model import labels as L
from extender.model.keys import PodKey
from extender.model.queue import QUEUE_API_GROUP, QUEUE_KIND, Queue, QueueError, amount_text, parse_queue
from extender.model.resources import QuantityError, pod_requests

DEFAULT_QUEUE = "default-queue"
"""The service's default queue (`--default-queue`) for a pod that names none."""
PODGROUP_GROUP = "scheduling.run.ai"
PODGROUP_KIND = "PodGroup"
OTHER_SCHEDULER = L.DEFAULT_SCHEDULER_NAME  # the pods the simulated cluster's other scheduler places


class QueueUsage:
    """Per queue and resource: in use now, the peak, the low point right after an eviction, breaches."""

    def __init__(self, cluster: Any, *, default_queue: str = DEFAULT_QUEUE) -> None:
        self._cluster = cluster
        self._default = default_queue
        self.queues: dict[str, Queue] = {}
        for obj in cluster.list(QUEUE_API_GROUP, QUEUE_KIND):
            try:
                q = parse_queue(obj)
            except QueueError:
                continue  # the service reports a malformed queue; there is no limit here to check
            self.queues[q.name] = q
        self.in_use: dict[str, dict[str, int]] = {name: {} for name in self.queues}
        self.peak: dict[str, dict[str, int]] = {name: {} for name in self.queues}
        self.low_after_eviction: dict[str, dict[str, int]] = {}
        self.breaches: list[str] = []
        self.queue_of: dict[PodKey, str] = {}
        """The queue of every pod seen, evicted ones included."""
        self._counted: dict[PodKey, tuple[list[str], dict[str, int]]] = {}

    def admitted(self, key: PodKey, pod: Mapping[str, Any]) -> None:
        """A pod the driver has seen: its queue, for the report."""
        if self.queues and key not in self.queue_of and (queue := self._queue_of(pod)) is not None:
            self.queue_of[key] = queue

    def bound(self, key: PodKey, pod: Mapping[str, Any]) -> None:
        """A pod is on a node (bound in the input, or just now): its queue's usage grows."""
        if not self.queues or key in self._counted:
            return
        queue = self._queue_of(pod)
        if queue is None:
            return
        try:
            requests = dict(pod_requests(pod))
        except QuantityError:
            return
        chain = self._ancestors(queue)
        self.queue_of[key] = queue
        self._counted[key] = (chain, requests)
        for name in chain:
            use = self.in_use[name]
            for r, v in requests.items():
                use[r] = use.get(r, 0) + v
                self.peak[name][r] = max(self.peak[name].get(r, 0), use[r])
                limit = self.queues[name].resource(r).limit
                if limit is not None and v > 0 and use[r] > limit:
                    self.breaches.append(
                        f"queue {name}: {r} in use {amount_text(r, use[r])} > limit {amount_text(r, limit)} "
                        f"once {key} was bound"
                    )

    def evicted(self, key: PodKey) -> None:
        """A bound pod was deleted: its queue's usage shrinks, and its low point is noted."""
        counted = self._counted.pop(key, None)
        if counted is None:
            return
        chain, requests = counted
        for name in chain:
            use = self.in_use[name]
            low = self.low_after_eviction.setdefault(name, {})
            for r, v in requests.items():
                use[r] = use.get(r, 0) - v
                low[r] = min(low.get(r, use[r]), use[r])

    def _ancestors(self, queue: str) -> list[str]:
        chain = [queue]
        while (parent := self.queues[chain[-1]].parent) in self.queues and parent not in chain:
            chain.append(parent)
        return chain

    def _queue_of(self, pod: Mapping[str, Any]) -> str | None:
        """The queue the pod's KAI PodGroup names, else its workload's or its own label, else the default
        queue; None when that queue does not exist or the pod is another scheduler's naming none (the
        service's rules)."""
        meta = pod.get("metadata") or {}
        group = (meta.get("annotations") or {}).get(L.POD_GROUP_NAME)
        queue = None
        if group:
            pg = self._cluster.get(PODGROUP_GROUP, PODGROUP_KIND, meta.get("namespace"), str(group))
            queue = ((pg or {}).get("spec") or {}).get("queue") or None
        queue = queue or labelled_queue(walk_owners(dict(pod), self._cluster).top, dict(pod))
        if queue is None:
            scheduler = (pod.get("spec") or {}).get("schedulerName") or OTHER_SCHEDULER
            queue = None if scheduler == OTHER_SCHEDULER else self._default
        return queue if queue in self.queues else None
