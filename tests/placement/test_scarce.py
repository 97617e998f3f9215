"""Pods that do not ask for a scarce resource (GPUs) leave the nodes that offer it alone."""

from __future__ import annotations

import numpy as np
import pytest

from extender.placement import (
    ClusterArrays,
    GangRequest,
    LeafDemand,
    Outcome,
    TreeNode,
    plan_gang,
    score_nodes,
)
from tests.placement import naive


def gpu_and_cpu_nodes() -> ClusterArrays:
    """Rows 0-1: GPU nodes, already partly used (so bin-packing alone would prefer them); 2-3: CPU nodes."""
    arrays = ClusterArrays(resource_names=["cpu", "memory", "nvidia.com/gpu"], scarce=["nvidia.com/gpu"])
    for _ in range(2):
        row = arrays.add_row(allocatable=[16000, 64, 8], labels={"rack": "gpu"}, schedulable=True)
        arrays.sub(row, np.array([12000, 32, 4], dtype=np.int64))
    for _ in range(2):
        arrays.add_row(allocatable=[16000, 64, 0], labels={"rack": "cpu"}, schedulable=True)
    return arrays


@pytest.mark.parametrize(
    ("request_", "expected_rows"),
    [
        pytest.param([1000, 1, 0], {2, 3}, id="a CPU pod goes to CPU nodes despite GPU nodes being fuller"),
        pytest.param([1000, 1, 1], {0, 1}, id="a GPU pod goes to GPU nodes"),
    ],
)
def test_fill_keeps_unrequested_scarce_nodes_last(request_, expected_rows):
    arrays = gpu_and_cpu_nodes()
    req = GangRequest(
        tree=(TreeNode(parent=-1),),
        leaves=(LeafDemand(tree_node=0, request=np.array(request_, dtype=np.int64), count=2),),
    )
    plan = plan_gang(arrays, req)
    assert plan.outcome is Outcome.PLACED
    assert set(plan.rows[0].tolist()) <= expected_rows
    assert plan.rows[0].tolist() == naive.plan_gang(arrays, req).rows[0].tolist()


def test_a_cpu_pod_overflows_onto_gpu_nodes_when_it_must():
    arrays = gpu_and_cpu_nodes()
    req = GangRequest(
        tree=(TreeNode(parent=-1),),
        leaves=(LeafDemand(tree_node=0, request=np.array([16000, 1, 0], dtype=np.int64), count=3),),
    )
    plan = plan_gang(arrays, req)
    assert plan.outcome is Outcome.NO_FIT  # GPU nodes have only 4000m left each
    smaller = GangRequest(
        tree=(TreeNode(parent=-1),),
        leaves=(LeafDemand(tree_node=0, request=np.array([4000, 1, 0], dtype=np.int64), count=9),),
    )
    rows = plan_gang(arrays, smaller).rows[0].tolist()
    assert rows.count(2) == rows.count(3) == 4 and len(rows) == 9


def test_nodes_with_an_unrequested_scarce_resource_score_below_all_others():
    arrays = gpu_and_cpu_nodes()
    rows = np.arange(4, dtype=np.int32)
    cpu_pod = score_nodes(arrays, rows, np.array([1000, 1, 0], dtype=np.int64)).tolist()
    assert max(cpu_pod[:2]) < min(cpu_pod[2:])
    gpu_pod = score_nodes(arrays, rows, np.array([1000, 1, 1], dtype=np.int64)).tolist()
    assert gpu_pod[2:] == [0, 0]  # a GPU pod does not fit the CPU nodes
    assert min(gpu_pod[:2]) > cpu_pod[0]
