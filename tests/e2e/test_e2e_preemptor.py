"""A gang as preemptor on the real control plane (kube-scheduler 1.36.2; see SKIP_120 for 1.20.2).

Low-priority rack gangs fill every rack; a high-priority rack gang arrives that fits in no rack. Either
each of its pods fits a node (the filter is asked, answers that no node will do, unresolvable, so
kube-scheduler's own per-pod preemption stays out of it) or none does (kube-scheduler asks the
preempt verb, which answers no candidate of its own). Both ways the service preempts for the whole
gang: it evicts a whole gang in one rack (never part of one), holds the rack and binds the gang there.
1.36 only: see SKIP_120. The pods are created with terminationGracePeriodSeconds 0, so an
evicted pod is gone at once (there is no kubelet here to finish a graceful deletion).

Needs the service's Eviction API write (ClusterSource.evict_pod on the live source) and the
`create pods/eviction` permission in the shipped RBAC; without the write the test is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import Api, wait_until
from test_e2e_gangs import bound_nodes, create_child_jobs, pods, rack_of, with_scheduler
from test_e2e_ledger import PODGROUPS, RACK_CONSTRAINT, create_pod, member, overcommitted

from extender.model import labels as keys
from extender.state.kube import KubeClusterSource
from tests.builders import make_kai_podgroup

if TYPE_CHECKING:
    from conftest import Cluster

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
LOW, HIGH = 100, 1000
TIMEOUT_S = 60.0
SKIP_120 = (
    "kube-scheduler 1.20.2 never calls extenders on preemption (kubernetes#102971, fixed in later 1.20 "
    "patches), and its DefaultPreemption panics (index out of range in pickOneNodeForPreemption) on a "
    "high-priority pod the extender's filter rejects where the in-tree filters pass"
)

pytestmark = pytest.mark.skipif(
    not hasattr(KubeClusterSource, "evict_pod"), reason="the live source has no Eviction API write yet"
)


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": "PreemptLowerPriority",
    }


def rack_gang(api: Api, namespace: str, name: str, *, pods_n: int, cpu: str, pc: str) -> None:
    pg = make_kai_podgroup(name, namespace=namespace, min_member=pods_n, topology=RACK_CONSTRAINT)
    api.create(PODGROUPS.format(ns=namespace), pg)
    for i in range(pods_n):
        pod = member(namespace, f"{name}-{i}", name, cpu=cpu, labels={"app": name})
        pod["spec"]["priorityClassName"] = pc
        create_pod(api, pod)


def racks_of(api: Api, items: list[dict[str, Any]]) -> set[str]:
    return {rack_of(api, n) for n in bound_nodes(items)}


def urgent_jobset(api: Api, namespace: str, name: str, *, pods_n: int, cpu: str, pc: str) -> None:
    """A whole-JobSet KAI gang (one replicatedJob of `pods_n` pods) that must sit in one rack, its
    child Job made as the JobSet controller would (kube-controller-manager's Job controller makes
    the pods)."""
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "priorityClassName": pc,
            "containers": [{"name": "main", "image": "sleep:v0.1.0"}],
        },
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {keys.TOPOLOGY: "dc", keys.TOPOLOGY_REQUIRED: "topology.kubernetes.io/rack"},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": pods_n,
                            "completions": pods_n,
                            "template": with_scheduler(template, cpu=cpu),
                        }
                    },
                }
            ]
        },
    }
    created = api.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets", jobset)
    create_child_jobs(api, created)


@pytest.mark.k8s(min="1.36", reason=SKIP_120)
@pytest.mark.parametrize(
    ("low_cpu", "urgent_extra", "urgent_cpu", "make_urgent"),
    [
        pytest.param(
            "3", 1, "1", rack_gang, id="each pod fits a node, the gang no rack: the filter preempts"
        ),
        pytest.param("4", 0, "3", rack_gang, id="no node fits a pod: the preempt verb hands it to the gang"),
        pytest.param("3", 1, "1", urgent_jobset, id="a high-priority JobSet evicts whole gangs, never half"),
    ],
)
def test_a_high_priority_rack_gang_evicts_whole_gangs_in_one_rack_and_binds_there(
    cluster: Cluster, namespace: str, low_cpu: str, urgent_extra: int, urgent_cpu: str, make_urgent: Any
) -> None:
    api = cluster.plane.api
    api.create(PRIORITY_CLASSES, priority_class("e2e-low", LOW), exist_ok=True)
    api.create(PRIORITY_CLASSES, priority_class("e2e-high", HIGH), exist_ok=True)
    racks = sorted({rack_of(api, n) for n in cluster.nodes})
    per_rack = len(cluster.nodes) // len(racks)
    # every rack full: one low-priority gang per rack, a pod on each of its 4-cpu nodes
    low = [f"low-{i}" for i in range(len(racks))]
    for name in low:
        rack_gang(api, namespace, name, pods_n=per_rack, cpu=low_cpu, pc="e2e-low")
    for name in low:
        items = wait_until(
            lambda name=name: (
                (got := pods(api, namespace, f"app={name}")) and len(bound_nodes(got)) == per_rack and got
            ),
            timeout_s=TIMEOUT_S,
            what=f"{name} bound",
        )
        assert len(racks_of(api, items)) == 1
    # whether or not one urgent pod fits a node, the urgent gang fits in no rack until a low gang goes
    urgent_n = per_rack + urgent_extra
    make_urgent(api, namespace, "urgent", pods_n=urgent_n, cpu=urgent_cpu, pc="e2e-high")
    urgent = wait_until(
        lambda: (got := pods(api, namespace, "app=urgent")) and len(bound_nodes(got)) == urgent_n and got,
        timeout_s=TIMEOUT_S,
        what="the urgent gang bound",
    )
    (landed,) = racks_of(api, urgent)
    # exactly one low gang is gone, whole, and it is the one of that rack; the others are untouched
    left = {name: pods(api, namespace, f"app={name}") for name in low}
    gone = [name for name, items in left.items() if not items]
    assert len(gone) == 1, {n: len(items) for n, items in left.items()}
    for name, items in left.items():
        if name in gone:
            continue
        assert len(bound_nodes(items)) == per_rack, f"{name} was partly evicted: {len(items)} pods left"
        assert racks_of(api, items) != {landed}
    assert overcommitted(api) == []
