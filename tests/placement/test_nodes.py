"""fit_mask and score_nodes answer per node for filter and prioritize; bad requests are named."""

from __future__ import annotations

import numpy as np
import pytest

from extender.placement import GangRequest, LeafDemand, TreeNode, fit_mask, plan_gang, score_nodes, warm_up
from tests.placement.clusters import BLOCK, RACK, cluster, node, pod


def racks():
    # r0 = rows 0,1 and r1 = rows 2,3 in block b0; r2 = rows 4,5 in b1
    return cluster(
        [[node(), node()], [node(), node()], [node(), node()]], used={1: pod(cpu_milli=24000, gpu=6)}
    )


def test_fit_mask_is_true_where_the_request_fits_free() -> None:
    arrays = racks()
    rows = np.arange(arrays.n_rows, dtype=np.int32)
    assert fit_mask(arrays, rows, pod(gpu=3)).tolist() == [True, False, True, True, True, True]


@pytest.mark.parametrize(
    ("request_", "anchors", "levels", "expected"),
    [
        # packing p (gpu and pod-slot columns averaged) maps to 0.3 + 0.7p:
        # row 0 p=0.067 -> 3, row 1 p=0.447 -> 6
        (pod(gpu=1), None, (), [3, 6, 3, 3, 3, 3]),
        (pod(gpu=9), None, (), [0, 0, 0, 0, 0, 0]),
        # with anchors: (packing + closeness) / 2, closeness 1 in the anchor's rack, 0.5 in its block
        (pod(gpu=1), [0], (BLOCK, RACK), [7, 8, 4, 4, 2, 2]),
        (pod(gpu=1), [4], (BLOCK,), [2, 3, 2, 2, 7, 7]),
    ],
    ids=[
        "the more allocated node scores higher for packing",
        "a request that fits nowhere scores zero everywhere",
        "closeness to an anchor counts the deepest shared level",
        "an anchor in another block adds nothing to rows outside it",
    ],
)
def test_scores(request_, anchors, levels, expected) -> None:
    arrays = racks()
    rows = np.arange(arrays.n_rows, dtype=np.int32)
    anchor_rows = None if anchors is None else np.array(anchors, dtype=np.int32)
    got = score_nodes(arrays, rows, request_, anchor_rows=anchor_rows, anchor_levels=levels)
    assert got.tolist() == expected
    assert got.dtype == np.int64 and got.min() >= 0 and got.max() <= 10


@pytest.mark.parametrize(
    ("gang", "message"),
    [
        (GangRequest(tree=(), leaves=()), "tree: empty"),
        (GangRequest(tree=(TreeNode(0),), leaves=()), r"tree\[0\].parent"),
        (GangRequest(tree=(TreeNode(-1), TreeNode(2)), leaves=()), r"tree\[1\].parent"),
        (
            GangRequest(tree=(TreeNode(-1, required_level=9),), leaves=()),
            "required_level: 9 is not a registered level",
        ),
        (GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(3, pod(), 1),)), r"leaves\[0\].tree_node"),
        (
            GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, pod()[:2], 1),)),
            r"leaves\[0\].request: expected 4",
        ),
        (GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, pod() * 0.5, 1),)), "integer units"),
        (GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, pod(), -1),)), r"leaves\[0\].count"),
        (
            GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, pod(), 1, eligible=np.ones(2, bool)),)),
            r"eligible: expected bool\[6\]",
        ),
        (
            GangRequest(tree=(TreeNode(-1),), leaves=(LeafDemand(0, pod(), 1, bound_rows=np.array([99])),)),
            "bound_rows: rows must be in 0..5",
        ),
    ],
    ids=[
        "an empty tree is refused",
        "a root with a parent is refused",
        "a child listed before its parent is refused",
        "an unregistered level is refused with how to register it",
        "a leaf on a missing tree node is refused",
        "a request with the wrong number of columns is refused",
        "a fractional request is refused",
        "a negative count is refused",
        "an eligibility mask of the wrong length is refused",
        "a bound row outside the cluster is refused",
    ],
)
def test_bad_gang_requests_name_the_field(gang: GangRequest, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_gang(racks(), gang)


def test_score_nodes_refuses_an_unregistered_anchor_level() -> None:
    arrays = racks()
    with pytest.raises(ValueError, match="anchor_levels"):
        score_nodes(arrays, np.arange(2), pod(gpu=1), anchor_rows=np.array([0]), anchor_levels=[5])


def test_warm_up_returns_the_seconds_it_took() -> None:
    assert 0.0 <= warm_up() < 120.0


def test_fit_mask_takes_a_read_only_or_strided_request_as_any_and_none_for_every_row() -> None:
    from extender.placement import kernels

    arrays = racks()
    rows = np.arange(arrays.n_rows, dtype=np.int32)
    request = np.asarray(pod(gpu=3), dtype=np.int64)
    expected = fit_mask(arrays, rows, request).tolist()
    frozen = request.copy()
    frozen.flags.writeable = False
    strided = np.repeat(request, 2)[::2]
    compiled = getattr(kernels._fit_mask, "signatures", None)  # None with NUMBA_DISABLE_JIT
    before = len(compiled) if compiled is not None else 0
    for asked in (frozen, strided):
        assert fit_mask(arrays, rows, asked).tolist() == expected
        assert fit_mask(arrays, None, asked).tolist() == expected
    if compiled is not None:  # the kernel met no new array type: nothing compiled in the call
        assert len(kernels._fit_mask.signatures) == before
