"""Passthrough: the filter reply for a plain pod, made of kube-scheduler's own list of nodes.

kube-scheduler offers only nodes its own filters passed on its cache. For a pod that is in no gang
and has no plan, this service refuses only nodes where its cache knows more (held, not schedulable
here, or changed moments ago: `Scheduler.plain_refusals`). The offered names are mapped to rows
straight from the request's bytes (`ClusterStore.rows_of_names`, one compiled pass, no string per
name); when no offered row is refused, the reply is the request's own NodeNames bytes. A name the
cache does not hold is still an HTTP 400, found on the decoded names so the error can name them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from extender.scheduling.scheduler import Scheduler
from extender.server import wire


class Passthrough:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def reply(self, body: bytes, pod: dict[str, Any]) -> bytes | None:
        """The filter reply for `pod` (peeked from `body`, already checked), or None: the general path
        answers. Raises UnknownNodesError when the list names a node the cache does not hold."""
        scheduler = self.scheduler
        refused = scheduler.plain_refusals(pod)
        if refused is None:
            return None
        array = wire.names_array(body)
        if array is None:
            return None
        store = scheduler.store
        rows = store.rows_of_names(array)
        if rows is None or (rows.size and rows.min() < 0):
            # escapes to decode, or a name the cache does not hold: the exact check names it (400)
            names = wire.node_names(array)
            if not names:
                return None  # empty or malformed: the general path says why
            rows = scheduler.rows_of(names)
        if not rows.size:
            return None  # nothing offered: the general path says why
        if refused.size:
            kept = ~np.isin(rows, refused)
            if not kept.any():
                return None  # refused everywhere: the general path gives the reason
            if not kept.all():
                scheduler.plain_passed(pod)
                names = store.row_names
                return wire.filter_echo(orjson.dumps([names[r] for r in rows[kept].tolist()]))
        scheduler.plain_passed(pod)
        return wire.filter_echo(array)
