"""A gang of gangs on 1.37.2's real API server: a Workload with a CompositePodGroup template, its root
CompositePodGroup (scheduling.k8s.io/v1alpha3, gate CompositePodGroup) and two child PodGroups naming it,
as a controller would create them, and pods that join the children with `spec.schedulingGroup`. The
service reads the tree as one gang: it waits while a child is missing, then binds all of it together,
the whole tree in one block and each child in one rack of it (topology top-down), and marks the root
CompositePodGroupInitiallyScheduled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import wait_until
from test_e2e_gangs import RACK, bound_nodes, pending_reasons, pods, wait_all_bound, with_scheduler
from test_e2e_workload_api import create_podgroup

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.k8s(min="1.37", reason="CompositePodGroup (scheduling.k8s.io/v1alpha3) is 1.37's")

BLOCK = "example.com/block"
API = "/apis/scheduling.k8s.io/v1alpha3/namespaces/{ns}/{plural}"


def workload(ns: str) -> dict[str, Any]:
    workers = {
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    root = {
        "name": "train",
        "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        "schedulingConstraints": {"topology": [{"key": BLOCK}]},
        "podGroupTemplates": [workers],
    }
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {"compositePodGroupTemplates": [root]},
    }


def composite(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {
            "workloadRef": {"workloadName": "train", "templateName": "train"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            "schedulingConstraints": {"topology": [{"key": BLOCK}]},
        },
    }


def child(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentCompositePodGroupName": "train",
            "workloadRef": {"workloadName": "train", "templateName": "workers"},
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }


def member(ns: str, group: str, i: int) -> dict[str, Any]:
    pod = with_scheduler({"spec": {"containers": [{"name": "main"}]}}, cpu="4")  # a whole node each
    pod.update(apiVersion="v1", kind="Pod")
    pod["metadata"] = {"name": f"{group}-{i}", "namespace": ns, "labels": {"tree": "train"}}
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def test_a_composite_tree_waits_for_its_children_then_binds_whole_top_down(
    cluster: Cluster, namespace: str
) -> None:
    api = cluster.plane.api
    api.create(API.format(ns=namespace, plural="workloads"), workload(namespace))
    create_podgroup(
        api, namespace, composite(namespace), path=API.format(ns=namespace, plural="compositepodgroups")
    )
    create_podgroup(
        api, namespace, child(namespace, "workers-a"), path=API.format(ns=namespace, plural="podgroups")
    )
    first = [member(namespace, "workers-a", i) for i in range(3)]
    for pod in first:
        api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    wait_until(
        lambda: all(
            any("child groups of CompositePodGroup" in r for r in pending_reasons(api, namespace, p))
            for p in first
        ),
        timeout_s=30,
        what="the first child's pods to say the tree waits for its second child group",
    )
    assert bound_nodes(pods(api, namespace)) == []

    create_podgroup(
        api, namespace, child(namespace, "workers-b"), path=API.format(ns=namespace, plural="podgroups")
    )
    for i in range(3):
        api.create(f"/api/v1/namespaces/{namespace}/pods", member(namespace, "workers-b", i))
    items = wait_all_bound(api, namespace, 6, "tree=train")
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items}
    label = {n: api.get(f"/api/v1/nodes/{n}")["metadata"]["labels"] for n in set(nodes.values())}
    assert len({label[n][BLOCK] for n in nodes.values()}) == 1, f"the tree spans blocks: {nodes}"
    for group in ("workers-a", "workers-b"):
        racks = {label[n][RACK] for p, n in nodes.items() if p.startswith(group)}
        assert len(racks) == 1, f"{group} spans racks {racks}"

    def scheduled() -> list[dict[str, Any]]:
        got = api.get(API.format(ns=namespace, plural="compositepodgroups") + "/train")
        conds = (got.get("status") or {}).get("conditions") or []
        return [
            c for c in conds if (c["type"], c["status"]) == ("CompositePodGroupInitiallyScheduled", "True")
        ]

    wait_until(scheduled, timeout_s=30, what="CompositePodGroupInitiallyScheduled=True on the root")
