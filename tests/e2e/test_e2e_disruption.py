"""Whole-gang disruption on a real control plane: one member evicted as kube-scheduler's preemption would
evict it, and the service evicts the rest of the gang at once (never leaving it half-running).

The fake nodes have no kubelet: the plane's kubelet stand-in finishes the deletion of evicted pods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import Api, wait_until
from test_e2e_gangs import batch_job, create_jobset, pods, wait_all_bound
from test_e2e_ledger import PODGROUPS, create_pod, member

from extender.model import labels as keys
from tests.builders import make_kai_podgroup

if TYPE_CHECKING:
    from conftest import Cluster

GONE_WITHIN_S = 15.0


def evict(api: Api, legacy: bool, namespace: str, name: str) -> None:
    """What kube-scheduler's preemption (or a drain) does: the Eviction API."""
    version = "policy/v1beta1" if legacy else "policy/v1"
    body = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    api.create(f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)


def live_uids(api: Api, namespace: str, uids: set[str]) -> set[str]:
    """Which of `uids` still exist and are not being deleted."""
    return {
        p["metadata"]["uid"]
        for p in pods(api, namespace)
        if p["metadata"]["uid"] in uids and not p["metadata"].get("deletionTimestamp")
    }


def wait_gone(cluster: Cluster, namespace: str, uids: set[str], what: str) -> None:
    api = cluster.plane.api
    try:
        wait_until(lambda: not live_uids(api, namespace, uids), timeout_s=GONE_WITHIN_S, what=what)
    except AssertionError as exc:
        left = [p["metadata"]["name"] for p in pods(api, namespace) if p["metadata"]["uid"] in uids]
        log = cluster.plane.log_tail("service", 60)
        pytest.fail(f"{exc}; still there: {left}\n--- service log ---\n{log}", pytrace=False)


def told(api: Api, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [
        e for e in api.get(f"/api/v1/namespaces/{namespace}/events")["items"] if e.get("reason") == reason
    ]


def test_a_disruption_all_jobset_losing_a_member_is_evicted_whole(cluster: Cluster, namespace: str) -> None:
    api, plane = cluster.plane.api, cluster.plane
    js = create_jobset(api, namespace, "gang-training.yaml", cpu="500m")  # disruptionMode: {all: {}}
    selector = f"{keys.JOBSET_NAME}={js['metadata']['name']}"
    members = wait_all_bound(api, namespace, 5, selector)
    uids = {p["metadata"]["uid"] for p in members}
    victim = members[0]["metadata"]["name"]
    evict(api, plane.legacy, namespace, victim)
    wait_gone(cluster, namespace, uids, "every member of the disruption-all gang evicted")
    disrupted = told(api, namespace, "GangDisrupted")
    assert {e["involvedObject"]["name"] for e in disrupted} == {p["metadata"]["name"] for p in members} - {
        victim
    }
    assert all(f"member {namespace}/{victim} was" in e["message"] for e in disrupted), disrupted[0]["message"]
    assert all("disruptionMode all evicts the whole gang" in e["message"] for e in disrupted)
    assert any(e["involvedObject"]["kind"] != "Pod" for e in told(api, namespace, "GangEvicted"))


def test_a_kai_gang_taken_below_its_quorum_is_evicted_whole(cluster: Cluster, namespace: str) -> None:
    api, plane = cluster.plane.api, cluster.plane
    api.create(PODGROUPS.format(ns=namespace), make_kai_podgroup("trio", namespace=namespace, min_member=3))
    for i in range(3):
        create_pod(api, member(namespace, f"trio-{i}", "trio", cpu="1", labels={}))
    members = wait_all_bound(api, namespace, 3)
    uids = {p["metadata"]["uid"] for p in members}
    evict(api, plane.legacy, namespace, "trio-1")
    wait_gone(cluster, namespace, uids, "the gang below its quorum evicted whole")
    disrupted = told(api, namespace, "GangDisrupted")
    assert {e["involvedObject"]["name"] for e in disrupted} == {"trio-0", "trio-2"}
    assert all("a gang below its quorum is evicted whole" in e["message"] for e in disrupted)


@pytest.mark.parametrize("propagation", ["Foreground", "Background"])
def test_a_gang_deleted_with_its_job_is_left_to_the_garbage_collector(
    cluster: Cluster, namespace: str, propagation: str
) -> None:
    """The Job deleted in the foreground: the garbage collector deletes its pods while the Job, marked
    for deletion, still makes them a gang. Each deletion takes the gang below its quorum; the service
    evicts none of the others (it once evicted them as they went, a write per member racing the
    collector). Eighty members: the collector deletes at its client's rate (20 a second), so the gang
    is below its quorum with most of it running for a few seconds; six were all marked at once. In
    the background the Job is gone first, and its pods, still running, wait on nothing of it."""
    api = cluster.plane.api
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    api.create(
        jobs, batch_job(namespace, "doomed", pods_n=80, cpu="10m", annotations={keys.BATCH_MIN_MEMBER: "80"})
    )
    wait_all_bound(api, namespace, 80, "job-name=doomed")
    api.request("DELETE", f"{jobs}/doomed", {"propagationPolicy": propagation}, ok=(200, 202))
    wait_until(
        lambda: not pods(api, namespace, "job-name=doomed"),
        timeout_s=GONE_WITHIN_S * 4,
        what="the garbage collector to delete the Job's pods",
    )
    assert told(api, namespace, "GangDisrupted") == [], cluster.plane.log_tail("service", 40)
