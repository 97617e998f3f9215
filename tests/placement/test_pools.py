"""Size-class pools: which class a gang is, where each class starts, the reserve, no starvation."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.placement import ClusterArrays, GangRequest, Outcome, Plan, plan_gang
from extender.placement.pools import PoolAdmission, Pools, PoolSettings, SizeClass, admit, size_class
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
SMALL, LARGE = SizeClass.SMALL, SizeClass.LARGE


def cluster(blocks: int, nodes_per_block: int, used: dict[int, int] | None = None) -> ClusterArrays:
    return gpu_domains("block", blocks, nodes_per_block, used)


def gang(pods: int, per_pod: int = 1, block: bool = True) -> GangRequest:
    return gpu_gang(pods, per_pod, block)


def blocks_of(plan: Plan, nodes_per_block: int) -> set[int]:
    return {int(r) // nodes_per_block for rows in plan.rows for r in rows}


def pools(classes: dict[int, SizeClass]) -> Pools:
    return Pools(MappingProxyType(classes))


@pytest.mark.parametrize(
    ("demand", "typical", "share", "expected"),
    [
        ([4000, 4], [32000, 16], 0.5, SMALL),  # a quarter of a domain's GPUs
        ([8000, 8], [32000, 16], 0.5, LARGE),  # half: large from the threshold up
        ([8000, 8], [32000, 16], 0.6, SMALL),
        ([20000, 1], [32000, 16], 0.5, LARGE),  # the dominant resource decides (cpu here)
        ([0, 0], [32000, 16], 0.5, SMALL),  # asks nothing
        ([0, 1], [32000, 0], 0.5, LARGE),  # a resource no domain has fits no small pool either
    ],
)
def test_size_class_by_dominant_share_of_a_typical_domain(
    demand: list[int], typical: list[int], share: float, expected: SizeClass
) -> None:
    assert size_class(np.array(demand), np.array(typical, dtype=float), share) is expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": -1}, "level"),
        ({"level": 0, "large_share": 0.0}, "large_share"),
        ({"level": 0, "large_share": 1.5}, "large_share"),
        ({"level": 0, "reserve": -0.5}, "reserve"),
        ({"level": 0, "depth": 0}, "depth"),
        ({"level": 0, "large_depth": 0}, "large_depth"),
    ],
)
def test_pool_settings_refuse_bad_values(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PoolSettings(**kwargs)  # type: ignore[arg-type]


def test_admit_refuses_a_level_the_cluster_does_not_have() -> None:
    with pytest.raises(ValueError, match="level"):
        admit(cluster(1, 2), [("a", gang(1))], Pools(), PoolSettings(level=3))


# 3 blocks of 2 nodes (8 GPUs each): a gang of 4+ GPUs is large
@pytest.mark.parametrize(
    ("used", "classes", "request_", "reserve", "started_in", "class_after"),
    [
        # a small gang packs into the small block in use (block 1), not the emptier large one
        ({0: 2, 2: 3}, {0: LARGE, 1: SMALL}, gang(1), 0, {1}, {0: LARGE, 1: SMALL}),
        # the small block is full: a small gang opens the empty block 2, which becomes small
        ({0: 2, 2: 4, 3: 4}, {0: LARGE, 1: SMALL}, gang(1), 0, {2}, {0: LARGE, 1: SMALL, 2: SMALL}),
        # ... unless the reserve keeps the one empty block for large gangs: it waits (holding in block 1)
        ({0: 2, 2: 4, 3: 4}, {0: LARGE, 1: SMALL}, gang(1), 1, set(), {0: LARGE, 1: SMALL}),
        # the room left for large gangs counts the large block's free half: 1 empty + 0.5 - 1 opened
        ({0: 4, 2: 4, 3: 4}, {0: LARGE, 1: SMALL}, gang(1), 0.5, {2}, {0: LARGE, 1: SMALL, 2: SMALL}),
        ({0: 4, 2: 4, 3: 4}, {0: LARGE, 1: SMALL}, gang(1), 0.75, set(), {0: LARGE, 1: SMALL}),
        # a large gang takes the large block's free node, not the small block's
        ({0: 4, 2: 1}, {0: LARGE, 1: SMALL}, gang(1, per_pod=4), 0, {0}, {0: LARGE, 1: SMALL}),
        # no large block fits it: it opens an empty one, never the small block with room
        (
            {0: 4, 1: 4, 2: 1},
            {0: LARGE, 1: SMALL},
            gang(1, per_pod=4),
            1,
            {2},
            {0: LARGE, 1: SMALL, 2: LARGE},
        ),
        # a block that drained empty has lost its class: the large gang takes it whole
        ({}, {0: SMALL, 1: SMALL}, gang(2, per_pod=4), 0, {0}, {0: LARGE}),
        # a block in use the rule never opened (pods of unknown gangs) counts as small
        ({4: 1}, {}, gang(1), 0, {2}, {2: SMALL}),
    ],
)
def test_admit_starts_each_class_in_its_own_blocks_first(
    used: dict[int, int],
    classes: dict[int, SizeClass],
    request_: GangRequest,
    reserve: float,
    started_in: set[int],
    class_after: dict[int, SizeClass],
) -> None:
    arrays = cluster(3, 2, used)
    before = arrays.free.copy()
    decision = admit(arrays, [("g", request_)], pools(classes), PoolSettings(level=0, reserve=reserve))
    assert (arrays.free == before).all()  # the caller's arrays are untouched
    started = {pos: plan for pos, plan in decision.starts}
    assert set(started) == ({0} if started_in else set())
    if started_in:
        assert blocks_of(started[0], 2) == started_in
    assert dict(decision.pools.classes) == class_after


def test_a_small_gang_takes_a_reserved_block_only_when_no_small_block_could_hold_it() -> None:
    # nothing in use, so no small block: the reserve cannot make the gang wait for ever
    decision = admit(cluster(2, 2), [("a", gang(1))], Pools(), PoolSettings(level=0, reserve=2))
    assert [pos for pos, _ in decision.starts] == [0]
    assert dict(decision.pools.classes) == {0: SMALL}


def test_a_large_head_holds_the_emptiest_block_and_small_gangs_keep_off_it() -> None:
    # both blocks small and in use; block 1 has less to drain, so the whole-block gang holds it
    arrays = cluster(2, 2, {0: 4, 1: 2, 2: 1})
    queue = [("big", gang(2, per_pod=4)), ("small", gang(1, per_pod=2))]
    first = admit(arrays, queue, pools({0: SMALL, 1: SMALL}), PoolSettings(level=0))
    assert [h.owner for h in first.pools.holds] == ["big"]
    assert first.pools.holds[0].rows.tolist() == [2, 3]
    # the small gang would fit block 1's free GPUs, but they are the head's; block 0 has 2 + 0 free
    assert blocks_of(dict(first.starts)[1], 2) == {0}
    # once block 1 drains, the head starts there and block 1 is large
    arrays.add(2, GPU)
    arrays.sub(1, GPU * 2)
    second = admit(arrays, queue[:1], first.pools, PoolSettings(level=0))
    assert [pos for pos, _ in second.starts] == [0]
    assert dict(second.pools.classes) == {0: SMALL, 1: LARGE}
    assert second.pools.holds == ()


def test_the_oldest_waiting_gang_of_each_class_holds() -> None:
    # both blocks small: block 0 full, block 1 with 2 GPUs free; a small and a large gang wait
    arrays = cluster(2, 2, {0: 4, 1: 4, 2: 3, 3: 3})
    queue = [("small", gang(3)), ("big", gang(2, per_pod=4))]
    decision = admit(arrays, queue, pools({0: SMALL, 1: SMALL}), PoolSettings(level=0, depth=1))
    assert decision.starts == ()
    # the small head holds where less is to drain; the large gang, though second, holds the other block
    assert [(h.owner, h.rows.tolist()) for h in decision.pools.holds] == [("small", [2]), ("big", [0, 1])]


def _simulate(arrays: ClusterArrays, stream: Stream, rule: PoolSettings) -> dict[int, float]:
    """Start times per gang index under the pool policy; capacity never over-committed."""
    state = Pools()

    def decide(arrays: ClusterArrays, queue: list[tuple[int, GangRequest]], start: Start) -> None:
        nonlocal state
        decision: PoolAdmission = admit(arrays, queue, state, rule)
        state = decision.pools
        for pos, plan in decision.starts:
            start(pos, plan)

    return simulate_stream(arrays, stream, decide)


def test_small_gangs_pack_into_one_block_so_a_large_one_finds_the_other_whole() -> None:
    # 2 blocks of 2 nodes; one-GPU gangs every 0.5 time units, each running 2.5 (5 at a time)
    stream = [(0.0, gang(1), 2.5), (0.5, gang(2, per_pod=4), 1.0)]
    stream += [(1.0 + k / 2, gang(1), 2.5) for k in range(80)]
    started = _simulate(cluster(2, 2), stream, PoolSettings(level=0))
    assert started[1] == 0.5
    assert set(started) == set(range(len(stream)))


def test_a_stream_of_small_gangs_over_both_blocks_does_not_starve_a_large_one() -> None:
    # one-GPU gangs every 0.25 running 2.5 (10 at a time) spill into both blocks before the large gang
    stream = [(k / 4, gang(1), 2.5) for k in range(20)] + [(5.0, gang(2, per_pod=4), 1.0)]
    stream += [(5.0 + k / 4, gang(1), 2.5) for k in range(1, 80)]
    started = _simulate(cluster(2, 2), stream, PoolSettings(level=0))
    assert started[20] <= 5.0 + 2.5  # its held block drains in one run time
    assert set(started) == set(range(len(stream)))


gangs = GANG_ARRIVALS


@settings(max_examples=60, deadline=None)
@given(
    st.lists(gangs, min_size=1, max_size=25),
    st.builds(
        PoolSettings,
        level=st.just(0),
        large_share=st.sampled_from([0.25, 0.5, 1.0]),
        reserve=st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]),
        depth=st.integers(1, 3),
        large_depth=st.integers(1, 3),
    ),
)
def test_no_gang_waits_forever_and_no_node_is_over_committed(
    raw: list[tuple[float, int, int, bool, float]], rule: PoolSettings
) -> None:
    stream = sorted(((t, gang(p, g, block), r) for t, p, g, block, r in raw), key=lambda s: s[0])
    started = _simulate(cluster(3, 2), stream, rule)
    for i, (_, request, _) in enumerate(stream):
        fits = plan_gang(cluster(3, 2), request).outcome is Outcome.PLACED
        assert (i in started) == fits, f"gang {i}: fits an empty cluster {fits}, started {i in started}"
