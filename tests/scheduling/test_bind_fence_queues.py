"""The start-up bind fence and KAI queues: a killed process's bindings that land while this process
waits out its fence count toward their queue, which this process could not see coming. Room planned
(or held for a single pod's bind) meanwhile within the queue's limit is then over it: like room on a
node those landings over-fill (test_bind_fence.py), it is given back and replanned under admission,
so no queue, nor any ancestor, is ever above its limit.

The randomized form is `test_interleavings.py::test_killed_mid_release_its_bindings_land_after_the_restart`
(queue scenarios); these are its cases one by one, on a fake clock.
"""

from __future__ import annotations

import pytest

from extender.scheduling.decisions import BindVerdict, Verdict
from tests.builders import make_pod
from tests.scheduling.test_queues import World, gpu_nodes, kai_queue

FENCE_S = 5.0
GPU = "nvidia.com/gpu"

LEAF_LIMIT = [kai_queue("team-a", gpu={"quota": 4, "limit": 8})]
PARENT_LIMIT = [
    kai_queue("org", gpu={"quota": 4, "limit": 8}),
    kai_queue("team-a", "org", gpu={"quota": 2, "limit": -1}),
    kai_queue("team-b", "org", gpu={"quota": 2, "limit": -1}),
]
# (case, queues, the predecessor's gang's queue, this process's gang's queue, the queue whose limit binds)
CASES = [
    ("the gang's own queue", LEAF_LIMIT, "team-a", "team-a", "team-a"),
    ("a parent, landings in a sibling", PARENT_LIMIT, "team-b", "team-a", "org"),
]


def fenced_world(queues: list[dict]) -> World:
    return World([*gpu_nodes(3), *queues], bind_fence_s=FENCE_S)


def land(w: World, name: str, node: str) -> None:
    """A binding the killed process had sent lands at the API server now (the watch delivers it)."""
    pod = w.pod(name)
    w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": node}})


def over_limits(w: World) -> dict[str, int]:
    snap = w.scheduler.queue_snapshot()
    assert snap is not None
    out = {}
    for name, q in snap.tree.queues.items():
        limit = q.resource(GPU).limit
        if limit is not None and snap.allocated[name][GPU] > limit:
            out[name] = snap.allocated[name][GPU]
    return out


@pytest.mark.parametrize(("case", "queues", "old_queue", "new_queue", "limited"), CASES)
def test_a_plan_made_inside_the_fence_is_dropped_when_landings_push_its_queue_over(
    case, queues, old_queue, new_queue, limited
) -> None:
    w = fenced_world(queues)
    old = w.gang("old", 4, old_queue)  # released by the killed process: its POSTs are in flight
    new = w.gang("new", 6, new_queue)
    assert w.filter(new[0]).verdict is Verdict.PASS, case  # 0 + 6 <= 8: the pending 4 are not seen
    planned = {w.scheduler.ledger.planned(f"default/{n}").node for n in new}
    free_node = next(n for n in sorted(w.store.node_rows) if n not in planned)
    for name in old:  # on a node the plan does not use: no node is over-filled, only the queue
        land(w, name, free_node)
    assert over_limits(w) == {}, f"{case}: queue {limited} stays within its limit"
    assert all(w.scheduler.ledger.planned(f"default/{n}") is None for n in new), "the plan was dropped"
    assert not w.store.reservations
    # the gang is placed again under admission: 4 in use + 6 needed > 8
    decision = w.filter(new[0])
    assert decision.verdict is Verdict.WAITING
    assert f"queue {limited}: gpu limit 8, in use 4, gang needs 6" in decision.reason


def test_a_single_pods_hold_inside_the_fence_is_given_back_when_landings_push_its_queue_over() -> None:
    w = fenced_world(LEAF_LIMIT)
    old = w.gang("old", 4, "team-a")
    w.cluster.apply(make_pod("p", gpu="6", labels={"kai.scheduler/queue": "team-a"}))
    pod = w.pod("p")
    d = w.scheduler.bind(namespace="default", name="p", uid=pod["metadata"]["uid"], node="node-0")
    assert d.verdict is BindVerdict.NOW and d.wait_s > 0  # held while its POST waits out the fence
    assert "default/p" in w.store.reservations
    for name in old:
        land(w, name, "node-1")
    assert over_limits(w) == {}
    assert "default/p" not in w.store.reservations, "the held room goes back to the queue"
    w.scheduler.ledger.clock.now += FENCE_S
    refused = w.scheduler.fence_over("default/p", "node-0")
    assert "queue team-a: gpu limit 8, in use 4, pod needs 6" in refused


def test_a_landing_that_keeps_the_queue_within_its_limit_leaves_the_plan_standing() -> None:
    w = fenced_world(LEAF_LIMIT)
    old = w.gang("old", 2, "team-a")
    new = w.gang("new", 6, "team-a")
    assert w.filter(new[0]).verdict is Verdict.PASS
    planned = {w.scheduler.ledger.planned(f"default/{n}").node for n in new}
    free_node = next(n for n in sorted(w.store.node_rows) if n not in planned)
    for name in old:  # 2 + 6 = 8: at the limit, not above it
        land(w, name, free_node)
    assert over_limits(w) == {}
    assert all(w.scheduler.ledger.planned(f"default/{n}") is not None for n in new), "nothing to give back"
