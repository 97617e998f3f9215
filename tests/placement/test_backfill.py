"""The hold-and-backfill rule: which rows a waiting gang holds, what others may use, no starvation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.placement import ClusterArrays, GangRequest, LeafDemand, Outcome, TreeNode, plan_gang
from extender.placement.backfill import Hold, admit, choose_hold, withheld
from tests.placement.clusters import (
    GANG_ARRIVALS,
    GPU_POD,
    Start,
    Stream,
    gpu_domains,
    gpu_gang,
    simulate_stream,
)

GPU = GPU_POD


def cluster(racks: int, nodes_per_rack: int, used: dict[int, int] | None = None) -> ClusterArrays:
    return gpu_domains("rack", racks, nodes_per_rack, used)


def gang(pods: int, per_pod: int = 1, rack: bool = True) -> GangRequest:
    return gpu_gang(pods, per_pod, rack)


@pytest.mark.parametrize(
    ("used", "request_", "rows"),
    [
        # a whole rack is wanted; rack 1 has less in use, so it is held
        ({0: 4, 1: 4, 2: 1, 3: 1}, gang(2, per_pod=4), [2, 3]),
        # one whole node in rack 0 and the least used node is row 1
        ({0: 4, 1: 1, 2: 4, 3: 4}, gang(1, per_pod=4), [1]),
        # half a rack: only the least used node of the cheaper rack is held
        ({0: 3, 1: 4, 2: 2, 3: 4}, gang(1, per_pod=4), [2]),
        # no required level: the least used nodes anywhere
        ({0: 3, 1: 1, 2: 2, 3: 4}, gang(2, per_pod=4, rack=False), [1, 2]),
    ],
)
def test_choose_hold_takes_the_least_used_rows(
    used: dict[int, int], request_: GangRequest, rows: list[int]
) -> None:
    arrays = cluster(2, 2, used)
    hold = choose_hold(arrays, request_, "big")
    assert hold is not None
    assert hold.owner == "big"
    assert hold.rows.tolist() == rows
    assert hold.plan.outcome is Outcome.PLACED
    assert sorted(int(r) for r in hold.plan.rows[0]) == rows
    assert not hold.ready(arrays)


@pytest.mark.parametrize("request_", [gang(3, per_pod=4), gang(1, per_pod=5), gang(9, per_pod=1)])
def test_choose_hold_refuses_a_gang_no_drained_cluster_fits(request_: GangRequest) -> None:
    assert choose_hold(cluster(2, 2), request_, "x") is None


def _hold(arrays: ClusterArrays, rows: list[int], gpus: int) -> Hold:
    request = GangRequest(
        tree=(TreeNode(-1),),
        leaves=(LeafDemand(0, GPU * gpus, len(rows), eligible=np.isin(np.arange(arrays.n_rows), rows)),),
    )
    drained = cluster(2, 2)
    plan = plan_gang(drained, request)
    amounts = np.stack([GPU * gpus for _ in rows])
    return Hold("h", np.array(rows, dtype=np.int32), amounts, plan)


@pytest.mark.parametrize(
    ("used", "held_gpus", "view_gpus", "deficit", "ready"),
    [
        ({0: 0}, 4, 0, 0.0, True),  # all free: held whole, nothing left for others
        ({0: 1}, 4, 0, 0.25, False),  # one GPU still to leave
        ({0: 1}, 2, 1, 0.0, True),  # 3 free, 2 held: 1 left for others
        ({0: 4}, 2, 0, 0.5, False),  # never below zero
    ],
)
def test_withheld_deficit_and_ready(
    used: dict[int, int], held_gpus: int, view_gpus: int, deficit: float, ready: bool
) -> None:
    arrays = cluster(2, 2, used)
    hold = _hold(arrays, [0], held_gpus)
    before = arrays.free.copy()
    with withheld(arrays, [hold]) as view:
        assert int(view.free[0, 1]) == view_gpus
        assert (view.free[1:] == before[1:]).all()
    assert (arrays.free == before).all()  # restored
    assert hold.deficit(arrays) == pytest.approx(deficit)
    assert hold.ready(arrays) is ready


def test_admit_holds_for_the_head_and_backfills_only_around_it() -> None:
    # rack 0 full, rack 1 has 2 GPUs in use: the whole-rack gang waits and holds rack 1
    arrays = cluster(2, 2, {0: 4, 1: 4, 2: 1, 3: 1})
    queue = [
        ("big", gang(2, per_pod=4)),
        ("small", gang(1)),
        (
            "tiny",
            GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, np.array([500, 0], dtype=np.int64), 1),)),
        ),
    ]
    decision = admit(arrays, queue)
    assert [h.owner for h in decision.holds] == ["big"]
    assert decision.holds[0].rows.tolist() == [2, 3]
    # the one-GPU gang would fit rack 1 but that is the head's; a cpu-only pod uses what is spare
    assert [pos for pos, _ in decision.starts] == [2]
    # once rack 1 drains the head starts there, even while the small gang still waits
    for row in (2, 3):
        arrays.add(row, GPU)
    decision = admit(arrays, queue[:2], decision.holds)  # tiny has started
    assert [pos for pos, _ in decision.starts] == [0]
    assert sorted(int(r) for r in decision.starts[0][1].rows[0]) == [2, 3]
    assert [h.owner for h in decision.holds] == ["small"]  # the next head holds in its turn


def test_admit_rejects_depth_below_one() -> None:
    with pytest.raises(ValueError, match="depth"):
        admit(cluster(1, 2), [("a", gang(1))], depth=0)


def _simulate(arrays: ClusterArrays, stream: Stream, *, hold: bool, depth: int = 1) -> dict[int, float]:
    """Start times per gang index, with the hold or with plain backfill; capacity never over-committed."""
    holds: tuple[Hold, ...] = ()

    def decide(arrays: ClusterArrays, queue: list[tuple[int, GangRequest]], start: Start) -> None:
        nonlocal holds
        if hold:
            decision = admit(arrays, queue, holds, depth=depth)
            holds = decision.holds
            for pos, plan in decision.starts:
                start(pos, plan)
            return
        for pos, (_, request) in enumerate(queue):  # arrival order, any that fits (backfill, no hold)
            plan = plan_gang(arrays, request)
            if plan.outcome is Outcome.PLACED:
                start(pos, plan)

    return simulate_stream(arrays, stream, decide)


def test_a_stream_of_small_gangs_starves_the_big_one_without_a_hold_but_not_with_it() -> None:
    # one rack of 2 nodes; a one-GPU gang every 1 time unit, each running 2.5: the rack never drains
    stream = [(0.0, gang(1), 2.5), (0.5, gang(2, per_pod=4), 1.0)]
    stream += [(1.0 + k, gang(1), 2.5) for k in range(40)]
    without = _simulate(cluster(1, 2), stream, hold=False)
    with_hold = _simulate(cluster(1, 2), stream, hold=True)
    assert without[1] > 40  # only once the small stream has ended
    assert with_hold[1] <= 3.0  # as soon as the first small gang left
    assert set(with_hold) == set(range(len(stream)))


gangs = GANG_ARRIVALS


@settings(max_examples=60, deadline=None)
@given(st.lists(gangs, min_size=1, max_size=25), st.integers(1, 3))
def test_no_gang_waits_forever_and_no_node_is_over_committed(
    raw: list[tuple[float, int, int, bool, float]], depth: int
) -> None:
    stream = sorted(((t, gang(p, g, rack), r) for t, p, g, rack, r in raw), key=lambda s: s[0])
    started = _simulate(cluster(2, 3), stream, hold=True, depth=depth)
    for i, (_, request, _) in enumerate(stream):
        fits = plan_gang(cluster(2, 3), request).outcome is Outcome.PLACED
        assert (i in started) == fits, f"gang {i}: fits an empty cluster {fits}, started {i in started}"


def test_the_head_moves_its_hold_only_to_less_left_to_drain() -> None:
    # rack 0 has 2 GPUs in use (long-running), rack 1 has 4: rack 0 is held first
    arrays = cluster(2, 2, {0: 1, 1: 1, 2: 2, 3: 2})
    queue = [("big", gang(2, per_pod=4))]
    first = admit(arrays, queue)
    assert first.holds[0].rows.tolist() == [0, 1]
    # rack 1 drains to 1 GPU in use while rack 0 does not move: the hold follows the smaller deficit
    arrays.add(2, GPU)
    arrays.add(3, GPU * 2)
    moved = admit(arrays, queue, first.holds)
    assert moved.holds[0].rows.tolist() == [2, 3]
    # an equal deficit elsewhere (rack 0 drains to 1 GPU too, and wins ties by id) is no reason to move
    arrays.add(0, GPU)
    assert choose_hold(arrays, queue[0][1], "big").rows.tolist() == [0, 1]
    stays = admit(arrays, queue, moved.holds)
    assert stays.holds[0].rows.tolist() == [2, 3]
