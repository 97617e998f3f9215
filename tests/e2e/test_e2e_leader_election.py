"""Two gang-scheduler replicas, as the shipped Deployment runs them: each kube-scheduler with its own
sidecar service and the shipped configuration's leader election (one lease, `gang-scheduler`). Only the
leader's kube-scheduler calls its sidecar; when the leader dies, the other takes the lease and binds
gangs whole through its own sidecar, whose cache was already built by list+watch."""

from __future__ import annotations

import signal
import time
import urllib.request
from typing import TYPE_CHECKING

from controlplane.start import INSTALL_NAMESPACE, can_name_hosts, free_port, wait_until
from test_e2e_gangs import batch_job, bound_nodes, wait_all_bound

from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

SERVICE_B, SCHEDULER_B = "service-b", "kube-scheduler-b"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{INSTALL_NAMESPACE}/leases/gang-scheduler"


def verb_calls(probe: str) -> float:
    """Every verb request the service has answered (gang_extender_requests_total, all labels)."""
    with urllib.request.urlopen(f"{probe}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return sum(
        float(line.rpartition(" ")[2]) for line in lines if line.startswith("gang_extender_requests_total{")
    )


def test_only_the_leader_calls_its_sidecar_and_the_other_replica_takes_over(
    cluster: Cluster, namespace: str
) -> None:
    plane, api = cluster.plane, cluster.plane.api

    def holder() -> str:
        return str(api.get(LEASE)["spec"].get("holderIdentity") or "")

    def gang(name: str) -> None:
        job = batch_job(namespace, name, pods_n=2, cpu="1", annotations={keys.BATCH_MIN_MEMBER: "2"})
        api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
        assert len(bound_nodes(wait_all_bound(api, namespace, 2, f"job-name={name}"))) == 2

    leader = holder()
    offset = plane.audit_offset()
    probe = f"http://127.0.0.1:{free_port()}"
    args = ["--probe-host", "127.0.0.1", "--probe-port", probe.rsplit(":", 1)[1]]
    url_b = plane.start_service(name=SERVICE_B, extra_args=args, readyz_url=probe)
    plane.start_scheduler(url_prefix=url_b, name=SCHEDULER_B)  # the same shipped configuration and lease
    replica_b = ""
    try:
        gang("first")
        assert holder() == leader, "the second replica took the lease from a live leader"
        assert verb_calls(probe) == 0, "a follower's kube-scheduler called its sidecar"
        if can_name_hosts():  # each replica's service follows its own kube-scheduler's lease
            assert leader.startswith("replica-a_"), leader
            # the leader's service wrote the gang's PodGroup and status; the follower's wrote nothing
            assert plane.writes_since(offset, "(replica-a)"), "the leader's service wrote nothing"
            assert plane.writes_since(offset, "(replica-b)") == [], "a follower's service wrote"

        killed = time.monotonic()
        plane.kill("kube-scheduler")  # SIGKILL: the lease is not released, it expires
        replica_b = wait_until(lambda: (h := holder()) != leader and h, timeout_s=60, what="a new leader")
        gang("second")
        # the failover: from the leader's loss to the first gang bound through the new one
        print(
            f"failover: first gang bound by the new leader {time.monotonic() - killed:.1f} s after the kill"
        )
        assert verb_calls(probe) > 0, "the new leader's gang went through its own sidecar"
    finally:
        if SCHEDULER_B in plane.procs:
            plane.stop_scheduler(SCHEDULER_B)  # and its lease: the shared one need not wait for it to expire
            del plane.procs[SCHEDULER_B]
        if SERVICE_B in plane.procs:
            plane.kill(SERVICE_B, signal.SIGTERM)
            del plane.procs[SERVICE_B]
        if plane.procs["kube-scheduler"].poll() is not None:
            plane.start_scheduler(url_prefix=cluster.service_url)
        if replica_b:  # the shared kube-scheduler leads again before the next test
            wait_until(
                lambda: holder() not in ("", replica_b), timeout_s=60, what="the shared scheduler to lead"
            )
