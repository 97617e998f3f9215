"""End-to-end fixtures: one control plane per version, fake racks, the service and kube-scheduler.

Every e2e test runs once per control-plane version (`[k8s-1.20.2]`, `[k8s-1.36.2]`, `[k8s-1.37.2]`;
on 1.20.2 only the modules in fixtures.LEGACY_MODULES). The `plane` fixture is session-scoped and
parametrized over the versions, so pytest groups the tests by version: all of 1.20.2's run, its
processes are stopped, then 1.36.2 starts, then 1.37.2 (one plane at a time, 2 cores).
A test that is genuinely version-specific says so with `@pytest.mark.k8s(min="1.36", reason=...)`.

Reusable from elsewhere: `from controlplane.start import plane_for_tests` (put tests/e2e on sys.path)
gives the same per-process control plane these fixtures use.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from controlplane.fixtures import plane_fixture, plane_version_fixture, skip_outside_versions  # noqa: F401
from controlplane.proxies import ApiProxy
from controlplane.start import TOKEN, ControlPlane, wait_until

from extender.sim.cluster import topology

TOPOLOGY = topology("dc")

# 2 blocks x 2 racks x 3 nodes of 4 CPUs: a rack holds 12 CPUs, a block 24, the cluster 48.
BLOCKS, RACKS_PER_BLOCK, NODES_PER_RACK, NODE_CPU = 2, 2, 3, 4


@dataclass(frozen=True)
class Cluster:
    plane: ControlPlane
    service_url: str
    nodes: tuple[str, ...]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything that touches the control plane is `e2e`, so `-m "not e2e"` leaves only the fast checks.
    for item in items:
        if {"plane", "cluster"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
    skip_outside_versions(items)


@pytest.fixture(autouse=True)
def no_forbidden_requests(request: pytest.FixtureRequest) -> Iterator[None]:
    """kube-scheduler and the service run with the shipped service accounts and only the shipped RBAC:
    a request either of them was refused (HTTP 403, read from the API server's audit log) fails the
    test that was running."""
    if not {"plane", "cluster"} & set(request.fixturenames):
        yield
        return
    plane: ControlPlane = request.getfixturevalue("plane")
    offset = plane.audit_offset()
    yield
    refused = plane.forbidden_since(offset)
    if refused:
        shown = "\n".join(refused[:10])
        pytest.fail(f"{len(refused)} request(s) refused by RBAC:\n{shown}", pytrace=False)


@pytest.fixture(scope="session")
def cluster(plane: ControlPlane) -> Cluster:
    """Fake racks, a Topology, the service (`python -m extender serve`) and kube-scheduler calling it."""
    nodes = plane.add_racks(
        blocks=BLOCKS, racks_per_block=RACKS_PER_BLOCK, nodes_per_rack=NODES_PER_RACK, cpu=str(NODE_CPU)
    )
    plane.api.create("/apis/kai.scheduler/v1alpha1/topologies", TOPOLOGY, exist_ok=True)
    try:
        url = plane.service_url or plane.start_service()
        if "kube-scheduler" not in plane.procs:
            plane.start_scheduler(url_prefix=url)
    except Exception as exc:
        pytest.fail(
            f"{exc}\n--- service log ---\n{plane.log_tail('service')}\n"
            f"--- kube-scheduler log ---\n{plane.log_tail('kube-scheduler')}",
            pytrace=False,
        )
    return Cluster(plane=plane, service_url=url, nodes=tuple(nodes))


@pytest.fixture
def lagging_api(cluster: Cluster) -> Iterator[ApiProxy]:
    """The service talks to kube-apiserver through an ApiProxy for this test (restarted on its port;
    `delay_pod_watches_s` makes its pod watch lag kube-scheduler's); afterwards a fresh service goes
    straight to the API server again."""
    plane = cluster.plane
    proxy = ApiProxy(plane.server, token=plane.extender_token or TOKEN).start()
    plane.service_kubeconfig = str(proxy.write_kubeconfig(plane.workdir / "kubeconfig.api-proxy"))
    plane.restart_service()
    try:
        yield proxy
    finally:
        plane.service_kubeconfig = None
        plane.restart_service()
        proxy.stop()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace per test; its pods are deleted with grace 0 afterwards (no kubelet ever confirms)."""
    api = cluster.plane.api
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    for path in (
        f"/apis/batch/v1/namespaces/{name}/jobs",
        f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{name}/jobsets",
        f"/apis/kubeflow.org/v1/namespaces/{name}/pytorchjobs",
    ):
        for obj in api.get(path)["items"]:
            api.request(
                "DELETE",
                f"{path}/{obj['metadata']['name']}",
                {"propagationPolicy": "Orphan", "gracePeriodSeconds": 0},
                ok=(200, 202, 404),
            )
    # every pod in one request (a DELETE per pod cost seconds per test under load)
    api.delete(f"/api/v1/namespaces/{name}/pods")
    api.delete(f"/api/v1/namespaces/{name}")


QUEUES = "/apis/scheduling.run.ai/v2/queues"
QUEUES_SEEN_S = 60.0


def debug_queues(cluster: Cluster) -> list[dict[str, Any]]:
    """The queues the shared service enforces (GET /debug/queues)."""
    with urllib.request.urlopen(f"{cluster.service_url}/debug/queues", timeout=5) as resp:
        return list(orjson.loads(resp.read())["queues"])


@pytest.fixture
def make_queues(cluster: Cluster) -> Iterator[Callable[..., None]]:
    """Create KAI Queues (name -> spec.resources); they are deleted after the test, and the test ends
    only once the service has seen them go."""
    api = cluster.plane.api
    made: list[str] = []

    def make(**queues: dict[str, Any]) -> None:
        for name, resources in queues.items():
            api.create(
                QUEUES,
                {
                    "apiVersion": "scheduling.run.ai/v2",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": {"resources": resources},
                },
            )
            made.append(name)
        wait_until(
            lambda: {q["queue"] for q in debug_queues(cluster)} >= set(queues),
            timeout_s=QUEUES_SEEN_S,
            what="the service to see the queues",
        )

    yield make
    for name in made:
        api.delete(f"{QUEUES}/{name}")
    wait_until(
        lambda: debug_queues(cluster) == [], timeout_s=QUEUES_SEEN_S, what="the service to forget the queues"
    )
