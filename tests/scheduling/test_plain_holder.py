"""A plain pod as the holder of a fair-share hold (queues.admission rule 3): one that fits nowhere,
that kube-scheduler's preemption is not freeing room for, holds no one. Fits nowhere: no schedulable
node has room for it as the cluster is now (kube-scheduler, its own filters passing no node, may
never ask this service), or its last filter found no offered node to fit it and no capacity was
released since. A nominated one, one the preempt verb evicts for, or one with capacity grown since
its filter still holds.

The world: five 4-gpu nodes; team-a (quota 8) runs 16 gpus of plain pods on node-0..3, and 2 more on
node-4 when `crowded`. team-a's small gang (2 x 1 gpu) is over its fair share; team-b's plain pod of
4 gpus, within its share (4), is the holder: the free gpus (2 or 4) are short of both.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extender.scheduling.decisions import Verdict
from tests.builders import make_node, make_pod
from tests.scheduling.test_queues import World, gpu_nodes, kai_queue

QUEUE = "kai.scheduler/queue"
RACK_KEY = "topology.kubernetes.io/rack"


OFFERED = ["node-0", "node-1", "node-2", "node-3"]  # kube-scheduler's filters left node-4 out


def world(*, crowded: bool, holder_extra: dict[str, str] | None = None) -> tuple[World, list[str]]:
    w = World(
        [
            *gpu_nodes(5, gpus=4),
            kai_queue("team-a", gpu={"quota": 8, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
        ]
    )
    for i in range(4):
        w.cluster.apply(make_pod(f"a{i}", gpu="4", node=f"node-{i}", labels={QUEUE: "team-a"}, uid=f"u-a{i}"))
    if crowded:
        w.cluster.apply(make_pod("a4", gpu="2", node="node-4", labels={QUEUE: "team-a"}, uid="u-a4"))
    holder = make_pod("holder", gpu="4", labels={QUEUE: "team-b"}, uid="u-holder")
    holder["spec"]["containers"][0]["resources"]["requests"].update(holder_extra or {})
    w.cluster.apply(holder)
    small = w.gang("small", 2, "team-a")
    return w, small


def filtered_on_offered(w: World) -> None:
    decision = w.scheduler.filter(w.pod("holder"), OFFERED)
    assert decision.verdict is Verdict.NO_FIT, decision.reason


def nominated(w: World) -> None:
    pod = w.pod("holder")
    w.cluster.apply({**pod, "status": {**(pod.get("status") or {}), "nominatedNodeName": "node-0"}})


def preempted_for(w: World) -> None:
    # kube-scheduler's preemption for the holder: a reclaim of team-a's pod on node-0 (team-a is over
    # its share and stays above its quota), which the verb keeps
    victims = {"node-0": {"Pods": [{"UID": "u-a0"}], "NumPDBViolations": 0}}
    assert set(w.scheduler.preempt(w.pod("holder"), victims).victims) == {"node-0"}


def released_after_filter(w: World) -> None:
    filtered_on_offered(w)
    w.cluster.apply(make_node("node-5", cpu="64", memory="256Gi", gpu="1"))  # capacity grew: it may fit now


def selects_a_full_node(w: World) -> None:
    # node-4 has room, but the holder's nodeSelector admits node-0 alone, which is full
    pod = w.pod("holder")
    w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeSelector": {"kubernetes.io/hostname": "node-0"}}})


def nothing(w: World) -> None:
    pass


@pytest.mark.parametrize(
    ("crowded", "holder_extra", "after", "holds"),
    [
        pytest.param(True, None, nothing, False, id="no node of the cluster has room: holds no one"),
        pytest.param(False, {"example.com/foo": "1"}, nothing, False, id="asks for a resource no node has"),
        pytest.param(False, None, filtered_on_offered, False, id="its filter found no offered node to fit"),
        pytest.param(True, None, nominated, True, id="nominated by kube-scheduler's preemption: holds"),
        pytest.param(True, None, preempted_for, True, id="the preempt verb evicts for it: holds"),
        pytest.param(False, None, released_after_filter, True, id="capacity grown since its filter: holds"),
        pytest.param(False, None, nothing, True, id="room on a node, never filtered: holds"),
        pytest.param(False, None, selects_a_full_node, False, id="room only where its selector keeps it off"),
    ],
)
def test_a_plain_pod_that_fits_nowhere_holds_no_one_unless_room_may_come_for_it(
    crowded: bool, holder_extra: dict[str, str] | None, after: Callable[[World], None], holds: bool
) -> None:
    w, small = world(crowded=crowded, holder_extra=holder_extra)
    after(w)
    decision = w.filter(small[0])
    if holds:
        assert decision.verdict is Verdict.WAITING and "held so that queue team-b" in decision.reason
    else:
        assert decision.verdict is Verdict.PASS, decision.reason
        w.schedule(*small)
        assert w.bound(*small)


def test_a_plain_pod_found_to_fit_holds_again() -> None:
    # found to fit no offered node, then offered the node with room (its filter passes): it holds again
    w, small = world(crowded=False)
    filtered_on_offered(w)
    assert w.filter("holder").verdict is Verdict.PASS  # offered node-4 now
    decision = w.filter(small[0])
    assert decision.verdict is Verdict.WAITING and "held so that queue team-b" in decision.reason


@pytest.mark.parametrize("pending", [1, 2])
def test_a_group_of_quorum_one_whose_rack_is_full_holds_no_one(pending: int) -> None:
    """team-b's KAI PodGroup of minMember 1 with a required rack: one member bound in rack rA, which
    is full, and `pending` more to come, which may go only there. Room on node-4 (rack rB) is of no
    use to them: they hold no one (interleavings seed 3275: a group whose quorum was lowered to one,
    its members' own filters passing no node, held team-a's pod for good)."""
    from tests.builders import gang_pod, make_kai_podgroup

    racks = {"node-0": "rA", "node-1": "rA", "node-2": "rB", "node-3": "rB", "node-4": "rB"}
    w = World(
        [
            *(make_node(n, cpu="64", memory="256Gi", gpu="4", rack=r) for n, r in racks.items()),
            kai_queue("team-a", gpu={"quota": 8, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
            make_kai_podgroup(
                "w", min_member=1, queue="team-b", topology={"requiredTopologyLevel": RACK_KEY}
            ),
        ]
    )
    for i, (node, gpus) in enumerate((("node-0", "4"), ("node-1", "3"), ("node-2", "4"), ("node-3", "4"))):
        w.cluster.apply(make_pod(f"a{i}", gpu=gpus, node=node, labels={QUEUE: "team-a"}, uid=f"u-a{i}"))
    w.cluster.apply(gang_pod("w-0", "w", gpu="1", node="node-1"))
    for i in range(1, 1 + pending):
        w.cluster.apply(gang_pod(f"w-{i}", "w", gpu="4"))
    small = w.gang("small", 2, "team-a")
    decision = w.filter(small[0])
    assert decision.verdict is Verdict.PASS, decision.reason
    w.schedule(*small)
    assert w.bound(*small)
