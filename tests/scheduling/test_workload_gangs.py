"""Workload-derived gangs through the service: elastic quorum changes and basic groups with a constraint."""

from __future__ import annotations

import asyncio
import copy

import yaml

from extender.sim.expand import expand
from tests.builders import rack_cluster

ELASTIC = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: elastic, namespace: default}
spec:
  scheduling:
    schedulingPolicy: {gang: {}}
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            containers: [{name: w, image: sleep, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""

BASIC_RACK = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: spread, namespace: default}
spec:
  scheduling:
    replicatedJobs:
    - targetReplicatedJobs: [workers]
      schedulingPolicy: {basic: {}}
      schedulingConstraints:
        topology: [{key: topology.kubernetes.io/rack}]
  replicatedJobs:
  - name: workers
    replicas: 4
    template:
      spec:
        parallelism: 1
        template:
          spec:
            containers: [{name: w, image: sleep, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def pods_of(objects: list[dict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Pod")


async def test_an_elastic_quorum_change_drops_the_plan(make_service):
    jobset = yaml.safe_load(ELASTIC)
    exp = expand([jobset])
    svc = await make_service(rack_cluster() + exp.objects)
    names = pods_of(exp.objects)
    assert len(names) == 2
    await svc.filter(names[0])
    (gang,) = [k for k, e in svc.scheduler.ledger.gangs.items() if e.plan]
    assert len(svc.plan(gang)) == 2
    scaled = copy.deepcopy(svc.cluster.get("jobset.x-k8s.io", "JobSet", "default", "elastic"))
    scaled["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 4
    svc.cluster.apply(scaled)  # minCount follows live parallelism x replicas: 2 -> 4
    assert svc.plan(gang) == {}
    assert svc.store.reservations == {}
    doc = await svc.filter(names[0])
    reason = next(iter(doc["FailedAndUnresolvableNodes"].values()))
    assert reason == f"gang {gang} waiting for pods: 2 exist, 4 needed for quorum"
    svc.check_invariants()


async def test_a_basic_group_with_a_rack_constraint_is_placed_pod_by_pod_in_one_rack(make_service):
    exp = expand([yaml.safe_load(BASIC_RACK)])
    svc = await make_service(rack_cluster(racks=3, nodes_per_rack=2) + exp.objects)
    placed = {}
    for name in pods_of(exp.objects):
        doc = await svc.filter(name)
        assert doc["NodeNames"], doc
        node = doc["NodeNames"][0]
        assert await svc.bind(name, node) == ""
        placed[name] = node
    racks = {svc.store.node(n)["metadata"]["labels"]["topology.kubernetes.io/rack"] for n in placed.values()}
    assert len(placed) == 4 and len(racks) == 1
    # no gang was planned: each pod was placed on its own
    assert all(not e.plan for e in svc.scheduler.ledger.gangs.values())
    svc.check_invariants()


SEGMENTED = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: seg
  namespace: default
  annotations: {kai.scheduler/topology: dc}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: m, image: sleep, resources: {requests: {cpu: "1"}}}]}}
    Worker:
      replicas: 8
      template:
        metadata:
          annotations:
            kai.scheduler/segment-size: "4"
            kai.scheduler/segment-topology-required-placement: rack
        spec: {containers: [{name: w, image: sleep, resources: {requests: {cpu: "4"}}}]}
"""


async def test_each_segment_of_a_segmented_pytorchjob_lands_in_one_rack(make_service):
    from extender.sim.cluster import topology

    exp = expand([yaml.safe_load(SEGMENTED)])
    # racks of 2 nodes x 8 cpu: one segment of 4 x 4 cpu fills a rack, so segments must split
    svc = await make_service([*rack_cluster(racks=4, nodes_per_rack=2), topology("dc"), *exp.objects])
    names = pods_of(exp.objects)
    nodes = {}
    for name in names:
        doc = await svc.filter(name)
        assert doc["NodeNames"], doc
        nodes[name] = doc["NodeNames"][0]
    errors = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in names))
    assert set(errors) == {""}
    racks: dict[str, set[str]] = {}
    for name in names:
        rec = svc.store.pods[f"default/{name}"]
        leaf = svc.store.membership(rec).subgroup
        rack = svc.store.node(svc.node_of(name))["metadata"]["labels"]["topology.kubernetes.io/rack"]
        racks.setdefault(leaf, set()).add(rack)
    assert set(racks) == {"master", "worker-0", "worker-1"}
    assert len(racks["worker-0"]) == 1 and len(racks["worker-1"]) == 1
    assert racks["worker-0"] != racks["worker-1"]
    svc.check_invariants()


async def test_a_gang_that_fit_nowhere_is_retried_when_its_min_count_is_lowered_in_place(make_service):
    """A 1.37 PodGroup's gang.minCount is mutable (a Job's elastic minCount reaches it through the Job
    controller): the members kube-scheduler parked as unschedulable are nudged when the smaller gang
    may fit, since no event of kube-scheduler's own would retry them."""
    from tests.builders import make_pod

    pg = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        },
    }
    pods = [make_pod(f"train-{i}", cpu="8", scheduling_group="train") for i in range(4)]
    svc = await make_service([*rack_cluster(racks=2, nodes_per_rack=3), pg, *pods])
    for i in range(4):
        doc = await svc.filter(f"train-{i}")
        assert not doc["NodeNames"]
    assert "fits 3 of 4" in next(iter(doc["FailedAndUnresolvableNodes"].values()))
    await svc.expire(0)
    assert not any(
        "gang-extender.io/nudge" in (svc.pod(f"train-{i}")["metadata"].get("annotations") or {})
        for i in range(4)
    )
    smaller = copy.deepcopy(pg)
    smaller["spec"]["schedulingPolicy"]["gang"]["minCount"] = 3
    svc.cluster.apply(smaller)
    await svc.expire(0)
    nudged = [
        (svc.pod(f"train-{i}")["metadata"].get("annotations") or {}).get("gang-extender.io/nudge")
        for i in range(4)
    ]
    assert all(n and n.startswith("default/train:regrouped@") for n in nudged), nudged
    node, why = await svc.schedule("train-0")
    assert node, why
    svc.check_invariants()
