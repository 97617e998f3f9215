"""Builders for small clusters and gangs the placement tests read like specifications."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.placement import ClusterArrays, GangRequest, LeafDemand, TreeNode

RESOURCES = ["cpu", "memory", "gpu", "pods"]
CPU, MEMORY, GPU, PODS = range(4)


def pod(cpu_milli: int = 0, memory: int = 0, gpu: int = 0) -> np.ndarray:
    """One pod's request in column order; every pod also takes one pod slot."""
    return np.array([cpu_milli, memory, gpu, 1], dtype=np.int64)


def node(cpu_milli: int = 32000, memory: int = 256, gpu: int = 8, pods: int = 110) -> list[int]:
    return [cpu_milli, memory, gpu, pods]


def cluster(
    racks: Sequence[Sequence[Sequence[int]]],
    *,
    racks_per_block: int = 2,
    used: dict[int, np.ndarray] | None = None,
) -> ClusterArrays:
    """Racks of nodes (each node an allocatable vector); rack i is "r{i}" in block "b{i // racks_per_block}".

    `used` maps a row to requests already bound there. Levels: 0 = block, 1 = rack.
    """
    arrays = ClusterArrays(resource_names=list(RESOURCES), capacity=16)
    assert arrays.level("block") == 0 and arrays.level("rack") == 1
    for i, rack in enumerate(racks):
        for alloc in rack:
            arrays.add_row(
                allocatable=np.array(alloc, dtype=np.int64),
                labels={"block": f"b{i // racks_per_block}", "rack": f"r{i}"},
                schedulable=True,
            )
    for row, req in (used or {}).items():
        arrays.sub(row, np.asarray(req, dtype=np.int64))
    return arrays


BLOCK, RACK = 0, 1


def flat(
    request: np.ndarray,
    count: int,
    *,
    required: int = -1,
    preferred: int = -1,
    eligible: np.ndarray | None = None,
    bound_rows: Sequence[int] | None = None,
) -> GangRequest:
    """A gang of `count` identical pods with a root constraint."""
    bound = None if bound_rows is None else np.array(bound_rows, dtype=np.int32)
    return GangRequest(
        tree=(TreeNode(-1, required_level=required, preferred_level=preferred),),
        leaves=(LeafDemand(0, request, count, eligible=eligible, bound_rows=bound),),
    )


def replicas(request: np.ndarray, *, n: int, size: int, whole: int = -1, each: int = -1) -> GangRequest:
    """n replicas of `size` pods; the whole job in one `whole` domain, each replica in one `each` domain."""
    tree = (TreeNode(-1, required_level=whole), *tuple(TreeNode(0, required_level=each) for _ in range(n)))
    leaves = tuple(LeafDemand(i + 1, request, size) for i in range(n))
    return GangRequest(tree=tree, leaves=leaves)


def rack_of(arrays: ClusterArrays, row: int) -> str:
    return arrays.domain_name(RACK, int(arrays.domains[RACK, row]))


def block_of(arrays: ClusterArrays, row: int) -> str:
    return arrays.domain_name(BLOCK, int(arrays.domains[BLOCK, row]))
