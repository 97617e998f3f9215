"""Two gang-scheduler replicas acting on one cluster with every feature that writes on its own at once: KAI
queues, a reclaim, a whole-gang disruption and a stale gang, across a failover in which the leader's
sidecar dies. What the audit log of the API server must show:

- while both replicas run, only the leader's service writes (the follower's wrote nothing);
- no pod is evicted twice, by one replica or by the two;
- a PodGroup's written status never goes back from Running to Pending while its gang stays bound;
- the leader's sidecar killed: its kube-scheduler's liveness probe (its sidecar's /healthz, played here as
  the kubelet plays it, from the Deployment's own probe fields) restarts that kube-scheduler, the lease
  moves, and the other replica binds gangs; the restarted sidecar follows and writes nothing.
"""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml
from controlplane.liveness import LivenessProbe, ProbeSpec
from controlplane.start import INSTALL, INSTALL_NAMESPACE, can_name_hosts, free_port, wait_until
from test_e2e_disruption import evict, told, wait_gone
from test_e2e_gangs import bound_nodes, pods
from test_e2e_ledger import http_get, overcommitted
from test_e2e_queues import bound, gang, two_teams

if TYPE_CHECKING:
    from conftest import Cluster

SERVICE_B, SCHEDULER_B = "service-b", "kube-scheduler-b"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{INSTALL_NAMESPACE}/leases/gang-scheduler"
STALE_GRACE_S = 5


def shipped_liveness() -> ProbeSpec:
    """The kube-scheduler container's livenessProbe in the shipped Deployment."""
    docs = yaml.safe_load_all((INSTALL / "deployment.yaml").read_text())
    deploy = next(d for d in docs if d and d["kind"] == "Deployment")
    (scheduler,) = [
        c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler"
    ]
    return ProbeSpec.of(scheduler["livenessProbe"])


def ready(url: str) -> bool:
    return http_get(url + "/readyz")[0] == 200


def evictions(events: list[dict[str, Any]]) -> collections.Counter[str]:
    """Eviction requests the services made, by pod."""
    return collections.Counter(
        f"{e['objectRef'].get('namespace')}/{e['objectRef'].get('name')}"
        for e in events
        if e.get("verb") == "create"
        and (e.get("objectRef") or {}).get("subresource") == "eviction"
        and "gang-extender" in str(e.get("userAgent", ""))
    )


def eviction_log(events: list[dict[str, Any]], pods_: dict[str, int]) -> list[str]:
    """Who asked to evict these pods, when, and what the API server answered."""
    return [
        f"{e.get('requestReceivedTimestamp')} {e['objectRef'].get('name')} {e.get('userAgent')} "
        f"{(e.get('responseStatus') or {}).get('code')}"
        for e in events
        if (e.get("objectRef") or {}).get("subresource") == "eviction"
        and f"{e['objectRef'].get('namespace')}/{e['objectRef'].get('name')}" in pods_
    ]


def phases_written(events: list[dict[str, Any]], namespace: str) -> dict[str, list[str]]:
    """Each PodGroup's status.phase as the services wrote it, in order, both replicas together."""
    out: dict[str, list[str]] = collections.defaultdict(list)
    for e in events:
        ref = e.get("objectRef") or {}
        if (ref.get("resource"), ref.get("subresource"), ref.get("namespace")) != (
            "podgroups",
            "status",
            namespace,
        ):
            continue
        if (e.get("responseStatus") or {}).get("code", 0) >= 300:
            continue
        phase = ((e.get("requestObject") or {}).get("status") or {}).get("phase")
        if phase:
            out[ref["name"]].append(phase)
    return out


