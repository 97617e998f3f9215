"""The simulator's own queue accounting: usage toward a queue and its ancestors, peaks, a breach the
moment a bind takes a queue past its limit, and the low point an eviction leaves."""

from __future__ import annotations

from typing import Any

import pytest

from extender.sim.queues import QueueUsage
from extender.state.embedded import EmbeddedCluster
from tests.builders import gang_pod, make_kai_podgroup, make_pod

GPU = "nvidia.com/gpu"


def queue(name: str, quota: int, limit: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": quota, "limit": limit}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def usage(*objects: dict[str, Any]) -> tuple[QueueUsage, EmbeddedCluster]:
    cluster = EmbeddedCluster(
        [queue("org", 8, 12), queue("team-a", 4, 8, parent="org"), queue("team-b", 4, -1), *objects]
    )
    return QueueUsage(cluster), cluster


def bind(u: QueueUsage, cluster: EmbeddedCluster, name: str) -> None:
    pod = cluster.get("", "Pod", "default", name)
    assert pod is not None
    u.bound(f"default/{name}", pod)


@pytest.mark.parametrize(
    ("pods", "breaches"),
    [
        pytest.param([("p0", "team-a", 8)], [], id="at the limit is no breach"),
        pytest.param(
            [("p0", "team-a", 6), ("p1", "team-a", 4)],
            ["queue team-a: nvidia.com/gpu in use 10 > limit 8 once default/p1 was bound"],
            id="past its own limit",
        ),
        pytest.param(
            [("p0", "team-a", 8), ("p1", "org", 6)],
            ["queue org: nvidia.com/gpu in use 14 > limit 12 once default/p1 was bound"],
            id="a child's usage counts toward its parent's limit",
        ),
        pytest.param([("p0", "team-b", 40)], [], id="no limit"),
        pytest.param([("p0", "team-x", 40)], [], id="a queue that does not exist counts nowhere"),
    ],
)
def test_a_bind_past_a_limit_is_a_breach(pods: list[tuple[str, str, int]], breaches: list[str]) -> None:
    u, cluster = usage(*(make_pod(n, gpu=str(g), labels={"kai.scheduler/queue": q}) for n, q, g in pods))
    for name, _, _ in pods:
        bind(u, cluster, name)
    assert u.breaches == breaches


def test_a_podgroups_queue_wins_usage_counts_once_and_an_eviction_leaves_a_low_point() -> None:
    u, cluster = usage(
        make_kai_podgroup("g", min_member=2, queue="team-b"),
        *(gang_pod(f"g-{i}", "g", gpu="4", labels={"kai.scheduler/queue": "team-a"}) for i in range(2)),
    )
    for name in ("g-0", "g-0", "g-1"):  # the bind reply and the pod's update both say so
        bind(u, cluster, name)
    assert u.in_use["team-b"][GPU] == u.peak["team-b"][GPU] == 8 and u.in_use["team-a"].get(GPU, 0) == 0
    u.evicted("default/g-0")
    u.evicted("default/g-1")
    u.evicted("default/g-1")
    assert u.in_use["team-b"][GPU] == 0 and u.low_after_eviction["team-b"][GPU] == 0
    assert u.queue_of == {"default/g-0": "team-b", "default/g-1": "team-b"}


def test_another_schedulers_pod_naming_no_queue_and_a_cluster_without_queues_count_nothing() -> None:
    daemon = make_pod("daemon", gpu="8")
    daemon["spec"]["schedulerName"] = "default-scheduler"
    u, cluster = usage(queue("default-queue", 0, 0), daemon, make_pod("mine", gpu="1"))
    bind(u, cluster, "daemon")
    bind(u, cluster, "mine")
    assert u.queue_of == {"default/mine": "default-queue"}
    assert u.breaches == [
        "queue default-queue: nvidia.com/gpu in use 1 > limit 0 once default/mine was bound"
    ]
    empty = QueueUsage(EmbeddedCluster([make_pod("p", gpu="1")]))
    empty.bound("default/p", make_pod("p", gpu="1"))
    assert empty.queues == {} and empty.in_use == {} and empty.queue_of == {}


def test_a_jobsets_queue_label_counts_for_its_pods() -> None:
    from extender.sim.expand import expand

    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "labels": {"kai.scheduler/queue": "team-b"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "template": {"spec": {"containers": [{"name": "c", "image": "sleep:v0.1.0"}]}},
                        }
                    },
                }
            ]
        },
    }
    expansion = expand([jobset])
    u, cluster = usage(*expansion.objects)
    (pod,) = [o for o in cluster.list("", "Pod")]
    assert "kai.scheduler/queue" not in (pod["metadata"].get("labels") or {})  # only the JobSet names it
    key = f"ml/{pod['metadata']['name']}"
    u.admitted(key, pod)
    assert u.queue_of == {key: "team-b"}
