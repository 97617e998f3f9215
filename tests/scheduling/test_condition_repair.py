"""A bound pod left marked PodScheduled=False by kube-scheduler's late status write (its asynchronous
write of a failed attempt landing after the binding: kubernetes/kubernetes#139417) is marked
PodScheduled=True by the next tick, for the schedulers that call this extender only."""

from __future__ import annotations

from typing import Any

import pytest

from extender.scheduling.scheduler import Scheduler
from extender.state.embedded import EmbeddedCluster
from tests.builders import make_node, make_pod
from tests.scheduling.worlds import ClockedWorld

STALE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}


def world() -> tuple[EmbeddedCluster, Scheduler]:
    w = ClockedWorld([make_node("n1", cpu="8"), make_pod("asked", cpu="1")])
    w.scheduler.filter(w.cluster.get("", "Pod", "default", "asked"), ["n1"])  # gang-scheduler calls us
    return w.cluster, w.scheduler


def pod(
    name: str, *, node: str | None, cond: dict[str, Any] | None, scheduler: str = "gang-scheduler"
) -> dict:
    p = make_pod(name, cpu="1", node=node)
    p["spec"]["schedulerName"] = scheduler
    if cond is not None:
        p["status"] = {"conditions": [cond]}
    return p


# (case, the pod as the watch shows it, repaired)
CASES = [
    ("bound, marked unschedulable by a late write: repaired", pod("p", node="n1", cond=STALE), True),
    ("bound and marked scheduled: left alone", pod("p", node="n1", cond={**STALE, "status": "True"}), False),
    ("pending and marked unschedulable: that is true", pod("p", node=None, cond=STALE), False),
    ("another scheduler's pod: not ours to mend", pod("p", node="n1", cond=STALE, scheduler="other"), False),
]


@pytest.mark.parametrize(("case", "obj", "repaired"), CASES, ids=[c[0] for c in CASES])
def test_a_bound_pod_marked_unschedulable_is_marked_scheduled(case: str, obj: dict, repaired: bool) -> None:
    cluster, scheduler = world()
    cluster.apply(obj)
    effects = [e for e in scheduler.tick(synced=True).effects if e.kind == "condition" and e.name == "p"]
    if not repaired:
        assert effects == []
        return
    assert (
        len(effects) == 1
        and effects[0].data["type"] == "PodScheduled"
        and effects[0].data["status"] == "True"
    )
    assert "n1" in effects[0].data["message"]
    assert [
        e for e in scheduler.tick(synced=True).effects if e.kind == "condition"
    ] == []  # once per sighting


def test_a_follower_writes_no_repair() -> None:
    cluster, scheduler = world()
    cluster.apply(pod("p", node="n1", cond=STALE))
    assert [e for e in scheduler.tick(synced=True, acting=False).effects if e.kind == "condition"] == []