def test_two_replicas_with_queues_reclaim_disruption_and_a_stale_gang_act_once_across_a_failover(
    cluster: Cluster, namespace: str, make_queues: Callable[..., None]
) -> None:
    plane, api = cluster.plane, cluster.plane.api
    if not can_name_hosts():
        import pytest

        pytest.skip("each replica needs a hostname of its own (unshare --uts) to follow its own lease")

    def holder() -> str:
        return str(api.get(LEASE)["spec"].get("holderIdentity") or "")

    start = plane.audit_offset()
    probe_b = free_port()
    args_b = [
        "--probe-host",
        "127.0.0.1",
        "--probe-port",
        str(probe_b),
        "--stale-gang-grace-s",
        str(STALE_GRACE_S),
    ]
    url_b = plane.start_service(name=SERVICE_B, extra_args=args_b, readyz_url=f"http://127.0.0.1:{probe_b}")
    plane.start_scheduler(url_prefix=url_b, name=SCHEDULER_B)
    spec = shipped_liveness()
    liveness = LivenessProbe(plane, "kube-scheduler", cluster.service_url + spec.path, spec)
    replica_b = ""
    try:
        assert holder().startswith("replica-a_"), holder()
        liveness.start(skip_initial_delay=True)  # the shared kube-scheduler has run longer than the delay

        # -- A leads: queues, a reclaim, a whole-gang disruption ----------------------------------------
        racks, per_rack, node_cpu = two_teams(cluster, make_queues)
        takers = [f"b{i}" for i in range(len(racks) - 1)]  # team-b over its quota, one rack left
        for name in takers:
            gang(api, namespace, name, queue="team-b", pods_n=per_rack, cpu=str(node_cpu), rack=True)
        for name in takers:
            bound(api, namespace, name, per_rack)
        gang(api, namespace, "trio", queue="team-a", pods_n=3, cpu="1")
        bound(api, namespace, "trio", 3)
        # a rack gang of team-a's: the free rack lacks the trio's room, so a whole gang of team-b is reclaimed
        gang(api, namespace, "a0", queue="team-a", pods_n=per_rack, cpu=str(node_cpu), rack=True)
        bound(api, namespace, "a0", per_rack)
        left = {name: pods(api, namespace, f"app={name}") for name in takers}
        reclaimed = [name for name, items in left.items() if not items]
        assert len(reclaimed) == 1, {n: len(items) for n, items in left.items()}
        # whole-gang disruption: one member of the trio evicted, the service evicts the rest
        trio = pods(api, namespace, "app=trio")
        evict(api, plane.legacy, namespace, trio[0]["metadata"]["name"])
        wait_gone(cluster, namespace, {p["metadata"]["uid"] for p in trio}, "the trio evicted whole")
        assert told(api, namespace, "GangDisrupted")
        both_alive = list(plane.audit_events_since(start))
        writes_a = [
            e for e in both_alive if "(replica-a)" in str(e.get("userAgent", "")) and e.get("verb") != "get"
        ]
        assert writes_a, "the leader's service wrote nothing"
        assert plane.writes_since(start, "(replica-b)") == [], "the follower's service wrote"

        # -- the leader's sidecar dies: its kube-scheduler is restarted by its liveness, the lease moves --
        leader = holder()
        killed = time.monotonic()
        moved_at = plane.audit_offset()
        plane.kill("service")  # the sidecar: SIGKILL; the kubelet's probe of kube-scheduler now fails
        replica_b = wait_until(
            lambda: (h := holder()).startswith("replica-b_") and h,
            timeout_s=spec.period_s * (spec.failure_threshold + 2) + 30,
            what="the lease to move to replica-b once the leader's sidecar died",
        )
        assert liveness.restarts, "the lease moved without the liveness restart"
        plane.respawn("service")  # restartPolicy Always: the sidecar comes back, and now follows
        wait_until(lambda: ready(cluster.service_url), timeout_s=60, what="the restarted sidecar's /readyz")
        back_at = plane.audit_offset()
        gang(api, namespace, "after", queue="team-a", pods_n=2, cpu="1")
        bound(api, namespace, "after", 2)
        took_s = time.monotonic() - killed
        print(
            f"failover: sidecar killed -> gang bound by replica-b in {took_s:.1f} s ({leader} -> {replica_b})"
        )

        # -- B leads: a stale gang (a member failed: no disruption) is evicted whole after its grace -------
        failed, survivor = sorted(p["metadata"]["name"] for p in pods(api, namespace, "app=after"))
        api.patch(f"/api/v1/namespaces/{namespace}/pods/{failed}/status", {"status": {"phase": "Failed"}})
        survivor_uid = api.get(f"/api/v1/namespaces/{namespace}/pods/{survivor}")["metadata"]["uid"]
        wait_gone(cluster, namespace, {survivor_uid}, "the stale gang's survivor evicted")
        stale = [e for e in told(api, namespace, "GangDisrupted") if e["involvedObject"]["name"] == survivor]
        assert stale and "the stale gang is evicted whole" in stale[0]["message"], stale
        assert plane.writes_since(moved_at, "(replica-b)"), "the new leader's service wrote nothing"
        # the restarted sidecar of replica-a follows: nothing written since it came back
        assert plane.writes_since(back_at, "(replica-a)") == [], "the restarted follower's service wrote"

        # -- the promises, read from the audit log of the whole test ---------------------------------------
        events = list(plane.audit_events_since(start))
        twice = {pod: n for pod, n in evictions(events).items() if n > 1}
        assert twice == {}, f"pods evicted more than once: {eviction_log(events, twice)}"
        still_bound = [n for n in takers if n not in reclaimed] + ["a0"]
        for name, phases in phases_written(events, namespace).items():
            if name in still_bound and "Running" in phases:
                after_running = phases[phases.index("Running") :]
                assert "Pending" not in after_running, f"{name}: status went back: {phases}"
        for name in still_bound:
            assert len(bound_nodes(pods(api, namespace, f"app={name}"))) == per_rack, f"{name} lost members"
        assert overcommitted(api) == []
    finally:
        liveness.stop()
        if SCHEDULER_B in plane.procs:
            plane.stop_scheduler(SCHEDULER_B)  # and its lease, so the shared one need not wait for it
            del plane.procs[SCHEDULER_B]
        if SERVICE_B in plane.procs:
            plane.kill(SERVICE_B, signal.SIGTERM)
            del plane.procs[SERVICE_B]
        for name in ("service", "kube-scheduler"):
            if plane.procs[name].poll() is not None:
                plane.respawn(name)
        wait_until(lambda: ready(cluster.service_url), timeout_s=60, what="the shared service's /readyz")
        if replica_b:
            wait_until(
                lambda: holder().startswith("replica-a_"), timeout_s=60, what="the shared scheduler to lead"
            )
