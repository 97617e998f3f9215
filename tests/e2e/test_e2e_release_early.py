"""--release-on-first-bind through a real kube-scheduler: the first member's bind binds the whole plan,
kube-scheduler drops the members it had queued once its watch shows them bound (or is passed their
node and answered bound), and a member with a host port is bound only after its own cycle.

The service is restarted with the flag for this module and put back as it was afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from test_e2e_gangs import batch_job, bound_nodes, rack_of, wait_all_bound

from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

RACK_GANG = {
    keys.TOPOLOGY: "dc",
    keys.TOPOLOGY_REQUIRED: "topology.kubernetes.io/rack",
}


@pytest.fixture(scope="module")
def released_early(cluster: Cluster) -> Iterator[Cluster]:
    plane = cluster.plane
    port = int(cluster.service_url.rsplit(":", 1)[1])
    before = list(plane.service_args)
    plane.stop_service()
    plane.start_service(port=port, extra_args=[*before, "--release-on-first-bind", "true"])
    try:
        yield cluster
    finally:
        plane.stop_service()
        plane.start_service(port=port, extra_args=before)


# the host-port case first: the module's service has released nothing early before it
@pytest.mark.parametrize("host_port", [True, False], ids=["host-ports", "vouched-for"])
def test_a_gang_released_at_its_first_bind_binds_whole_in_one_rack(
    released_early: Cluster, namespace: str, host_port: bool
) -> None:
    api = released_early.plane.api
    # a rack: 3 nodes of 4 cpu. Twelve one-cpu members: kube-scheduler's first bind call reaches the
    # service long before it has cycled all twelve (each cycle calls the filter too)
    n, cpu = (3, "2") if host_port else (12, "1")
    job = batch_job(
        namespace, "train", pods_n=n, cpu=cpu, annotations={keys.BATCH_MIN_MEMBER: str(n), **RACK_GANG}
    )
    if host_port:  # each member's own cycle vouches for its port: the release waits for every one
        for c in job["spec"]["template"]["spec"]["containers"]:
            c["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    items = wait_all_bound(api, namespace, n, "job-name=train")
    nodes = bound_nodes(items)
    assert len({rack_of(api, node) for node in nodes}) == 1, f"a rack gang spans racks: {nodes}"
    log = released_early.plane.log_tail("service", lines=100_000)
    if host_port:
        # one port per node: kube-scheduler's NodePorts filter kept them apart, each in its own cycle
        assert len(set(nodes)) == n, f"two members with host port 8080 share a node: {nodes}"
        assert "released at its first member's bind" not in log
        assert "pods bound together" in log
    else:
        assert "released at its first member's bind" in log, log[-3000:]
