"""The built-in cluster has the shape the seed and contention scenarios rely on."""

from __future__ import annotations

from collections import Counter

from extender.sim import cluster as C
from extender.sim.scenario import CONTENTION_GPUS, CONTENTION_PODS, contention_scenario


def nodes() -> list[dict]:
    return [o for o in C.build_cluster() if o["kind"] == "Node"]


def test_nodes_sit_in_zones_blocks_and_racks_with_a_hostname() -> None:
    racked = [n for n in nodes() if C.RACK in n["metadata"]["labels"]]
    assert len(racked) == 2 * 4 * 8
    for n in racked:
        labels = n["metadata"]["labels"]
        assert labels[C.HOSTNAME] == n["metadata"]["name"]
        assert labels[C.RACK].startswith(labels[C.BLOCK] + "-")
        assert labels[C.ZONE].startswith("zone-")


def test_only_one_rack_holds_a_whole_contention_gang() -> None:
    a100 = [n for n in nodes() if n["metadata"]["labels"].get(C.POOL) == "a100"]
    per_rack = Counter(n["metadata"]["labels"][C.RACK] for n in a100)
    # each contention pod takes a whole a100 node; both gangs fit in all a100 nodes, but not in racks
    assert all(int(n["status"]["allocatable"][C.GPU]) == CONTENTION_GPUS for n in a100)
    assert len(a100) >= 2 * CONTENTION_PODS
    assert sorted(per_rack.values(), reverse=True)[0] >= CONTENTION_PODS
    assert sorted(per_rack.values(), reverse=True)[1] < CONTENTION_PODS
    assert all(any(t["key"] == C.POOL for t in n["spec"]["taints"]) for n in a100)


def test_tpu_slices_and_the_topology_object_exist() -> None:
    slices = Counter(n["metadata"]["labels"].get(C.TPU_SLICE) for n in nodes())
    assert slices["tpu-slice-0"] == slices["tpu-slice-1"] == 4
    topo = C.build_cluster()[0]
    assert topo["kind"] == "Topology"
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == [C.BLOCK, C.RACK, C.HOSTNAME]


def test_the_general_gpu_rack_holds_every_seed_gpu_pod() -> None:
    gpus = sum(
        int(n["status"]["allocatable"].get(C.GPU, 0))
        for n in nodes()
        if n["metadata"]["labels"].get(C.POOL) == "gpu"
    )
    assert gpus >= 13  # batch-job 2 + min-member 6 + external 2 + pytorch 3


def test_contention_gangs_tolerate_the_a100_taint_and_select_its_pool() -> None:
    for js in contention_scenario():
        spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {C.POOL: "a100"}
        assert js["spec"]["scheduling"]["schedulingConstraints"]["topology"] == [{"key": C.RACK}]
