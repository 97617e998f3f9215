"""Workload-derived gangs through the service: elastic quorum changes and basic groups with a constraint."""

from __future__ import annotations

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
    (gang,) = [k for k, e in svc.scheduler.permits.gangs.items() if e.plan]
    assert len(svc.scheduler.permits.entry(gang).plan) == 2
    scaled = copy.deepcopy(svc.cluster.get("jobset.x-k8s.io", "JobSet", "default", "elastic"))
    scaled["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 4
    svc.cluster.apply(scaled)  # minCount follows live parallelism x replicas: 2 -> 4
    assert svc.scheduler.permits.entry(gang).plan == {}
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
    assert all(not e.plan for e in svc.scheduler.permits.gangs.values())
    svc.check_invariants()
