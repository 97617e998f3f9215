"""Preferred levels relax one level at a time, as KAI does: a rack, else one block, else anywhere."""

from __future__ import annotations

import numpy as np
import pytest

from extender.placement import ClusterArrays, GangRequest, LeafDemand, Outcome, TreeNode, plan_gang
from tests.placement import naive


def two_blocks() -> ClusterArrays:
    """b0 = racks r0 (empty), r1 (half used); b1 = racks r2 (empty), r3 (half used); 2 nodes a rack.

    Each node takes two 1-cpu pods. The two emptiest racks (r0, r2) sit in different blocks.
    """
    arrays = ClusterArrays(resource_names=["cpu"])
    arrays.level("block")
    arrays.level("rack")
    for rack, block, used in (("r0", "b0", 0), ("r1", "b0", 1), ("r2", "b1", 0), ("r3", "b1", 1)):
        for _ in range(2):
            row = arrays.add_row(allocatable=[2], labels={"block": block, "rack": rack}, schedulable=True)
            arrays.sub(row, np.array([used], dtype=np.int64))
    return arrays


def request(n: int, *, fallback: tuple[int, ...]) -> GangRequest:
    return GangRequest(
        tree=(TreeNode(-1, preferred_level=1, fallback_levels=fallback),),
        leaves=(LeafDemand(0, np.array([1], dtype=np.int64), n),),
    )


def blocks_of(arrays: ClusterArrays, rows: np.ndarray) -> set[str]:
    return {arrays.row_labels(int(r))["block"] for r in rows}


def test_a_gang_too_big_for_a_rack_stays_in_one_block():
    arrays = two_blocks()
    plan = plan_gang(arrays, request(6, fallback=(0,)))
    assert plan.outcome is Outcome.PLACED
    assert blocks_of(arrays, plan.rows[0]) == {"b0"}  # b0 holds exactly 6: the tightest block
    assert plan.rows[0].tolist() == naive.plan_gang(arrays, request(6, fallback=(0,))).rows[0].tolist()


def test_without_a_fallback_level_the_spill_crosses_blocks():
    arrays = two_blocks()
    plan = plan_gang(arrays, request(6, fallback=()))
    assert plan.outcome is Outcome.PLACED
    assert blocks_of(arrays, plan.rows[0]) == {"b0", "b1"}


def test_a_gang_that_fits_a_rack_takes_one_rack_before_any_fallback():
    arrays = two_blocks()
    plan = plan_gang(arrays, request(2, fallback=(0,)))
    assert {arrays.row_labels(int(r))["rack"] for r in plan.rows[0]} == {"r1"}  # tightest rack


def test_a_fallback_level_must_be_registered():
    with pytest.raises(ValueError, match=r"fallback_levels\[0\]: 7 is not a registered level"):
        plan_gang(two_blocks(), request(2, fallback=(7,)))
