"""A pod the service turned away comes back when the service's answer would change, on the real
control plane (1.36.2, 1.37.2), whatever else kube-scheduler's own filters rejected.

Since kube-scheduler 1.31 a pod in its unschedulable queue is moved back by the events the queueing
hints of the plugins that rejected it accept. Two ways back are tested: the service's nudge of a gang
member that waited for its gang beside a node no pod tolerates (TaintToleration rejects every pod
there), and a retry for a plain pod the service refused only because its pod watch lagged
kube-scheduler's: kube-scheduler saw a pod end and offered its node; refused as unschedulable, with
NodeResourcesFit rejecting every other node, nothing would bring it back before kube-scheduler's
five-minute flush (no nudge follows a plain pod), so the refusal is answered as an error it retries
after its backoff (scheduling/lagging.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conftest import NODE_CPU
from controlplane.start import wait_until
from test_e2e_gangs import bound_nodes, pods
from test_e2e_ledger import PODGROUPS, create_pod, member

from tests.builders import make_kai_podgroup, make_pod

if TYPE_CHECKING:
    from conftest import Cluster
    from controlplane.proxies import ApiProxy

TIMEOUT_S = 45.0
LAG_S = 15.0  # past kube-scheduler's longest backoff (10 s): every retry the end prompts comes too early
TAINT = {"key": "example.com/dedicated", "value": "other-team", "effect": "NoSchedule"}


def parked(api, namespace: str, name: str) -> bool:
    got = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return any(
        c["type"] == "PodScheduled" and c["status"] == "False"
        for c in (got.get("status") or {}).get("conditions") or []
    )


def test_a_member_that_waited_for_its_gang_beside_a_tainted_node_binds_once_the_gang_is_whole(
    cluster: Cluster, namespace: str
) -> None:
    api = cluster.plane.api
    cluster.plane.add_node("tainted-0", labels={}, taints=(TAINT,))
    try:
        api.create(
            PODGROUPS.format(ns=namespace), make_kai_podgroup("trio", namespace=namespace, min_member=3)
        )
        create_pod(api, member(namespace, "trio-0", "trio", cpu="1", labels={"app": "trio"}))
        wait_until(lambda: parked(api, namespace, "trio-0"), timeout_s=TIMEOUT_S, what="trio-0 turned away")
        for i in (1, 2):
            create_pod(api, member(namespace, f"trio-{i}", "trio", cpu="1", labels={"app": "trio"}))
        wait_until(
            lambda: len(bound_nodes(pods(api, namespace, "app=trio"))) == 3,
            timeout_s=TIMEOUT_S,
            what="the whole gang bound",
        )
    finally:
        api.delete("/api/v1/nodes/tainted-0")


def test_a_plain_pod_refused_while_the_service_lagged_binds_once_it_has_caught_up(
    cluster: Cluster, namespace: str, lagging_api: ApiProxy
) -> None:
    api = cluster.plane.api
    whole = {"cpu": str(NODE_CPU), "memory": "256Mi"}
    for i, _ in enumerate(cluster.nodes):  # every node full: kube-scheduler parks `late` asking no one
        create_pod(api, make_pod(f"full-{i}", namespace=namespace, labels={"app": "full"}, **whole))
    wait_until(
        lambda: len(bound_nodes(pods(api, namespace, "app=full"))) == len(cluster.nodes),
        timeout_s=TIMEOUT_S,
        what="every node filled",
    )
    create_pod(api, make_pod("late", namespace=namespace, labels={"app": "late"}, **whole))
    wait_until(lambda: parked(api, namespace, "late"), timeout_s=TIMEOUT_S, what="late parked")
    lagging_api.delay_pod_watches_s(LAG_S)
    api.delete(f"/api/v1/namespaces/{namespace}/pods/full-0")
    wait_until(
        lambda: bound_nodes(pods(api, namespace, "app=late")),
        timeout_s=LAG_S + TIMEOUT_S,
        what="late bound where full-0 was",
    )
