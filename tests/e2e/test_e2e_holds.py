"""A hold on the real control plane (1.36.2, 1.37.2), through kube-scheduler calling the service:
every rack of the tier's cluster three-quarters used by a small gang, a gang that needs a whole rack
holds one, a later gang that would fit beside the small one there goes elsewhere, the pods the hold
turns away are told so, and once the small gang on the held rack ends, the large gang binds there
whole.

A CI run once saw the large gang never bind: kube-scheduler asked about it at last (a node freed in
its own cache), the service's entry for it made it younger than the gang that came in between, and
that gang's hold took the held rack's spare room for good (holding.py keeps the earlier age now).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conftest import NODE_CPU, NODES_PER_RACK
from controlplane.start import wait_until
from test_e2e_gangs import bound_nodes, pending_reasons, pods, rack_of
from test_e2e_ledger import gang_view, overcommitted
from test_e2e_queues import bound, gang

if TYPE_CHECKING:
    from conftest import Cluster

TIMEOUT_S = 60.0
RACKS = 4


def test_a_whole_rack_gang_holds_a_rack_others_go_around_it_and_it_binds_once_it_drains(
    cluster: Cluster, namespace: str
) -> None:
    api = cluster.plane.api
    # each small gang: three quarters of a rack (3 pods of 3 cpu in racks of 3 x 4 cpu); tightest fit
    # puts each in a rack of its own, since the quarter left beside one fits no other
    smalls = [f"small-{i}" for i in range(RACKS)]
    for name in smalls:
        gang(api, namespace, name, queue="default-queue", pods_n=NODES_PER_RACK, cpu="3", rack=True)
        bound(api, namespace, name, NODES_PER_RACK)
    rack_of_small = {n: rack_of(api, bound_nodes(pods(api, namespace, f"app={n}"))[0]) for n in smalls}
    assert len(set(rack_of_small.values())) == RACKS, rack_of_small

    gang(api, namespace, "large", queue="default-queue", pods_n=NODES_PER_RACK, cpu=str(NODE_CPU), rack=True)
    seen: list[dict] = [{}]

    def held() -> dict | None:
        seen[0] = gang_view(cluster, namespace, "large")
        return seen[0]["hold"] if (seen[0].get("hold") or {}).get("domain") else None

    try:
        hold = wait_until(held, timeout_s=TIMEOUT_S, what="the large gang to hold a rack")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; GET /debug/gangs/{namespace}/large: {seen[0]}") from None
    held_rack = hold["domain"].split()[-1]
    assert hold["heldNodes"] == NODES_PER_RACK and hold["drainedNodes"] == 0 and hold["rank"] == 1, hold
    assert (
        hold["text"] == f"gang {namespace}/large holds rack {held_rack} (0 of {NODES_PER_RACK} nodes drained)"
    )

    # gangs of three 1-cpu pods fit beside any small gang: never beside the one in the held rack
    for i in range(RACKS - 1):
        gang(api, namespace, f"probe-{i}", queue="default-queue", pods_n=NODES_PER_RACK, cpu="1", rack=True)
        probe = bound(api, namespace, f"probe-{i}", NODES_PER_RACK)
        assert {rack_of(api, n) for n in bound_nodes(probe)} != {held_rack}
    assert bound_nodes(pods(api, namespace, "app=large")) == []

    # one more would fit only in the held rack's spare room: it is turned away, saying why
    gang(api, namespace, "blocked", queue="default-queue", pods_n=NODES_PER_RACK, cpu="1", rack=True)
    said = f"is held for gang {namespace}/large"
    wait_until(
        lambda: any(
            said in m for p in pods(api, namespace, "app=blocked") for m in pending_reasons(api, namespace, p)
        ),
        timeout_s=TIMEOUT_S,
        what=f"a member of the blocked gang told {said!r}",
    )
    assert bound_nodes(pods(api, namespace, "app=blocked")) == []

    # the small gang on the held rack ends: the large gang binds there, whole
    on_held = next(n for n, r in rack_of_small.items() if r == held_rack)
    for i in range(NODES_PER_RACK):
        api.delete(f"/api/v1/namespaces/{namespace}/pods/{on_held}-{i}")
    try:
        large = wait_until(
            lambda: (
                (got := pods(api, namespace, "app=large")) and len(bound_nodes(got)) == NODES_PER_RACK and got
            ),
            timeout_s=TIMEOUT_S,
            what=f"large: {NODES_PER_RACK} pods bound",
        )
    except AssertionError as exc:
        seen = gang_view(cluster, namespace, "large")
        told = {
            p["metadata"]["name"]: pending_reasons(api, namespace, p)[-1:]
            for p in pods(api, namespace, "app=large")
        }
        raise AssertionError(f"{exc}; GET /debug/gangs/{namespace}/large: {seen}; told: {told}") from None
    assert {rack_of(api, n) for n in bound_nodes(large)} == {held_rack}
    assert overcommitted(api) == []
    wait_until(
        lambda: gang_view(cluster, namespace, "large").get("hold") is None,
        timeout_s=TIMEOUT_S,
        what="the large gang's hold to end once it is planned",
    )
