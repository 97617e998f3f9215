"""KAI queues on the real control plane (1.20.2, then 1.36.2): a queue at its limit holds a gang with
the numbers and lets it go when usage drops; a queue below its fair share reclaims a whole gang of a
queue over its own, never part of one; each Queue's status says what it uses.

The Queue objects of a test are deleted after it, and the test waits until the service has seen them
go: while any Queue exists the service enforces queues on every pod it schedules, which the other
tests of the shared plane do not expect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conftest import QUEUES, debug_queues
from controlplane.start import Api, wait_until
from test_e2e_gangs import bound_nodes, pending_reasons, pods, rack_of
from test_e2e_ledger import PODGROUPS, RACK_CONSTRAINT, create_pod, member, overcommitted

from tests.builders import make_kai_podgroup

if TYPE_CHECKING:
    from conftest import Cluster

TIMEOUT_S = 60.0


def gang(
    api: Api, namespace: str, name: str, *, queue: str, pods_n: int, cpu: str, rack: bool = False
) -> None:
    """A KAI PodGroup of `pods_n` members naming `queue` (spec.queue, authoritative)."""
    pg = make_kai_podgroup(
        name, namespace=namespace, min_member=pods_n, queue=queue, topology=RACK_CONSTRAINT if rack else None
    )
    api.create(PODGROUPS.format(ns=namespace), pg)
    for i in range(pods_n):
        create_pod(api, member(namespace, f"{name}-{i}", name, cpu=cpu, labels={"app": name}))


def bound(api: Api, namespace: str, name: str, count: int) -> list[dict[str, Any]]:
    return wait_until(
        lambda: (got := pods(api, namespace, f"app={name}")) and len(bound_nodes(got)) == count and got,
        timeout_s=TIMEOUT_S,
        what=f"{name}: {count} pods bound",
    )


def test_a_gang_past_its_queue_limit_waits_with_the_numbers_and_binds_when_usage_drops(
    cluster: Cluster, namespace: str, make_queues: Callable[..., None]
) -> None:
    api = cluster.plane.api
    make_queues(**{"team-a": {"cpu": {"quota": 2000, "limit": 4000}}})
    gang(api, namespace, "first", queue="team-a", pods_n=2, cpu="1")
    bound(api, namespace, "first", 2)
    gang(api, namespace, "second", queue="team-a", pods_n=3, cpu="1")
    want = "queue team-a: cpu limit 4000m, in use 2000m, gang needs 3000m"

    def told() -> bool:
        waiting = pods(api, namespace, "app=second")
        return len(waiting) == 3 and all(
            any(want in m for m in pending_reasons(api, namespace, p)) for p in waiting
        )

    wait_until(told, timeout_s=TIMEOUT_S, what=f"every member of the second gang told {want!r}")
    assert bound_nodes(pods(api, namespace, "app=second")) == [], "a gang past its queue's limit bound"
    (team_a,) = debug_queues(cluster)
    assert team_a["resources"]["cpu"]["allocated"] == 2000 and team_a["resources"]["cpu"]["requested"] == 5000
    assert list(team_a["held"]) == [f"{namespace}/second"], team_a["held"]
    # the status KAI defines says the same (written at most every 5 s)
    wait_until(
        lambda: (api.get(f"{QUEUES}/team-a").get("status") or {}).get("allocated", {}).get("cpu") == "2000m",
        timeout_s=TIMEOUT_S,
        what="team-a's status.allocated.cpu to say 2000m",
    )

    for i in range(2):
        api.delete(f"/api/v1/namespaces/{namespace}/pods/first-{i}")
    bound(api, namespace, "second", 3)
    assert overcommitted(api) == []


def two_teams(cluster: Cluster, make_queues: Callable[..., None]) -> tuple[list[str], int, int]:
    """Queues team-a and team-b, each with half the cluster's cpu as its quota and no limit; the racks,
    nodes per rack and cpus per node their gangs are sized by."""
    api = cluster.plane.api
    racks = sorted({rack_of(api, n) for n in cluster.nodes})
    per_rack = len(cluster.nodes) // len(racks)
    node_cpu = int(api.get(f"/api/v1/nodes/{cluster.nodes[0]}")["status"]["allocatable"]["cpu"])
    half = len(cluster.nodes) * node_cpu * 1000 // 2
    unlimited = {"limit": -1, "overQuotaWeight": 1}
    make_queues(
        **{"team-a": {"cpu": {"quota": half, **unlimited}}, "team-b": {"cpu": {"quota": half, **unlimited}}}
    )
    return racks, per_rack, node_cpu


def test_a_queue_below_its_fair_share_reclaims_one_whole_gang_of_a_queue_over_its_own(
    cluster: Cluster, namespace: str, make_queues: Callable[..., None]
) -> None:
    api = cluster.plane.api
    racks, per_rack, node_cpu = two_teams(cluster, make_queues)
    # team-b, alone, takes the whole cluster: one rack gang filling each rack
    takers = [f"b{i}" for i in range(len(racks))]
    for name in takers:
        gang(api, namespace, name, queue="team-b", pods_n=per_rack, cpu=str(node_cpu), rack=True)
    for name in takers:
        bound(api, namespace, name, per_rack)
    # team-a asks for one rack: within its quota, it reclaims one of team-b's gangs, whole
    gang(api, namespace, "a0", queue="team-a", pods_n=per_rack, cpu=str(node_cpu), rack=True)
    landed = {rack_of(api, n) for n in bound_nodes(bound(api, namespace, "a0", per_rack))}
    assert len(landed) == 1
    left = {name: pods(api, namespace, f"app={name}") for name in takers}
    gone = [name for name, items in left.items() if not items]
    assert len(gone) == 1, {n: len(items) for n, items in left.items()}
    for name, items in left.items():
        if name not in gone:
            assert len(bound_nodes(items)) == per_rack, f"{name} was partly evicted: {len(items)} pods left"
    (team_a,) = [q for q in debug_queues(cluster) if q["queue"] == "team-a"]
    (team_b,) = [q for q in debug_queues(cluster) if q["queue"] == "team-b"]
    half = len(cluster.nodes) * node_cpu * 1000 // 2
    assert team_b["resources"]["cpu"]["allocated"] >= half, "a reclaim took team-b below its quota"
    assert team_a["resources"]["cpu"]["allocated"] == per_rack * node_cpu * 1000
    assert overcommitted(api) == []
