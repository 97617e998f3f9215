"""A gang's steps told as events on its group object and on its workload, once per object and step."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from extender.grouping import podgroup_objects
from extender.sim.expand import expand
from tests.builders import make_node
from tests.scheduling.test_gang_flow import bind_all

PYTORCH = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: mnist, namespace: default}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: sleep, resources: {limits: {nvidia.com/gpu: "1"}}}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: sleep, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def events_by_object(svc) -> dict[tuple[str, str, str], list[str]]:
    """(apiVersion, kind, name) -> reasons, for every object other than a pod."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for e in svc.cluster.events:
        o = e["involvedObject"]
        if o["kind"] != "Pod":
            out.setdefault((o.get("apiVersion", ""), o["kind"], o["name"]), []).append(e["reason"])
            assert o["uid"], f"{o['kind']} {o['name']}: an event names its object's uid"
    return out


@pytest.mark.parametrize("podgrouper", [False, True], ids=["no PodGroup", "a podgrouper's PodGroup"])
async def test_a_derived_gang_is_told_on_its_workload_and_its_podgroup(make_service, podgrouper):
    expansion = expand([yaml.safe_load(PYTORCH)])
    objects = [make_node(f"n{i}", gpu="2") for i in range(2)] + expansion.objects
    derived = podgroup_objects(expansion.objects) if podgrouper else []
    # without a PodGroup: the podgrouper off (on, it would create one)
    svc = await make_service(objects + derived, cluster_podgrouper=podgrouper)
    pods = sorted(p["metadata"]["name"] for p in expansion.pods)
    assert set((await bind_all(svc, pods)).values()) == {""}
    await asyncio.sleep(0.05)
    told = events_by_object(svc)
    assert told[("kubeflow.org/v1", "PyTorchJob", "mnist")] == ["GangPlanned", "GangBound"]
    if podgrouper:
        (pg,) = derived
        assert told[("scheduling.run.ai/v2alpha2", "PodGroup", pg["metadata"]["name"])] == [
            "GangPlanned",
            "GangBound",
        ]
    assert len(told) == 1 + podgrouper  # nothing else: one event per step and object
    # the pods still get theirs: one per step, on the member that took it
    on_pods = [e["reason"] for e in svc.cluster.events if e["involvedObject"]["kind"] == "Pod"]
    assert on_pods == ["GangPlanned", "GangBound"]
