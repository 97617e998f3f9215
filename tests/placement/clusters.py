"""Builders for small clusters and gangs the placement tests read like specifications."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from extender.placement import ClusterArrays, GangRequest, LeafDemand, Plan, TreeNode

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


GPU_POD = np.array([1000, 1], dtype=np.int64)  # one GPU pod: 1 cpu, 1 gpu
GPU_NODE = np.array([8000, 4], dtype=np.int64)  # 4 GPUs, cpu to spare beside them


def gpu_domains(
    level: str, domains: int, nodes_per_domain: int, used: dict[int, int] | None = None
) -> ClusterArrays:
    """domains x nodes of 4 GPUs (cpu and gpu columns), `level` the only topology level; `used` maps a
    row to GPUs in use there."""
    arrays = ClusterArrays(resource_names=["cpu", "gpu"], capacity=domains * nodes_per_domain)
    arrays.level(level)
    for i in range(domains * nodes_per_domain):
        row = arrays.add_row(
            allocatable=GPU_NODE, labels={level: f"{level[0]}{i // nodes_per_domain}"}, schedulable=True
        )
        arrays.sub(row, GPU_POD * (used or {}).get(i, 0))
    return arrays


def gpu_gang(pods: int, per_pod: int = 1, whole: bool = True) -> GangRequest:
    """`pods` pods of `per_pod` GPUs; `whole`: in one domain of the only level."""
    return GangRequest(
        tree=(TreeNode(-1, required_level=0 if whole else -1),),
        leaves=(LeafDemand(0, GPU_POD * per_pod, pods),),
    )


Stream = list[tuple[float, GangRequest, float]]  # (arrival, gang, run time), by arrival
Start = Callable[[int, Plan], None]  # start the gang at this queue position on its plan, now


def simulate_stream(
    arrays: ClusterArrays,
    stream: Stream,
    decide: Callable[[ClusterArrays, list[tuple[int, GangRequest]], Start], None],
    left: Callable[[int], None] | None = None,
) -> dict[int, float]:
    """Start times per gang index of `stream`. Each time a gang arrives or leaves (`left` is told its
    index first), `decide` sees the waiting gangs in arrival order, as (gang index, request), and
    starts some by queue position (the arrays charged at once). Asserts that capacity
    is never over-committed nor given back beyond a node's allocatable."""
    alloc = arrays.allocatable.copy()
    events = [(t, 1, i) for i, (t, _, _) in enumerate(stream)]
    heapq.heapify(events)
    waiting: list[int] = []
    running: dict[int, list[tuple[int, np.ndarray]]] = {}
    started: dict[int, float] = {}
    now = 0.0

    def start(pos: int, plan: Plan) -> None:
        j = waiting[pos]
        taken = []
        for leaf, rows in zip(stream[j][1].leaves, plan.rows, strict=True):
            for r in rows:
                arrays.sub(int(r), leaf.request)
                taken.append((int(r), leaf.request))
        running[j] = taken
        started[j] = now
        heapq.heappush(events, (now + stream[j][2], 0, j))

    while events:
        now, what, i = heapq.heappop(events)
        if what == 1:
            waiting.append(i)
        else:
            for row, req in running.pop(i):
                arrays.add(row, req)
            if left is not None:
                left(i)
        decide(arrays, [(j, stream[j][1]) for j in waiting], start)
        waiting = [j for j in waiting if j not in running]
        assert (arrays.free >= 0).all(), "two gangs share a node's capacity beyond it"
        assert (arrays.free <= alloc).all()
    return started


# a random gang of a stream: (arrival, pods, GPUs per pod, whether in one domain, run time)
GANG_ARRIVALS = st.tuples(
    st.floats(0, 20, allow_nan=False),
    st.integers(1, 4),
    st.sampled_from([1, 2, 4]),
    st.booleans(),
    st.floats(0.1, 10, allow_nan=False),
)
