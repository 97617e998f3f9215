"""What plan_gang decides, case by case: constraints, pinning, shapes, eligibility, no-fit reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from extender.placement import ClusterArrays, GangRequest, LeafDemand, Outcome, TreeNode, plan_gang
from tests.placement import naive
from tests.placement.clusters import BLOCK, GPU, RACK, cluster, flat, node, pod, rack_of, replicas

Mi = 2**20
WORKER = pod(100, 64 * Mi)  # the seed JobSet "topo-training" worker and driver shape


def small(cpu_milli: int) -> list[int]:
    return node(cpu_milli=cpu_milli, memory=1024 * Mi, gpu=0, pods=110)


def gpus(free: int, total: int = 8) -> list[int]:
    """A node with `total` GPUs; callers mark total - free as used."""
    return node(gpu=total)


def gpu_racks(*free_per_rack: list[int], racks_per_block: int = 2) -> ClusterArrays:
    """Racks of 8-GPU nodes where node i of rack k has free_per_rack[k][i] GPUs free."""
    racks = [[node(gpu=8) for _ in rack] for rack in free_per_rack]
    used, row = {}, 0
    for rack in free_per_rack:
        for free in rack:
            if free < 8:
                used[row] = pod(gpu=8 - free) - pod()  # GPUs only, no pod slot
            row += 1
    return cluster(racks, racks_per_block=racks_per_block, used=used)


@dataclasses.dataclass(frozen=True)
class Case:
    arrays: Callable[[], ClusterArrays]
    request: Callable[[ClusterArrays], GangRequest]
    racks: tuple[tuple[str, ...], ...] = ()  # per leaf: sorted rack names of the chosen rows
    rows: tuple[tuple[int, ...], ...] | None = None  # per leaf: exact rows, when the case is about rows
    chosen: dict[int, str] | None = None  # tree node -> domain name
    shortfall: tuple | None = None  # (level, domain name or None, fits, needed, resource, short_units)


def seed_workers(arrays: ClusterArrays) -> GangRequest:
    return flat(WORKER, 4, required=RACK)


CASES = {
    "seed topo-training: four rack-required workers take the tightest rack that holds all four": Case(
        arrays=lambda: cluster([[small(100)] * 3, [small(200)] * 4, [small(100)] * 4]),
        request=seed_workers,
        racks=(("r2",) * 4,),
        chosen={0: "r2"},
    ),
    "whole job in one block and each replica in one rack: both replicas in the block that fits": Case(
        arrays=lambda: gpu_racks([4], [3], [6], [8]),
        request=lambda a: replicas(pod(gpu=1), n=2, size=4, whole=BLOCK, each=RACK),
        racks=(("r2",) * 4, ("r3",) * 4),
        chosen={0: "b1", 1: "r2", 2: "r3"},
    ),
    "each replica in one rack without a block constraint: replicas may land in different blocks": Case(
        arrays=lambda: gpu_racks([4], [3], [6], [8]),
        request=lambda a: replicas(pod(gpu=1), n=2, size=4, each=RACK),
        racks=(("r0",) * 4, ("r2",) * 4),
        chosen={1: "r0", 2: "r2"},
    ),
    "a bound member pins the required rack even when another rack is tighter": Case(
        arrays=lambda: gpu_racks([2], [8]),
        request=lambda a: flat(pod(gpu=1), 2, required=RACK, bound_rows=[1]),
        racks=(("r1", "r1"),),
        chosen={0: "r1"},
    ),
    "a bound member's rack that is full is reported, not swapped for a rack with room": Case(
        arrays=lambda: gpu_racks([8], [1]),
        request=lambda a: flat(pod(gpu=1), 2, required=RACK, bound_rows=[1]),
        shortfall=(RACK, "r1", 1, 2, GPU, 1),
    ),
    "a driver and GPU workers in one rack: the largest pod goes first, onto the most-allocated node": Case(
        arrays=lambda: cluster(
            [[node(), node(), node()]],
            used={0: pod(cpu_milli=24000, gpu=7), 1: pod(cpu_milli=20000, gpu=1)},
        ),
        request=lambda a: GangRequest(
            tree=(TreeNode(-1, required_level=RACK),),
            leaves=(LeafDemand(0, pod(cpu_milli=2000, gpu=1), 4), LeafDemand(0, pod(cpu_milli=12000), 1)),
        ),
        # the driver (12 cores) goes first, onto node 1 (most allocated that fits) and takes all
        # of its cpu; the workers then use node 0's one free GPU and node 2
        rows=((0, 2, 2, 2), (1,)),
        chosen={0: "r0"},
    ),
    "per-leaf eligibility keeps pods on the nodes kube-scheduler passed": Case(
        arrays=lambda: gpu_racks([2, 2], [8, 8]),
        request=lambda a: flat(pod(gpu=1), 2, required=RACK, eligible=np.array([False, False, False, True])),
        rows=((3, 3),),
        chosen={0: "r1"},
    ),
    "no rack holds the gang: the best rack, how many fit, and the GPUs missing": Case(
        arrays=lambda: gpu_racks([8], [6]),
        request=lambda a: flat(pod(gpu=1), 10, required=RACK),
        shortfall=(RACK, "r0", 8, 10, GPU, 2),
    ),
    "enough GPUs in sum but no node can take a 5-GPU pod: fragmentation reports zero short": Case(
        arrays=lambda: gpu_racks([4, 4, 4]),
        request=lambda a: flat(pod(gpu=5), 2, required=RACK),
        shortfall=(RACK, "r0", 0, 2, GPU, 0),
    ),
    "an unconstrained gang that does not fit is reported against the whole cluster": Case(
        arrays=lambda: gpu_racks([1], [2]),
        request=lambda a: flat(pod(gpu=1), 4),
        shortfall=(-1, None, 3, 4, GPU, 1),
    ),
    "the block has room in sum but no rack holds a replica: the rack is reported": Case(
        arrays=lambda: gpu_racks([4], [2], [1], [1]),
        request=lambda a: replicas(pod(gpu=1), n=2, size=3, whole=BLOCK, each=RACK),
        shortfall=(RACK, "r1", 2, 3, GPU, 1),
    ),
    "preferred rack: a gang that fits one rack takes the tightest such rack": Case(
        arrays=lambda: gpu_racks([4], [8], [8, 8]),
        request=lambda a: flat(pod(gpu=1), 6, preferred=RACK),
        racks=(("r1",) * 6,),
        chosen={0: "r1"},
    ),
    "preferred rack: a gang larger than any rack spills over the fewest racks, most free first": Case(
        arrays=lambda: gpu_racks([4], [8], [8, 8]),
        request=lambda a: flat(pod(gpu=1), 20, preferred=RACK),
        racks=(("r1",) * 4 + ("r2",) * 16,),
        chosen={},
    ),
    "required block with preferred rack: one rack inside the block when one is big enough": Case(
        arrays=lambda: gpu_racks([8], [8], [2], [6]),
        request=lambda a: flat(pod(gpu=1), 5, required=BLOCK, preferred=RACK),
        racks=(("r3",) * 5,),
        chosen={0: "b1"},
    ),
    "members all bound: nothing to place and the pinned rack is reported": Case(
        arrays=lambda: gpu_racks([8], [8]),
        request=lambda a: flat(pod(gpu=1), 0, required=RACK, bound_rows=[1, 1]),
        racks=((),),
        chosen={0: "r1"},
    ),
}


def _name(arrays: ClusterArrays, level: int, domain_id: int) -> str | None:
    return None if domain_id < 0 else arrays.domain_name(level, domain_id)


@pytest.mark.parametrize("planner", [plan_gang, naive.plan_gang], ids=["kernels", "reference"])
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_plan(case: Case, planner) -> None:
    arrays = case.arrays()
    plan = planner(arrays, case.request(arrays))
    if case.shortfall is not None:
        assert plan.outcome is Outcome.NO_FIT
        sf = plan.shortfall
        assert (
            sf.level,
            _name(arrays, sf.level, sf.domain_id),
            sf.fits,
            sf.needed,
            sf.resource,
            sf.short_units,
        ) == (case.shortfall)
        return
    assert plan.outcome is Outcome.PLACED, plan.shortfall
    if case.rows is not None:
        assert tuple(tuple(int(r) for r in rows) for rows in plan.rows) == case.rows
    else:
        assert tuple(tuple(sorted(rack_of(arrays, int(r)) for r in rows)) for rows in plan.rows) == case.racks
    assert {t: arrays.domain_name(lv, d) for t, (lv, d) in plan.domains.items()} == case.chosen


def test_seed_driver_with_basic_policy_is_placed_on_its_own_after_the_workers() -> None:
    arrays = cluster([[small(100)] * 3, [small(200)] * 4, [small(100)] * 4], used={3: WORKER})
    workers = plan_gang(arrays, flat(WORKER, 4, required=RACK))
    assert {rack_of(arrays, int(r)) for r in workers.rows[0]} == {"r2"}
    for r in workers.rows[0]:
        arrays.sub(int(r), WORKER)
    driver = plan_gang(arrays, flat(WORKER, 1))
    # the most-allocated node with room: row 3 in r1 has half its cpu used
    assert driver.outcome is Outcome.PLACED and driver.rows[0].tolist() == [3]
