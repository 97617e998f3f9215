"""bench quality's accounting: which gangs count as placed, and how long they waited."""

from __future__ import annotations

import pytest

from bench import quality
from extender.placement import DomainOrder

BLOCK_GANG = 5  # MIX index: 256 whole nodes, one block
RACK_GANG = 3  # MIX index: 32 whole nodes, one rack
HALF_BLOCK_GANG = 4  # MIX index: 128 whole nodes, half a block


def _stream() -> list[tuple[float, int, float]]:
    # 16 block gangs fill the 16 blocks; a 17th arrives at t=1 and waits for the first to leave (t=10)
    full = [(k * 0.01, BLOCK_GANG, 10.0 + k) for k in range(16)]
    return [*full, (1.0, BLOCK_GANG, 5.0), (30.0, BLOCK_GANG, 5.0)]  # the last one is tail load


@pytest.mark.parametrize(
    ("tail_s", "placed", "wait", "ended_at"),
    [
        (50.0, 1.0, 9.0, 9.0),  # arrivals go on, so the late gang is seen to start
        (5.0, 0.9412, 5.0, 5.0),  # cut off before it starts: unplaced, its wait counted to the cut
    ],
)
@pytest.mark.parametrize("policy", ["tightest", "hold", "pool"])
def test_a_gang_waiting_at_the_last_arrival_is_followed_until_the_tail_ends(
    tail_s: float, placed: float, wait: float, ended_at: float, policy: str
) -> None:
    pool = quality.pools.PoolSettings() if policy == "pool" else None
    out = quality.run(
        DomainOrder.TIGHTEST,
        _stream(),
        seed=0,
        hold=policy == "hold",
        pool=pool,
        measured=17,
        tail_s=tail_s,
    )
    assert out["gangs"] == 17
    assert out["large_placed_share"] == placed
    assert out["large_wait_max"] == wait
    assert out["ended_at"] == ended_at


def test_racks_held_for_a_waiting_gang_are_counted_apart() -> None:
    # the 17th block gang waits from t=1 and holds a block (8 racks of 128); an 8-pod gang arriving
    # at t=2 samples it (1 sample of 18): every rack is full, so none is partly used, held or not
    stream = [*_stream()[:17], (2.0, 0, 1.0)]
    out = quality.run(DomainOrder.TIGHTEST, stream, seed=0, hold=True, measured=18, tail_s=50.0)
    assert out["racks_held_mean"] == round(8 / 128 / 18, 4)
    # it held from t=1 to its start at t=10: its whole wait of 9 is draining
    assert (out["large_held_share"], out["large_wait_before_hold_mean"], out["large_draining_mean"]) == (
        round(1 / 17, 4),
        0.0,
        9.0,
    )
    assert out["racks_partly_used_mean"] == out["racks_partly_used_unheld_mean"] == 0.0


def test_a_holder_that_starts_on_an_arrival_leaves_the_wait() -> None:
    # 15 block gangs fill 15 blocks, two half-block gangs the last; rack gangs A (t=1) and B (t=1.5)
    # wait. A half-block gang leaves at t=3: A starts there on its hold; B, behind it in its class,
    # fits only in that large block: its hold (chosen after A started) is ready at once, and it
    # starts as the next gang arrives (t=4); the block gang that leaves at t=5 must not start it again
    stream = [(k * 0.01, BLOCK_GANG, 5.0 if k == 1 else 100.0) for k in range(15)]
    stream += [(0.15, HALF_BLOCK_GANG, 2.85), (0.16, HALF_BLOCK_GANG, 100.0)]
    stream += [(1.0, RACK_GANG, 100.0), (1.5, RACK_GANG, 100.0), (4.0, 0, 100.0)]
    pool = quality.pools.PoolSettings(reserve=4.0)
    out = quality.run(DomainOrder.TIGHTEST, stream, seed=0, pool=pool, measured=len(stream), tail_s=50.0)
    assert out["placed_share"] == 1.0
    assert out["wait_mean_by_kind"][RACK_GANG] == (2.0 + 2.5) / 2
