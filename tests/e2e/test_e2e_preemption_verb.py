"""kube-scheduler's own preemption, for a high-priority plain pod on a full cluster, never leaves a gang
below its quorum: the extender's preempt verb vetoes the candidate nodes whose victims are gang
members, so kube-scheduler evicts a plain pod instead (1.20.2, then 1.36.2).

The trap the test sets: the gang runs at a lower priority than the plain pods, so kube-scheduler's
own preference (the candidate whose highest victim priority is lowest) would pick a gang member's
node; only the verb's veto sends it elsewhere.

The fake nodes have no kubelet, so a pod kube-scheduler deletes would stay Terminating (its room
never freed): the plane's kubelet stand-in (controlplane/kubelet.py) completes those deletions.

Not on 1.20.2: its kube-scheduler never calls an extender's preempt verb (a regression of 1.20 and
1.21, kubernetes/kubernetes#102971, fixed in later patch releases); run there, this very test sees
kube-scheduler evict the gang member, which is what it guards against.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import wait_until
from test_e2e_gangs import bound_nodes, pods, wait_all_bound, with_scheduler
from test_e2e_ledger import http_get

from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
PODGROUPS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
GANG_PRIORITY, PLAIN_PRIORITY, URGENT_PRIORITY = 100, 200, 1000
PREEMPT_TIMEOUT_S = 90.0


@pytest.fixture
def priority_classes(cluster: Cluster) -> Iterator[dict[str, str]]:
    """Three PriorityClasses of this test's own: gang (low), plain (a little higher), urgent."""
    api = cluster.plane.api
    suffix = uuid.uuid4().hex[:6]
    names = {"gang": f"gang-low-{suffix}", "plain": f"plain-low-{suffix}", "urgent": f"urgent-{suffix}"}
    values = {"gang": GANG_PRIORITY, "plain": PLAIN_PRIORITY, "urgent": URGENT_PRIORITY}
    for role, name in names.items():
        api.create(
            PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": values[role],
                "description": "e2e preemption test",
            },
        )
    yield names
    for name in names.values():
        api.delete(f"{PRIORITY_CLASSES}/{name}")


def preempt_counts(cluster: Cluster) -> str:
    """The service's preempt metrics, for a failure message."""
    _, body = http_get(f"{cluster.service_url}/metrics")
    lines = body.decode(errors="replace").splitlines()
    return "; ".join(line for line in lines if "preempt" in line and not line.startswith("#"))


def make_pod(namespace: str, name: str, *, cpu: str, priority_class: str, **meta: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "image": "sleep:v0.1.0"}]}}
    pod = with_scheduler(template, cpu=cpu)  # gang-scheduler, grace 0
    pod["spec"]["priorityClassName"] = priority_class
    pod.update(apiVersion="v1", kind="Pod")
    pod["metadata"] = {"name": name, "namespace": namespace, **meta}
    return pod


@pytest.mark.k8s(
    min="1.22",
    reason="kube-scheduler 1.20 and 1.21 before the patch releases carrying kubernetes/kubernetes#103019 "
    "never call an extender's preempt verb (#102971); on 1.20.2 kube-scheduler evicts the gang member",
)
def test_a_high_priority_plain_pod_preempts_plain_pods_never_a_gang_member(
    cluster: Cluster, namespace: str, priority_classes: dict[str, str]
) -> None:
    api = cluster.plane.api
    node_cpu = int(api.get(f"/api/v1/nodes/{cluster.nodes[0]}")["status"]["allocatable"]["cpu"])
    full = str(node_cpu)  # one pod fills a node
    # a low-priority gang of 3 filling one rack (3 nodes), minMember 3
    api.create(
        PODGROUPS.format(ns=namespace),
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "trio", "namespace": namespace},
            "spec": {
                "minMember": 3,
                "queue": "default",
                "topologyConstraint": {
                    "topology": "dc",
                    "requiredTopologyLevel": "topology.kubernetes.io/rack",
                },
            },
        },
    )
    for i in range(3):
        api.create(
            f"/api/v1/namespaces/{namespace}/pods",
            make_pod(
                namespace,
                f"trio-{i}",
                cpu=full,
                priority_class=priority_classes["gang"],
                labels={"app": "trio"},
                annotations={keys.POD_GROUP_NAME: "trio"},
            ),
        )
    gang = wait_all_bound(api, namespace, 3, "app=trio")
    # plain pods, a little higher in priority, on every other node
    others = len(cluster.nodes) - 3
    for i in range(others):
        api.create(
            f"/api/v1/namespaces/{namespace}/pods",
            make_pod(
                namespace,
                f"plain-{i}",
                cpu=full,
                priority_class=priority_classes["plain"],
                labels={"app": "plain"},
            ),
        )
    plain = wait_all_bound(api, namespace, others, "app=plain")
    assert len(set(bound_nodes(gang + plain))) == len(cluster.nodes), "every node is full"
    assert {p["spec"]["priority"] for p in gang} == {GANG_PRIORITY}, "admission resolved the classes"

    api.create(
        f"/api/v1/namespaces/{namespace}/pods",
        make_pod(namespace, "urgent", cpu=full, priority_class=priority_classes["urgent"]),
    )

    def placed() -> str | None:
        return api.get(f"/api/v1/namespaces/{namespace}/pods/urgent")["spec"].get("nodeName")

    node = wait_until(placed, timeout_s=PREEMPT_TIMEOUT_S, what="the urgent pod to be placed by preemption")

    trio = pods(api, namespace, "app=trio")
    names = [p["metadata"]["name"] for p in trio]
    assert len(trio) == 3, f"a gang member was evicted: {names} left; {preempt_counts(cluster)}"
    assert all(not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") for p in trio), (
        "the gang stays whole and running"
    )
    survivors = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods(api, namespace, "app=plain")}
    evicted = sorted({p["metadata"]["name"] for p in plain} - set(survivors))
    assert len(evicted) == 1, f"exactly one plain pod made room, evicted: {evicted}"
    assert node not in {p["spec"]["nodeName"] for p in trio}
    assert node not in survivors.values()
