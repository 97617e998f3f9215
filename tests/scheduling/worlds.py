"""A scheduler over an embedded cluster whose ledger reads a clock the test moves: what the unit
tests of cache lag, its retry answer and the condition repair start from."""

from __future__ import annotations

from typing import Any

from extender.scheduling.ledger import GangLedger
from extender.scheduling.scheduler import Scheduler
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore


class ClockedWorld:
    """`objects` applied to a store through an embedded cluster; the ledger's clock is `clock_s`."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = ClusterStore()
        self.cluster = EmbeddedCluster(objects)
        self.cluster.attach(self.store)
        self.clock_s = 0.0
        self.scheduler = Scheduler(
            self.store,
            GangLedger(
                self.store,
                wait_s=5,
                backoff_initial_s=1,
                backoff_max_s=10,
                clock=lambda: self.clock_s,
                release_on_first_bind=False,  # the barrier: its steps are what these worlds walk through
            ),
        )
