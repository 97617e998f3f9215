"""The kernels and the plain-Python reference make the same plans, and no plan over-commits a node."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.placement import ClusterArrays, GangRequest, LeafDemand, Outcome, Plan, TreeNode, plan_gang
from tests.placement import naive

BLOCK, RACK = 0, 1


def random_cluster(rng: np.random.Generator) -> ClusterArrays:
    n_res = int(rng.integers(1, 4))
    arrays = ClusterArrays(resource_names=[f"res{j}" for j in range(n_res)], capacity=16)
    assert arrays.level("block") == BLOCK and arrays.level("rack") == RACK
    n_racks = int(rng.integers(1, 7))
    per_block = int(rng.integers(1, 4))
    for k in range(n_racks):
        for _ in range(int(rng.integers(1, 6))):
            alloc = rng.integers(0, 9, size=n_res)
            labels = {"block": f"b{k // per_block}", "rack": f"r{k}"}
            if rng.random() < 0.05:
                del labels["rack"]  # a node missing a topology label is in no rack
            row = arrays.add_row(allocatable=alloc, labels=labels, schedulable=bool(rng.random() > 0.1))
            arrays.sub(row, np.minimum(rng.integers(0, 6, size=n_res), alloc + (rng.random() < 0.05)))
    if rng.random() < 0.2 and arrays.n_rows > 1:
        arrays.remove_row(int(rng.integers(0, arrays.n_rows)))  # a free slot among the rows
    return arrays


def random_request(rng: np.random.Generator, arrays: ClusterArrays) -> GangRequest:
    n_res, n_rows = arrays.n_res, arrays.n_rows

    def level() -> int:
        return int(rng.choice([-1, -1, BLOCK, RACK]))

    def leaf(t: int) -> LeafDemand:
        eligible = rng.random(n_rows) < 0.8 if rng.random() < 0.3 else None
        bound = (
            rng.integers(0, n_rows, size=int(rng.integers(1, 3))).astype(np.int32)
            if rng.random() < 0.15
            else None
        )
        return LeafDemand(t, rng.integers(0, 3, size=n_res), int(rng.integers(0, 6)), eligible, bound)

    shape = rng.integers(0, 4)
    if shape == 3:  # prefer a rack, else one block, else anywhere
        tree = (TreeNode(-1, -1, RACK, fallback_levels=(BLOCK,)),)
        leaves = tuple(leaf(0) for _ in range(int(rng.integers(1, 3))))
    elif shape == 0:  # one group, possibly several pod shapes
        tree = (TreeNode(-1, level(), level()),)
        leaves = tuple(leaf(0) for _ in range(int(rng.integers(1, 3))))
    elif shape == 1:  # replicas under a root
        n = int(rng.integers(1, 4))
        tree = (TreeNode(-1, level(), level()), *tuple(TreeNode(0, level(), level()) for _ in range(n)))
        leaves = tuple(leaf(t) for t in range(1, n + 1))
    else:  # three levels, loose leaves mixed with constrained ones
        tree = (
            TreeNode(-1, level()),
            TreeNode(0),
            TreeNode(1, level(), level()),
            TreeNode(1, level()),
            TreeNode(0),
        )
        leaves = tuple(leaf(t) for t in (0, 2, 3, 4, 2))
    return GangRequest(tree=tree, leaves=leaves)


def subtree(request: GangRequest, t: int) -> set[int]:
    out = {t}
    for c, node in enumerate(request.tree):
        if node.parent in out and c > t:
            out.add(c)
    return out


def assert_sound(arrays: ClusterArrays, request: GangRequest, plan: Plan) -> None:
    """Every pod placed on an eligible schedulable row, no row over-committed, constraints held."""
    if plan.outcome is Outcome.NO_FIT:
        assert plan.shortfall is not None and 0 <= plan.shortfall.fits <= plan.shortfall.needed
        return
    taken = np.zeros_like(arrays.free)
    for leaf, rows in zip(request.leaves, plan.rows, strict=True):
        assert rows.shape == (leaf.count,)
        for r in rows:
            assert arrays.schedulable[r]
            assert leaf.eligible is None or leaf.eligible[r]
            taken[r] += leaf.request
    used = taken.any(axis=1)
    assert np.all(arrays.free[used] - taken[used] >= 0), "a node is over-committed"
    for t, node in enumerate(request.tree):
        if node.required_level < 0:
            continue
        members = [
            r
            for li, leaf in enumerate(request.leaves)
            if leaf.tree_node in subtree(request, t)
            for r in plan.rows[li]
        ]
        if members:
            assert t in plan.domains
            level, d = plan.domains[t]
            assert level == node.required_level
            assert {int(arrays.domains[level, r]) for r in members} == {d}


def assert_same(kernel: Plan, reference: Plan) -> None:
    assert kernel.outcome is reference.outcome
    assert kernel.domains == reference.domains
    assert kernel.shortfall == reference.shortfall
    assert [r.tolist() for r in kernel.rows] == [r.tolist() for r in reference.rows]


@pytest.mark.parametrize("seed", range(150))
def test_kernels_and_reference_agree_on_seeded_random_gangs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = random_cluster(rng)
    for _ in range(3):
        request = random_request(rng, arrays)
        kernel = plan_gang(arrays, request)
        assert_sound(arrays, request, kernel)
        assert_same(kernel, naive.plan_gang(arrays, request))


@st.composite
def rack_clusters_and_gangs(draw: st.DrawFn) -> tuple[ClusterArrays, GangRequest]:
    """Racks of 2-resource nodes with random free capacity, and a gang of identical pods."""
    arrays = ClusterArrays(resource_names=["cpu", "gpu"], capacity=16)
    arrays.level("block"), arrays.level("rack")
    racks = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=4),
            min_size=1,
            max_size=4,
        )
    )
    for k, rack in enumerate(racks):
        for cpu_free, gpu_free in rack:
            row = arrays.add_row(
                allocatable=[4, 4], labels={"block": f"b{k // 2}", "rack": f"r{k}"}, schedulable=True
            )
            arrays.sub(row, np.array([4 - cpu_free, 4 - gpu_free]))
    request = np.array([draw(st.integers(0, 2)), draw(st.integers(0, 2))])
    count = draw(st.integers(0, 10))
    required = draw(st.sampled_from([-1, BLOCK, RACK]))
    preferred = draw(st.sampled_from([-1, RACK]))
    replicas = draw(st.integers(0, 2))
    if replicas:
        tree = (TreeNode(-1, required), *tuple(TreeNode(0, RACK, -1) for _ in range(replicas)))
        leaves = tuple(LeafDemand(t, request, count // replicas) for t in range(1, replicas + 1))
    else:
        tree = (TreeNode(-1, required, preferred),)
        leaves = (LeafDemand(0, request, count),)
    return arrays, GangRequest(tree=tree, leaves=leaves)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rack_clusters_and_gangs())
def test_kernels_and_reference_agree_on_generated_racks(case: tuple[ClusterArrays, GangRequest]) -> None:
    arrays, request = case
    kernel = plan_gang(arrays, request)
    assert_sound(arrays, request, kernel)
    assert_same(kernel, naive.plan_gang(arrays, request))


def test_a_plan_leaves_the_cluster_arrays_untouched() -> None:
    rng = np.random.default_rng(7)
    arrays = random_cluster(rng)
    before = arrays.free.copy()
    plan_gang(arrays, random_request(rng, arrays))
    assert np.array_equal(arrays.free, before)
