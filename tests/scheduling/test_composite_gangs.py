"""A 1.37 CompositePodGroup tree through the service: one gang, planned top-down (the root's block,
each child PodGroup's rack inside it) and bound whole; a child PodGroup that appears late regroups the
tree's waiting pods; the root's priority ranks every member."""

from __future__ import annotations

import asyncio

from tests.builders import make_pod, rack_cluster
from tests.grouping.test_composite import cpg, pg

BLOCK, RACK = "example.com/block", "topology.kubernetes.io/rack"


def members(group: str, n: int, cpu: str = "4") -> list[dict]:
    return [make_pod(f"{group}-{i}", namespace="ml", cpu=cpu, scheduling_group=group) for i in range(n)]


def cluster() -> list[dict]:
    # 2 blocks x 2 racks x 2 nodes of 8 cpu
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        *rack_cluster(blocks=2, racks=2, nodes_per_rack=2),
    ]


async def test_a_tree_binds_whole_in_one_block_each_child_in_one_rack(make_service):
    tree = [
        cpg("train", count=2, key=BLOCK),
        pg("a", "train", count=4, key=RACK),
        pg("b", "train", count=4, key=RACK),
    ]
    pods = members("a", 4) + members("b", 4)
    svc = await make_service(cluster() + tree + pods)
    placed = {}
    for p in pods:
        name = p["metadata"]["name"]
        node, why = await svc.schedule(name, namespace="ml")
        assert node, why
        placed[name] = node
    errors = await asyncio.gather(*(svc.bind(n, node, namespace="ml") for n, node in placed.items()))
    assert errors == [""] * 8
    assert all(svc.node_of(n, namespace="ml") for n in placed)
    labels = {n: svc.store.node(n)["metadata"]["labels"] for n in placed.values()}
    assert len({labels[placed[f"a-{i}"]][RACK] for i in range(4)}) == 1
    assert len({labels[placed[f"b-{i}"]][RACK] for i in range(4)}) == 1
    assert len({labels[n][BLOCK] for n in placed.values()}) == 1, "the tree in one block"
    svc.check_invariants()


async def test_a_child_podgroup_that_comes_late_regroups_the_waiting_pods(make_service):
    svc = await make_service([*cluster(), cpg("train", count=2), pg("a", "train", count=2), *members("a", 2)])
    doc = await svc.filter("a-0", namespace="ml")
    assert not doc["NodeNames"]
    # one child only: the composite's minGroupCount of 2 cannot be met; the pods wait and say why
    m = svc.store.membership(svc.store.pods["ml/a-0"])
    assert m.message == "waiting for child groups of CompositePodGroup ml/train: 1 exist, minGroupCount 2"
    assert m.message in next(iter(doc["FailedAndUnresolvableNodes"].values()))
    for obj in [pg("b", "train", count=2), *members("b", 2)]:
        svc.cluster.apply(obj)
    group = svc.store.membership(svc.store.pods["ml/a-0"]).group
    assert [s.name for s in group.subgroups] == ["a", "b"], "the tree grew: the waiting pods see it"
    placed = {}
    for name in ("a-0", "a-1", "b-0", "b-1"):
        node, why = await svc.schedule(name, namespace="ml")
        assert node, why
        placed[name] = node
    errors = await asyncio.gather(*(svc.bind(n, node, namespace="ml") for n, node in placed.items()))
    assert errors == [""] * 4
    svc.check_invariants()
