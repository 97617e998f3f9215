"""Size-class pools: which class a gang is, where each class starts, the reserve, no starvation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.placement import ClusterArrays, GangRequest, Outcome, Plan, plan_gang
from extender.placement.backfill import Hold
from extender.placement.pools import (
    PoolFit,
    PoolSettings,
    SizeClass,
    admit,
    allowed_rows,
    classes_of,
    gang_demand,
    plan_in_pools,
    size_class,
    typical_domain,
)
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
IN_POOL, OPENED, OUTSIDE, NONE = PoolFit.IN_POOL, PoolFit.OPENED, PoolFit.OUTSIDE, PoolFit.NONE


def cluster(blocks: int, nodes_per_block: int, used: dict[int, int] | None = None) -> ClusterArrays:
    return gpu_domains("block", blocks, nodes_per_block, used)


def gang(pods: int, per_pod: int = 1, block: bool = True) -> GangRequest:
    return gpu_gang(pods, per_pod, block)


def blocks_of(plan: Plan, nodes_per_block: int) -> set[int]:
    return {int(r) // nodes_per_block for rows in plan.rows for r in rows}


def rows_mask(arrays: ClusterArrays, rows: set[int]) -> np.ndarray:
    mask = np.zeros(arrays.capacity, dtype=bool)
    mask[sorted(rows)] = True
    return mask


def size_of(arrays: ClusterArrays, request: GangRequest, share: float = 0.5) -> SizeClass:
    return size_class(gang_demand(arrays, request), typical_domain(arrays, 0), share)


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
        ({"large_share": 0.0}, "large share"),
        ({"large_share": 1.5}, "large share"),
        ({"large_share": float("nan")}, "large share"),
        ({"reserve": -0.5}, "reserve"),
        ({"reserve": float("nan")}, "reserve"),
    ],
)
def test_pool_settings_refuse_bad_values(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PoolSettings(**kwargs)


def test_admit_refuses_a_level_the_cluster_does_not_have() -> None:
    arrays = cluster(1, 2)
    with pytest.raises(ValueError, match="level"):
        admit(arrays, [("a", gang(1))], (), PoolSettings(), level=3, large_rows=rows_mask(arrays, set()))


@pytest.mark.parametrize(
    ("used", "large", "expected"),
    [
        ({}, set(), {}),  # nothing in use: no domain has a class
        ({0: 1, 3: 2}, set(), {0: SMALL, 1: SMALL}),  # in use by gangs not large
        ({0: 1, 3: 2}, {3}, {0: SMALL, 1: LARGE}),  # a large gang's member makes its domain large
        ({0: 1}, {0, 1}, {0: LARGE}),  # a large row with nothing in use is its own block's only
    ],
)
def test_classes_are_read_off_what_runs_in_each_domain(
    used: dict[int, int], large: set[int], expected: dict[int, SizeClass]
) -> None:
    arrays = cluster(3, 2, used)
    assert classes_of(arrays, 0, rows_mask(arrays, large)) == expected


# 3 blocks of 2 nodes (4 GPUs each): a gang of 4+ GPUs is large
@pytest.mark.parametrize(
    ("used", "large", "request_", "reserve", "fit", "blocks"),
    [
        # a small gang packs into the small block in use (block 1), not the emptier large one
        ({0: 2, 2: 3}, {0}, gang(1), 0, IN_POOL, {1}),
        # the small block is full: a small gang opens the empty block 2
        ({0: 2, 2: 4, 3: 4}, {0}, gang(1), 0, OPENED, {2}),
        # ... unless the reserve keeps the one empty block for large gangs: it waits (it would fit)
        ({0: 2, 2: 4, 3: 4}, {0}, gang(1), 1, OUTSIDE, None),
        # the room left for large gangs counts the large block's free half: 1 empty + 0.5 - 1 opened
        ({0: 4, 2: 4, 3: 4}, {0}, gang(1), 0.5, OPENED, {2}),
        ({0: 4, 2: 4, 3: 4}, {0}, gang(1), 0.75, OUTSIDE, None),
        # a large gang takes the large block's free node, not the small block's
        ({0: 4, 2: 1}, {0}, gang(1, per_pod=4), 0, IN_POOL, {0}),
        # no large block fits it: it opens an empty one, never the small block with room
        ({0: 4, 1: 4, 2: 1}, {0}, gang(1, per_pod=4), 1, OPENED, {2}),
        # a block that drained empty has lost its class: the large gang takes it whole
        ({}, set(), gang(2, per_pod=4), 0, OPENED, {0}),
        # a block in use by gangs not large is small
        ({4: 1}, set(), gang(1), 0, IN_POOL, {2}),
        # only the small block has room: a large gang waits for a large or empty one
        ({0: 4, 1: 4, 2: 1, 4: 4, 5: 4}, {0, 1}, gang(1, per_pod=4), 0, OUTSIDE, None),
        # nothing fits anywhere
        ({0: 4, 1: 4, 2: 4, 3: 4, 4: 4, 5: 4}, {0}, gang(1), 0, NONE, None),
    ],
)
def test_each_class_starts_in_its_own_blocks_first(
    used: dict[int, int],
    large: set[int],
    request_: GangRequest,
    reserve: float,
    fit: PoolFit,
    blocks: set[int] | None,
) -> None:
    arrays = cluster(3, 2, used)
    before = arrays.free.copy()
    classes = classes_of(arrays, 0, rows_mask(arrays, large))
    pooled = plan_in_pools(
        arrays, request_, 0, classes, size_of(arrays, request_), PoolSettings(reserve=reserve)
    )
    assert (arrays.free == before).all()  # the caller's arrays are untouched
    assert pooled.fit is fit
    if blocks is not None:
        assert blocks_of(pooled.plan, 2) == blocks
    # the rows a hold may narrow to are exactly where the rule lets the gang start
    allowed = allowed_rows(arrays, 0, classes, pooled.size, PoolSettings(reserve=reserve))
    if fit in (IN_POOL, OPENED):
        assert all(allowed[int(r)] for rows in pooled.plan.rows for r in rows)


def test_a_small_gang_takes_a_reserved_block_only_when_no_small_block_could_hold_it() -> None:
    # nothing in use, so no small block, and the reserve keeps it off both empty blocks: it holds
    # (anywhere, since no pool of its own could fit it), its hold is ready, it starts there at once
    arrays = cluster(2, 2)
    none = rows_mask(arrays, set())
    decision = admit(arrays, [("a", gang(1))], (), PoolSettings(reserve=2), level=0, large_rows=none)
    assert [pos for pos, _ in decision.starts] == [0]
    assert decision.holds == ()


def test_a_large_head_holds_the_emptiest_block_and_small_gangs_keep_off_it() -> None:
    # both blocks small and in use; block 1 has less to drain, so the whole-block gang holds it
    arrays = cluster(2, 2, {0: 4, 1: 2, 2: 1})
    none = rows_mask(arrays, set())
    queue = [("big", gang(2, per_pod=4)), ("small", gang(1, per_pod=2))]
    first = admit(arrays, queue, (), PoolSettings(), level=0, large_rows=none)
    assert [h.owner for h in first.holds] == ["big"]
    assert first.holds[0].rows.tolist() == [2, 3]
    # the small gang would fit block 1's free GPUs, but they are the head's; block 0 has 2 free
    assert blocks_of(dict(first.starts)[1], 2) == {0}
    # once block 1 drains, the head starts there and its rows are large
    arrays.add(2, GPU)
    arrays.sub(1, GPU * 2)
    second = admit(arrays, queue[:1], first.holds, PoolSettings(), level=0, large_rows=none)
    assert [pos for pos, _ in second.starts] == [0]
    assert np.flatnonzero(second.large_rows).tolist() == [2, 3]
    assert second.holds == ()


def test_a_head_that_its_pool_could_fit_drained_holds_there_and_does_not_start_elsewhere() -> None:
    # block 0 small and full, block 1 large with room: the small gang holds in block 0 and waits
    arrays = cluster(2, 2, {0: 4, 1: 4, 2: 2})
    large = rows_mask(arrays, {2})
    queue = [("s", gang(1))]
    decision = admit(arrays, queue, (), PoolSettings(), level=0, large_rows=large)
    assert decision.starts == ()
    assert [(h.owner, blocks_of(h.plan, 2)) for h in decision.holds] == [("s", {0})]
    # a GPU ends in block 0: the hold is ready and the gang starts on it
    arrays.add(0, GPU)
    again = admit(arrays, queue, decision.holds, PoolSettings(), level=0, large_rows=large)
    assert [blocks_of(plan, 2) for _, plan in again.starts] == [{0}]


def _simulate(arrays: ClusterArrays, stream: Stream, rule: PoolSettings, depth: int = 1) -> dict[int, float]:
    """Start times per gang index under the pool policy; capacity never over-committed."""
    holds: tuple[Hold, ...] = ()
    large = np.zeros(arrays.capacity, dtype=np.int32)
    rows_of: dict[int, np.ndarray] = {}

    def decide(arrays: ClusterArrays, queue: list[tuple[int, GangRequest]], start: Start) -> None:
        nonlocal holds
        decision = admit(arrays, queue, holds, rule, level=0, large_rows=large > 0, depth=depth)
        holds = decision.holds
        for pos, plan in decision.starts:
            key = queue[pos][0]
            if size_of(arrays, queue[pos][1], rule.large_share) is LARGE:
                rows_of[key] = np.concatenate([np.asarray(r, dtype=np.int64) for r in plan.rows])
                large[rows_of[key]] += 1
            start(pos, plan)

    def left(key: int) -> None:
        rows = rows_of.pop(key, None)
        if rows is not None:
            large[rows] -= 1

    return simulate_stream(arrays, stream, decide, left)


def test_small_gangs_pack_into_one_block_so_a_large_one_finds_the_other_whole() -> None:
    # 2 blocks of 2 nodes; one-GPU gangs every 0.5 time units, each running 2.5 (5 at a time)
    stream = [(0.0, gang(1), 2.5), (0.5, gang(2, per_pod=4), 1.0)]
    stream += [(1.0 + k / 2, gang(1), 2.5) for k in range(80)]
    started = _simulate(cluster(2, 2), stream, PoolSettings())
    assert started[1] == 0.5
    assert set(started) == set(range(len(stream)))


def test_a_stream_of_small_gangs_over_both_blocks_does_not_starve_a_large_one() -> None:
    # one-GPU gangs every 0.25 running 2.5 (10 at a time) spill into both blocks before the large gang
    stream = [(k / 4, gang(1), 2.5) for k in range(20)] + [(5.0, gang(2, per_pod=4), 1.0)]
    stream += [(5.0 + k / 4, gang(1), 2.5) for k in range(1, 80)]
    started = _simulate(cluster(2, 2), stream, PoolSettings())
    assert started[20] <= 5.0 + 2.5  # its held block drains in one run time
    assert set(started) == set(range(len(stream)))


gangs = GANG_ARRIVALS


@settings(max_examples=60, deadline=None)
@given(
    st.lists(gangs, min_size=1, max_size=25),
    st.builds(
        PoolSettings,
        large_share=st.sampled_from([0.25, 0.5, 1.0]),
        reserve=st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]),
    ),
    st.integers(1, 3),
)
def test_no_gang_waits_forever_and_no_node_is_over_committed(
    raw: list[tuple[float, int, int, bool, float]], rule: PoolSettings, depth: int
) -> None:
    stream = sorted(((t, gang(p, g, block), r) for t, p, g, block, r in raw), key=lambda s: s[0])
    started = _simulate(cluster(3, 2), stream, rule, depth)
    for i, (_, request, _) in enumerate(stream):
        fits = plan_gang(cluster(3, 2), request).outcome is Outcome.PLACED
        assert (i in started) == fits, f"gang {i}: fits an empty cluster {fits}, started {i in started}"
