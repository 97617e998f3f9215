"""The e2e plane's kubelet stand-in (controlplane/kubelet.py): a bound pod that is deleted or evicted goes
away as it would on a node with a kubelet, instead of staying Terminating forever."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.start import wait_until

if TYPE_CHECKING:
    from conftest import Cluster


def bound_pod(namespace: str, name: str, node: str) -> dict[str, Any]:
    """A pod placed by hand (spec.nodeName): no scheduler involved; 30 s of grace, as by default."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {"name": "main", "image": "sleep:v0.1.0", "resources": {"requests": {"cpu": "10m"}}}
            ],
        },
    }


def gone(api: Any, path: str) -> bool:
    return api.request("GET", path, ok=(200, 404))[0] == 404


def test_a_deleted_bound_pod_is_finished_like_a_kubelet_would(cluster: Cluster, namespace: str) -> None:
    api = cluster.plane.api
    path = f"/api/v1/namespaces/{namespace}/pods/standin"
    created = api.create(
        f"/api/v1/namespaces/{namespace}/pods", bound_pod(namespace, "standin", cluster.nodes[0])
    )
    api.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions"})  # graceful: Terminating
    # The stand-in records a completion after its DELETE has answered, so the pod can be gone a moment
    # before it is listed: wait for both, then check nothing else (a controller) took it away first
    wait_until(lambda: gone(api, path), timeout_s=10, what="the Terminating pod to be finished")
    wait_until(
        lambda: f"{namespace}/standin" in cluster.plane.kubelet.completed,
        timeout_s=10,
        what="the stand-in to record that it finished the pod",
    )
    assert created["metadata"]["uid"] not in {
        p["metadata"]["uid"] for p in api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    }


def test_an_evicted_bound_pod_goes_too(cluster: Cluster, namespace: str) -> None:
    api = cluster.plane.api
    path = f"/api/v1/namespaces/{namespace}/pods/evicted"
    api.create(f"/api/v1/namespaces/{namespace}/pods", bound_pod(namespace, "evicted", cluster.nodes[1]))
    version = "policy/v1beta1" if cluster.plane.legacy else "policy/v1"
    eviction = {
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": "evicted", "namespace": namespace},
    }
    api.create(f"{path}/eviction", eviction)
    wait_until(lambda: gone(api, path), timeout_s=10, what="the evicted pod to be finished")
