"""Derived gangs visible in kubectl: the service's podgrouper keeps a KAI PodGroup for a seed Job,
JobSet and PyTorchJob on a real API server (1.20.2, then 1.36.2), with the spec `podgroups -f`
prints, writes the gang's status on it in KAI's schema (the test CRD prunes anything else), never
writes over someone else's PodGroup of that name, and the garbage collector deletes it with its
workload.

No JobSet controller or training operator runs: the tests create child Jobs and PyTorchJob pods as
those controllers would (the controller-manager's Job controller makes the Jobs' pods).
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import Api, wait_until
from controlplane.upstream import kai_v016_status_served
from test_e2e_gangs import create_child_jobs, pods, seed, wait_all_bound, with_scheduler

from extender.grouping import kai, podgroup_objects
from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

PODGROUPS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
GC_TIMEOUT_S = 120.0  # the garbage collector learns of CRD kinds at its discovery resync (30 s)


def cpu_only(template: dict[str, Any], *, cpu: str) -> dict[str, Any]:
    """A seed pod template on gang-scheduler asking only for cpu (the e2e nodes have no GPUs)."""
    for c in template["spec"]["containers"]:
        c.pop("resources", None)
    return with_scheduler(template, cpu=cpu)


def create_job(api: Api, namespace: str) -> tuple[dict[str, Any], str, int]:
    job = seed("batch-job-min-member.yaml")  # 6 pods, batch-min-member 2
    job["metadata"]["namespace"] = namespace
    cpu_only(job["spec"]["template"], cpu="250m")
    created = api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    return created, f"job-name={job['metadata']['name']}", 6


def create_jobset(api: Api, namespace: str) -> tuple[dict[str, Any], str, int]:
    jobset = seed("no-sched-baseline.yaml")  # 2 replicas of 1 pod, no spec.scheduling
    jobset["metadata"]["namespace"] = namespace
    for rj in jobset["spec"]["replicatedJobs"]:
        cpu_only(rj["template"]["spec"]["template"], cpu="250m")
    created = api.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets", jobset)
    create_child_jobs(api, created)
    return created, f"{keys.JOBSET_NAME}={jobset['metadata']['name']}", 2


def create_pytorchjob(api: Api, namespace: str) -> tuple[dict[str, Any], str, int]:
    job = seed("pytorch-job.yaml")  # a master and two workers
    job["metadata"]["namespace"] = namespace
    specs = job["spec"]["pytorchReplicaSpecs"]
    for rs in specs.values():
        cpu_only(rs["template"], cpu="250m")
    created = api.create(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", job)
    name = created["metadata"]["name"]
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": name,
        "uid": created["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    count = 0
    # the training operator's pods: <job>-<type>-<index>, with its labels, owned by the PyTorchJob
    for role, rs in specs.items():
        for i in range(int(rs.get("replicas", 1))):
            pod = copy.deepcopy(rs["template"])
            pod.update(apiVersion="v1", kind="Pod")
            pod["metadata"] = {
                "name": f"{name}-{role.lower()}-{i}",
                "namespace": namespace,
                "labels": {
                    keys.PYTORCH_JOB_NAME: name,
                    keys.PYTORCH_REPLICA_TYPE: role.lower(),
                    keys.PYTORCH_REPLICA_INDEX: str(i),
                },
                "ownerReferences": [owner],
            }
            api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
            count += 1
    return created, f"{keys.PYTORCH_JOB_NAME}={name}", count


WORKLOADS = {
    "Job": (create_job, "/apis/batch/v1/namespaces/{ns}/jobs/{name}"),
    "JobSet": (create_jobset, "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}"),
    "PyTorchJob": (create_pytorchjob, "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{name}"),
}


def read_podgroup(api: Api, namespace: str, name: str) -> dict[str, Any] | None:
    status, doc = api.request("GET", f"{PODGROUPS.format(ns=namespace)}/{name}", ok=(200, 404))
    return doc if status == 200 else None


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_a_derived_podgroup_appears_gets_status_and_goes_with_its_workload(
    cluster: Cluster, namespace: str, kind: str
) -> None:
    api = cluster.plane.api
    create, object_path = WORKLOADS[kind]
    workload, selector, pod_count = create(api, namespace)
    (expected,) = podgroup_objects([workload])  # what `gang-extender podgroups -f` prints for it
    name = kai.derived_name(workload)
    assert expected["metadata"]["name"] == name

    pg = wait_until(lambda: read_podgroup(api, namespace, name), timeout_s=30, what=f"PodGroup {name}")
    assert pg["spec"] == expected["spec"]
    assert pg["metadata"]["ownerReferences"] == expected["metadata"]["ownerReferences"]
    assert pg["metadata"]["labels"] == {keys.MANAGED_BY: keys.MANAGER}
    quorum = expected["spec"].get("minMember") or 2

    wait_all_bound(api, namespace, pod_count, selector)

    def running() -> dict[str, Any] | None:
        # the counts follow members bound after the quorum (the controller may create them late)
        status = (read_podgroup(api, namespace, name) or {}).get("status") or {}
        counted = status.get("running", 0) + status.get("pending", 0) == pod_count
        return status if status.get("phase") == "Running" and counted else None

    try:
        status = wait_until(running, timeout_s=30, what=f"PodGroup {name} phase Running, every pod counted")
    except AssertionError as exc:
        writes = "\n".join(cluster.plane.status_writes("podgroups", name))
        raise AssertionError(f"{exc}\nstatus writes (audit log):\n{writes}") from None
    # the API server kept every field (the CRD prunes what KAI's schema lacks): counts of this gang
    assert status["running"] >= quorum and status["running"] + status["pending"] == pod_count, status
    assert not status.get("schedulingConditions"), status

    api.request(
        "DELETE",
        object_path.format(ns=namespace, name=workload["metadata"]["name"]),
        {"propagationPolicy": "Background"},
        ok=(200, 202),
    )
    wait_until(
        lambda: read_podgroup(api, namespace, name) is None,
        timeout_s=GC_TIMEOUT_S,
        what=f"the garbage collector to delete PodGroup {name} with its {kind}",
    )


def test_someone_elses_podgroup_of_the_same_name_is_never_written(cluster: Cluster, namespace: str) -> None:
    api = cluster.plane.api
    job = seed("batch-job-min-member.yaml")
    job["metadata"]["namespace"] = namespace
    job["metadata"]["annotations"][keys.SKIP_PODGROUPER] = "true"  # so theirs can come first
    job["spec"]["parallelism"] = job["spec"]["completions"] = 2
    cpu_only(job["spec"]["template"], cpu="250m")
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    created = api.create(jobs, job)
    name = kai.derived_name(created)
    theirs = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 2, "queue": "someone-elses"},
    }
    before = api.create(PODGROUPS.format(ns=namespace), theirs)
    api.patch(
        f"{jobs}/{job['metadata']['name']}", {"metadata": {"annotations": {keys.SKIP_PODGROUPER: None}}}
    )

    wait_until(
        lambda: (
            f"PodGroup {namespace}/{name}" in cluster.plane.log_tail("service", 400)
            and "not created by gang-extender" in cluster.plane.log_tail("service", 400)
        ),
        timeout_s=30,
        what="the service to say it leaves the foreign PodGroup alone",
    )
    # the pods still form their derived gang (its key is that name) and bind
    wait_all_bound(api, namespace, 2, f"job-name={job['metadata']['name']}")
    events = f"/api/v1/namespaces/{namespace}/events"
    wait_until(
        lambda: [e for e in api.get(events)["items"] if e.get("reason") == "GangBound"],
        timeout_s=30,
        what="the GangBound event, written with the gang's status",
    )
    # the status write would follow the event within milliseconds: it must not come
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        now = read_podgroup(api, namespace, name)
        assert now is not None and now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        time.sleep(0.2)
    assert "labels" not in now["metadata"] and now["spec"] == theirs["spec"] and not now.get("status")
    assert len(pods(api, namespace)) == 2


def test_ours_is_deleted_when_its_workload_opts_out_of_the_podgrouper(
    cluster: Cluster, namespace: str
) -> None:
    """The one deletion the service makes itself: the workload stays, its derived gang does not."""
    api = cluster.plane.api
    workload, _, _ = create_job(api, namespace)
    name = kai.derived_name(workload)
    wait_until(lambda: read_podgroup(api, namespace, name), timeout_s=30, what=f"PodGroup {name}")
    job_path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{workload['metadata']['name']}"
    api.patch(job_path, {"metadata": {"annotations": {keys.SKIP_PODGROUPER: "true"}}})
    wait_until(
        lambda: read_podgroup(api, namespace, name) is None,
        timeout_s=30,
        what=f"the service to delete PodGroup {name} of a workload marked {keys.SKIP_PODGROUPER}",
    )
    assert api.get(job_path)["metadata"]["uid"] == workload["metadata"]["uid"]


def test_on_kai_v016s_schema_a_waiting_gang_says_why_in_scheduling_conditions(
    cluster: Cluster, namespace: str
) -> None:
    """KAI v0.16 removed `phase`, `running` and `pending` from its PodGroup CRD. On that schema the
    service's status writes keep to what is served: a waiting gang's reason lands in
    `schedulingConditions`, cleared once the gang is bound; no write is refused, and once the API
    server has pruned `phase` from the first write no later one carries it."""
    api = cluster.plane.api
    path = PODGROUPS.format(ns=namespace)
    name = "v016-trio"

    def member(i: int) -> dict[str, Any]:
        pod = with_scheduler({"spec": {"containers": [{"name": "main"}]}}, cpu="1")
        pod.update(apiVersion="v1", kind="Pod")
        pod["metadata"] = {
            "name": f"{name}-{i}",
            "namespace": namespace,
            "labels": {"app": name},
            "annotations": {keys.POD_GROUP_NAME: name},
        }
        return pod

    def conditions() -> list[dict[str, Any]]:
        return ((read_podgroup(api, namespace, name) or {}).get("status") or {}).get(
            "schedulingConditions"
        ) or []

    try:
        with kai_v016_status_served(api, namespace):
            group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "spec": {"minMember": 3}}
            api.create(path, {**group, "metadata": {"name": name, "namespace": namespace}})
            for i in range(2):
                api.create(f"/api/v1/namespaces/{namespace}/pods", member(i))
            (waiting,) = wait_until(
                conditions, timeout_s=30, what=f"the reason {name} waits, on its PodGroup"
            )
            assert waiting["type"] == "UnschedulableOnNodePool" and waiting["message"], waiting
            api.create(f"/api/v1/namespaces/{namespace}/pods", member(2))
            wait_all_bound(api, namespace, 3, f"app={name}")
            wait_until(lambda: not conditions(), timeout_s=30, what=f"{name}'s schedulingConditions cleared")
            status = read_podgroup(api, namespace, name)["status"]
            assert not set(status) & {"phase", "running", "pending"}, status
            writes = cluster.plane.status_writes("podgroups", name)
            assert writes and all(w.split()[1] == "200" for w in writes), writes
            assert sum('"phase"' in w for w in writes) <= 1, writes
    finally:
        cluster.plane.restart_service()  # it would leave `phase` out of writes for a while yet
