"""Jobs on the Workload API, through 1.37.2's real Job controller (kube-controller-manager with
WorkloadWithJob, as the JobSet seed's cluster runs it): the controller makes a v1beta1 Workload and
PodGroup for each new root Job and names the PodGroup on every pod it creates; the service groups the
pods as the Job asked.

- `spec.scheduling` with a gang and a rack constraint: the gang waits whole while it fits no rack, and
  when `gang.minCount` is lowered on the Job (the one mutable field) the controller patches its PodGroup
  in place and the service binds the smaller gang, in one rack, and marks the PodGroup
  PodGroupInitiallyScheduled; no KAI PodGroup is derived for such a Job.
- A Job that asks for nothing gets the controller's basic PodGroup; a KAI-annotated one keeps its KAI
  gang (`kai.scheduler/batch-min-member`, a required rack) and its derived KAI PodGroup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import Api, wait_until
from test_e2e_gangs import RACK, bound_nodes, pending_reasons, pods, rack_of, wait_all_bound, with_scheduler
from test_e2e_podgroups import read_podgroup

from extender.grouping import kai
from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.k8s(
    min="1.37", reason="Job.spec.scheduling and the Job controller's PodGroups (WorkloadWithJob) are 1.37's"
)

JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
SETTLE_S = 10.0  # long enough for kube-scheduler to have tried every pod several times


def job(name: str, namespace: str, *, count: int, cpu: str, **spec: Any) -> dict[str, Any]:
    template = with_scheduler({"spec": {"containers": [{"name": "main"}], "restartPolicy": "Never"}}, cpu=cpu)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": count,
            "completions": count,
            "completionMode": "Indexed",
            "template": template,
            **spec,
        },
    }


def controller_podgroup(api: Api, namespace: str, job_name: str) -> dict[str, Any]:
    """The PodGroup the Job controller made for the Job (its controller ownerReference)."""

    def find() -> dict[str, Any] | None:
        for pg in api.get(PODGROUPS.format(ns=namespace))["items"]:
            for ref in pg["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and (ref["kind"], ref["name"]) == ("Job", job_name):
                    return pg
        return None

    return wait_until(
        find, timeout_s=30, what=f"the Job controller's PodGroup for Job {namespace}/{job_name}"
    )


def all_name(items: list[dict[str, Any]], podgroup: str) -> bool:
    return bool(items) and all(
        (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == podgroup for p in items
    )


def test_a_gang_job_waits_whole_then_binds_in_one_rack_when_its_min_count_is_lowered(
    cluster: Cluster, namespace: str
) -> None:
    api = cluster.plane.api
    # four pods of a whole node each: a rack has three nodes, so a gang of four fits no rack
    scheduling = {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
        "disruptionMode": {"all": {}},
    }
    created = api.create(
        JOBS.format(ns=namespace), job("train", namespace, count=4, cpu="4", scheduling=scheduling)
    )
    pg = controller_podgroup(api, namespace, "train")
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}, pg["spec"]
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}, pg["spec"]
    name = pg["metadata"]["name"]
    items = wait_until(
        lambda: (lambda got: got if len(got) == 4 and all_name(got, name) else None)(pods(api, namespace)),
        timeout_s=30,
        what="the Job's four pods, each naming the controller's PodGroup",
    )
    wait_until(
        lambda: all(any(name in r for r in pending_reasons(api, namespace, p)) for p in items),
        timeout_s=30,
        what=f"every pod to say why gang {name} waits",
    )
    assert bound_nodes(pods(api, namespace)) == [], "a gang of four that fits no rack binds nothing"
    assert read_podgroup(api, namespace, kai.derived_name(created)) is None, "no KAI PodGroup for this Job"

    api.patch(
        f"{JOBS.format(ns=namespace)}/train",
        {"spec": {"scheduling": {"schedulingPolicy": {"gang": {"minCount": 3}}}}},
    )
    wait_until(
        lambda: (
            api.get(f"{PODGROUPS.format(ns=namespace)}/{name}")["spec"]["schedulingPolicy"]["gang"][
                "minCount"
            ]
            == 3
        ),
        timeout_s=30,
        what="the Job controller to patch its PodGroup's minCount to 3",
    )
    try:
        bound = wait_until(
            lambda: (lambda got: got if len(got) >= 3 else None)(bound_nodes(pods(api, namespace))),
            timeout_s=60,
            what="the gang of three to bind",
        )
    except AssertionError as exc:
        said = {p["metadata"]["name"]: pending_reasons(api, namespace, p)[-1:] for p in pods(api, namespace)}
        raise AssertionError(f"{exc}; the pods say {said}") from None
    assert len({rack_of(api, n) for n in bound}) == 1, f"the gang spans racks: {bound}"
    assert len(bound_nodes(pods(api, namespace))) == 3, "the fourth pod fits no node of the gang's rack"

    def scheduled() -> list[dict[str, Any]]:
        conds = (api.get(f"{PODGROUPS.format(ns=namespace)}/{name}").get("status") or {}).get(
            "conditions"
        ) or []
        return [c for c in conds if (c["type"], c["status"]) == ("PodGroupInitiallyScheduled", "True")]

    wait_until(scheduled, timeout_s=30, what=f"PodGroupInitiallyScheduled=True on {name}")


def test_a_kai_job_keeps_its_gang_beside_the_job_controllers_basic_podgroup(
    cluster: Cluster, namespace: str
) -> None:
    api = cluster.plane.api
    kai_job = job("kai", namespace, count=4, cpu="4")
    kai_job["metadata"]["annotations"] = {
        keys.BATCH_MIN_MEMBER: "4",
        keys.TOPOLOGY: "dc",
        keys.TOPOLOGY_REQUIRED: RACK,
    }
    created = api.create(JOBS.format(ns=namespace), kai_job)
    pg = controller_podgroup(api, namespace, "kai")
    assert pg["spec"]["schedulingPolicy"] == {"basic": {}}, pg["spec"]
    items = wait_until(
        lambda: (lambda got: got if len(got) == 4 and all_name(got, pg["metadata"]["name"]) else None)(
            pods(api, namespace)
        ),
        timeout_s=30,
        what="the Job's four pods, each naming the controller's basic PodGroup",
    )
    ours = wait_until(
        lambda: read_podgroup(api, namespace, kai.derived_name(created)),
        timeout_s=30,
        what="the KAI PodGroup derived for the Job",
    )
    assert ours["spec"]["minMember"] == 4, ours["spec"]
    # pod by pod, the basic PodGroup would let all four bind across racks; KAI's gang of four needs a rack
    wait_until(
        lambda: all(any("rack" in r for r in pending_reasons(api, namespace, p)) for p in items),
        timeout_s=30,
        what="every pod to say the KAI gang fits no rack",
    )
    assert bound_nodes(pods(api, namespace)) == []

    # a fitting KAI gang beside it binds whole, in one rack
    fits = job("kai-fits", namespace, count=3, cpu="4")
    fits["metadata"]["annotations"] = {
        keys.BATCH_MIN_MEMBER: "3",
        keys.TOPOLOGY: "dc",
        keys.TOPOLOGY_REQUIRED: RACK,
    }
    api.create(JOBS.format(ns=namespace), fits)
    controller_podgroup(api, namespace, "kai-fits")
    got = wait_all_bound(api, namespace, 3, "job-name=kai-fits")
    assert len({rack_of(api, n) for n in bound_nodes(got)}) == 1
