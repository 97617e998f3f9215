"""Leader-aware writes (scheduling.leadership): a replica whose kube-scheduler does not hold the Lease
writes nothing on its own, and the moment the Lease is its own it acts, deciding from the cache.

The role is a pure function of the cached Lease and the wall clock (a table); through the service, a
follower sees a disruption-all gang lose a member and a Job that needs a PodGroup, and writes neither
the evictions, the events nor the PodGroup, until the Lease names it."""

from __future__ import annotations

import asyncio
import copy
import datetime
import time
from typing import Any

import pytest

from extender.config import default_settings, validate
from extender.scheduling.leadership import LeaderLease, Role, role
from extender.server.app import METRICS, PODGROUPER, _run_effects
from tests.builders import gang_pod, make_kai_podgroup, make_node, rack_cluster
from tests.scheduling.test_disruption import T0, gang_objects, stamp
from tests.scheduling.test_gang_flow import parked
from tests.scheduling.test_podgrouper import KAI_PG, job, settle

LEASE = LeaderLease("kube-system", "gang-scheduler", "replica-a")
NOW = 1_800_000_000.0


def lease(holder: str | None, *, renewed: float, duration: Any = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = datetime.datetime.fromtimestamp(renewed, datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gang-scheduler", "namespace": "kube-system"},
        "spec": spec,
    }


ROLES = [
    # (case, lease configured, object, expected role, words in why)
    ("no lease configured", None, None, Role.ALONE, "only replica"),
    ("lease not seen yet", LEASE, None, Role.FOLLOWER, "not seen"),
    ("held by us, fresh", LEASE, lease("replica-a_6f1c", renewed=NOW - 2), Role.LEADER, "holds"),
    ("held by another", LEASE, lease("replica-b_77aa", renewed=NOW - 2), Role.FOLLOWER, "replica-b_77aa"),
    (
        "a name we are a prefix of",
        LEASE,
        lease("replica-ab_1", renewed=NOW - 2),
        Role.FOLLOWER,
        "not replica-a",
    ),
    ("held by no one", LEASE, lease(None, renewed=NOW - 2), Role.FOLLOWER, "no one"),
    ("ours but run out", LEASE, lease("replica-a_6f1c", renewed=NOW - 16), Role.FOLLOWER, "ran out"),
    ("ours, last renewal second", LEASE, lease("replica-a_6f1c", renewed=NOW - 15), Role.LEADER, "holds"),
    (
        "no duration",
        LEASE,
        lease("replica-a_6f1c", renewed=NOW, duration=None),
        Role.FOLLOWER,
        "no renewTime",
    ),
    (
        "bool duration",
        LEASE,
        lease("replica-a_6f1c", renewed=NOW, duration=True),
        Role.FOLLOWER,
        "no renewTime",
    ),
]


@pytest.mark.parametrize(("case", "configured", "obj", "expected", "why"), ROLES, ids=[r[0] for r in ROLES])
def test_role(case: str, configured: LeaderLease | None, obj: Any, expected: Role, why: str) -> None:
    got, said = role(configured, obj, NOW)
    assert got is expected, said
    assert why in said
    assert got.acts is (expected is not Role.FOLLOWER)


def test_a_lease_without_a_renew_time_is_not_held() -> None:
    obj = lease("replica-a_1", renewed=NOW)
    del obj["spec"]["renewTime"]
    assert role(LEASE, obj, NOW)[0] is Role.FOLLOWER
    obj["spec"]["renewTime"] = "yesterday"
    assert role(LEASE, obj, NOW)[0] is Role.FOLLOWER


@pytest.mark.parametrize(
    ("lease_flag", "identity", "error"),
    [
        ("gang-scheduler", "", "--leader-lease wants NAMESPACE/NAME"),
        ("kube-system/", "", "--leader-lease wants NAMESPACE/NAME"),
        ("a/b/c", "", "--leader-lease wants NAMESPACE/NAME"),
        ("kube-system/gang-scheduler", "pod_1", "--leader-identity is the pod's name"),
    ],
)
def test_bad_leader_flags_are_refused_with_why(lease_flag: str, identity: str, error: str) -> None:
    settings = default_settings(cluster_leader_lease=lease_flag, cluster_leader_identity=identity)
    assert any(error in e for e in validate(settings)), validate(settings)


def test_good_leader_flags_pass() -> None:
    settings = default_settings(
        cluster_leader_lease="kube-system/gang-scheduler", cluster_leader_identity="p-0"
    )
    assert validate(settings) == []
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        LeaderLease.parse("nope", "p-0")


# ------------------------------------------------------------------ through the service
LEADING = {"cluster_leader_lease": "kube-system/gang-scheduler", "cluster_leader_identity": "replica-a"}


def live_lease(holder: str) -> dict[str, Any]:
    return lease(holder, renewed=time.time())  # the service reads the Lease against the wall clock


async def test_a_follower_writes_nothing_and_acts_the_moment_the_lease_is_its_own(make_service) -> None:
    objects = [
        *(make_node(f"n{i}") for i in range(4)),
        *gang_objects("x", kind="all", size=4, quorum=4),
        job(),
        live_lease("replica-b_9f2e"),
    ]
    svc = await make_service(copy.deepcopy(objects), **LEADING)
    await svc.expire(0)
    gone = svc.pod("x-3")
    svc.cluster.apply({**gone, "metadata": {**gone["metadata"], "deletionTimestamp": stamp(T0 + 10**6)}})
    for _ in range(20):
        await svc.expire(1.0)
    await settle(svc)
    # following: the broken gang keeps running, no PodGroup is made for the Job, nothing is said
    assert [n for n in ("x-0", "x-1", "x-2") if svc.pod(n) is None] == []
    assert svc.cluster.list(*KAI_PG) == []
    assert list(svc.cluster.events) == []
    assert svc.app[METRICS].leader._value.get() == 0

    svc.cluster.apply(live_lease("replica-a_0c41"))  # our kube-scheduler took the Lease
    for _ in range(20):
        await svc.expire(1.0)
    await settle(svc)
    assert [n for n in ("x-0", "x-1", "x-2") if svc.pod(n) is not None] == []  # evicted whole
    assert len(svc.cluster.list(*KAI_PG)) == 1
    assert {e["reason"] for e in svc.cluster.events} >= {"GangDisrupted", "GangEvicted"}
    assert svc.app[METRICS].leader._value.get() == 1

    events = len(svc.cluster.events)
    svc.cluster.apply(live_lease("replica-b_9f2e"))  # and lost it again
    svc.cluster.apply({**job(), "metadata": {**job()["metadata"], "name": "second", "uid": "job-2"}})
    for _ in range(10):
        await svc.expire(1.0)
    await settle(svc)
    assert len(svc.cluster.list(*KAI_PG)) == 1, "a follower made the new Job's PodGroup"
    assert len(svc.cluster.events) == events
    assert svc.app[METRICS].leader._value.get() == 0


async def test_the_only_replica_acts_without_a_lease(make_service) -> None:
    svc = await make_service([make_node("n1"), job()])
    await settle(svc)
    assert len(svc.cluster.list(*KAI_PG)) == 1
    assert svc.app[METRICS].leader._value.get() == 1


async def test_a_new_leader_brings_parked_gangs_back_as_a_started_service_does(make_service) -> None:
    """While it followed, the other replica's kube-scheduler had the gangs; leading now, its own queue
    holds them parked: the service nudges them once, as after a start, and not while it follows."""
    objs = [*rack_cluster(), make_kai_podgroup("ready", min_member=2), live_lease("replica-b_9f2e")]
    objs += [parked(gang_pod(f"ready-{i}", "ready")) for i in range(2)]
    svc = await make_service(objs, **LEADING)

    def nudge(name: str) -> str:
        return svc.pod(name)["metadata"].get("annotations", {}).get("gang-extender.io/nudge", "")

    await svc.expire(0.1)
    await asyncio.sleep(0.05)
    assert nudge("ready-0") == nudge("ready-1") == ""
    svc.cluster.apply(live_lease("replica-a_0c41"))
    await svc.expire(0.1)
    await asyncio.sleep(0.05)
    assert all(nudge(f"ready-{i}").startswith("default/ready:restart") for i in range(2))


async def test_a_podgroup_write_dropped_when_the_lease_moved_is_made_once_the_lease_is_back(
    make_service,
) -> None:
    """The podgrouper decided a create, and the Lease moved before it ran: the write is dropped, and the
    replica that leads again makes it (it looks at every workload again, as after a start)."""
    svc = await make_service([make_node("n1"), live_lease("replica-a_0c41")], **LEADING)
    await settle(svc)
    svc.cluster.apply(job())
    effects = svc.app[PODGROUPER].plan()  # decided while leading
    assert [e.kind for e in effects] == ["podgroup-create"]
    svc.cluster.apply(live_lease("replica-b_9f2e"))
    await _run_effects(svc.app, effects)  # ran after the Lease moved: dropped
    await settle(svc)
    assert svc.cluster.list(*KAI_PG) == []
    svc.cluster.apply(live_lease("replica-a_0c41"))
    await settle(svc)
    assert len(svc.cluster.list(*KAI_PG)) == 1
