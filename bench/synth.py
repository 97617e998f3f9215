"""Synthetic GPU clusters and gangs for the placement benchmarks (seeded, so runs compare).

Nodes have 8 GPUs, 192 cores, 2 TiB and 110 pod slots, with random partial use. Topology:
racks of 32 nodes, blocks of 256 (8 racks), zones of 1024 (4 blocks). Levels are registered
as zone, block, rack in that order.
"""

from __future__ import annotations

import numpy as np

from extender.placement import ClusterArrays, GangRequest, LeafDemand, TreeNode

RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "pods"]
GiB = 2**30
NODE = np.array([192_000, 2048 * GiB, 8, 110], dtype=np.int64)
GPU_POD = np.array([20_000, 200 * GiB, 1, 1], dtype=np.int64)  # one GPU, its share of cpu and memory
RACK_NODES, BLOCK_NODES, ZONE_NODES = 32, 256, 1024
ZONE, BLOCK, RACK = 0, 1, 2


def gpu_cluster(n_nodes: int, *, seed: int = 0, busy: float = 0.35) -> ClusterArrays:
    """n_nodes GPU nodes where about `busy` of the GPUs are in use, in whole-GPU pods."""
    rng = np.random.default_rng(seed)
    arrays = ClusterArrays(resource_names=list(RESOURCES), capacity=n_nodes)
    assert (arrays.level("zone"), arrays.level("block"), arrays.level("rack")) == (ZONE, BLOCK, RACK)
    used_gpus = rng.binomial(8, busy, size=n_nodes)
    for i in range(n_nodes):
        row = arrays.add_row(
            allocatable=NODE,
            labels={
                "zone": f"z{i // ZONE_NODES}",
                "block": f"b{i // BLOCK_NODES}",
                "rack": f"r{i // RACK_NODES}",
                "kubernetes.io/hostname": f"n{i}",
            },
            schedulable=True,
        )
        arrays.sub(row, GPU_POD * used_gpus[i])
    return arrays


def gang(pods: int) -> GangRequest:
    """A gang of `pods` one-GPU pods at its natural level.

    8 pods: one rack required. 256: one block required, one rack preferred. 4096: one zone
    required, one block preferred (no block holds it, so it spills over the fewest blocks).
    """
    if pods <= RACK_NODES:
        node = TreeNode(-1, required_level=RACK)
    elif pods <= BLOCK_NODES:
        node = TreeNode(-1, required_level=BLOCK, preferred_level=RACK)
    else:
        node = TreeNode(-1, required_level=ZONE, preferred_level=BLOCK)
    return GangRequest(tree=(node,), leaves=(LeafDemand(0, GPU_POD, pods),))
