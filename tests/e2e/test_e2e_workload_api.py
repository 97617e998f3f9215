"""The real Workload API on 1.36 and 1.37: seed JobSets with `spec.scheduling` run with real Workload and
PodGroup objects (scheduling.k8s.io/v1alpha2 on 1.36, v1beta1 on 1.37, served with GenericWorkload),
created as the JobSet controller would create them, and pods that join their group with
`spec.schedulingGroup.podGroupName`.

No JobSet controller runs here. The test creates the JobSet, then what the controller would create: the
Workload and PodGroups exactly as `extender.grouping.jobset_scheduling.compile_jobset` derives them (and
`gang-extender podgroups` prints them), owned by the created JobSet, and the child Jobs whose pod
template names its PodGroup. The controller-manager's Job controller makes the pods; kube-scheduler
1.36 or 1.37 and the service bind them.

Shapes 1.36's API server serves, checked against its OpenAPI and by reading objects back (v1alpha2), all
of which `compile_jobset` writes as they are (1.37's v1beta1 differs only where noted):
- PodGroup `spec.podGroupTemplateRef.workload.{workloadName, podGroupTemplateName}`; the v1alpha3 and
  v1beta1 `spec.workloadRef.{workloadName, templateName}` is an unknown field here;
  (1.37: `workloadRef`, and `podGroupTemplateRef` is the unknown one);
- `spec.disruptionMode` is a string, "Pod" or "PodGroup" (not `{all: {}}`), served only with
  WorkloadAwarePreemption (otherwise dropped; a PodGroup's reads back as "Pod") (1.37: the union
  `{single: {}}` / `{all: {}}`, not separately gated, so it is kept);
- a PodGroup must carry its own `schedulingPolicy` (the controller copies the template's); a gang's
  `minCount` must be at least 1;
- an unset template `schedulingConstraints` reads back as an explicit null;
- PodGroup status is `conditions` (metav1.Condition: `lastTransitionTime` required) and
  `resourceClaimStatuses`; a Workload has no status; the service's condition is PodGroupScheduled
  (1.37: PodGroupInitiallyScheduled).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import Api, wait_until
from test_e2e_gangs import (
    RACK,
    bound_nodes,
    create_child_jobs,
    rack_of,
    seed,
    wait_all_bound,
    with_scheduler,
)

from extender.grouping.jobset_scheduling import SCHEDULING_API_VERSIONS, compile_jobset
from extender.grouping.membership import k8s_group
from extender.model.group import Policy

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.k8s(
    min="1.36", reason="the Workload API (scheduling.k8s.io) and spec.schedulingGroup are 1.36's and later"
)

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"


def scheduling_version(api: Api) -> str:
    """The scheduling.k8s.io version to write, as the product decides it: the newest the server serves of
    those compile_jobset writes (v1beta1 on 1.37, v1alpha2 on 1.36)."""
    served = {v["groupVersion"] for v in api.get("/apis/scheduling.k8s.io")["versions"]}
    return next(v for v in SCHEDULING_API_VERSIONS if v in served)


def scheduling_path(api: Api, namespace: str, plural: str) -> str:
    return f"/apis/{scheduling_version(api)}/namespaces/{namespace}/{plural}"


def initially_scheduled_condition(api: Api) -> str:
    return (
        "PodGroupScheduled" if scheduling_version(api).endswith("v1alpha2") else "PodGroupInitiallyScheduled"
    )


class NoLookup:
    """An ObjectLookup with nothing in it: a PodGroup read back must carry its own policy."""

    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        return None


def create_podgroup(
    api: Api, namespace: str, pg: dict[str, Any], *, path: str | None = None
) -> dict[str, Any]:
    """POST a PodGroup (or, to `path`, a CompositePodGroup) as it is. The API server's admission rejects
    it (403, Workload not found) until its informer has seen the Workload created just before: retry
    only that, briefly."""
    path = path or scheduling_path(api, namespace, "podgroups")

    def attempt() -> dict[str, Any] | None:
        status, doc = api.request("POST", path, pg, ok=(200, 201, 403))
        if status != 403:
            return doc
        message = str(doc.get("message") if isinstance(doc, dict) else doc)
        if "Workload" not in message or "not found" not in message:
            raise AssertionError(f"POST {path} -> 403: {message}")
        return None

    name = pg["metadata"]["name"]
    return wait_until(attempt, timeout_s=10, what=f"PodGroup {name} admitted once its Workload is cached")


def create_scheduled_jobset(
    api: Api, namespace: str, name: str, *, cpu: str, constraints: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JobSet, its Workload and PodGroups (in the version the server serves), and its child Jobs
    with pods naming their group; `constraints` becomes the JobSet's `spec.scheduling.schedulingConstraints`.
    Returns {"jobset", "workload", "podgroups" (as read back), "compilation"}."""
    jobset = seed(name)
    jobset["metadata"]["namespace"] = namespace
    if constraints is not None:
        jobset["spec"]["scheduling"]["schedulingConstraints"] = constraints
    for rj in jobset["spec"]["replicatedJobs"]:
        with_scheduler(rj["template"]["spec"]["template"], cpu=cpu)
    created = api.create(JOBSETS.format(ns=namespace), jobset)
    # owned by the created JobSet (its uid)
    compilation = compile_jobset(created, api_version=scheduling_version(api))
    assert compilation.workload is not None, f"{name} has no spec.scheduling"
    made = [api.create(scheduling_path(api, namespace, "workloads"), compilation.workload)]
    made += [create_podgroup(api, namespace, pg) for pg in compilation.podgroups]
    # the controller stamps each Job's pod template with its PodGroup (one group per replicatedJob here)
    for rj in created["spec"]["replicatedJobs"]:
        keys = {compilation.group_of(rj["name"], i) for i in range(int(rj.get("replicas", 1)))}
        assert len(keys) == 1, f"{name}: replicatedJob {rj['name']} spans groups {keys}; use a per-rj seed"
        pod_spec = rj["template"]["spec"]["template"]["spec"]
        pod_spec["schedulingGroup"] = {"podGroupName": next(iter(keys)).split("/", 1)[1]}
    create_child_jobs(api, created)
    return {"jobset": created, "workload": made[0], "podgroups": made[1:], "compilation": compilation}


def read_back(api: Api, namespace: str, plural: str, name: str) -> dict[str, Any]:
    return api.get(scheduling_path(api, namespace, plural) + f"/{name}")


@pytest.mark.parametrize(
    ("seed_file", "cpu", "in_one_rack"),
    [
        ("single-gang.yaml", "500m", False),
        ("gang-training.yaml", "500m", False),
        ("per-rj-independent.yaml", "500m", False),
        # 8 x 1 CPU: more than a node (4), less than a rack (12); the constraint keeps it in one rack
        ("single-gang.yaml", "1", True),
    ],
    ids=[
        "one gang of 8",
        "driver and workers as one gang",
        "a PodGroup per replicatedJob",
        "one gang of 8 with a rack constraint",
    ],
)
def test_seed_jobset_binds_whole_through_real_workload_and_podgroups(
    cluster: Cluster, namespace: str, seed_file: str, cpu: str, in_one_rack: bool
) -> None:
    api = cluster.plane.api
    constraints = {"topology": [{"key": RACK}]} if in_one_rack else None
    made = create_scheduled_jobset(api, namespace, seed_file, cpu=cpu, constraints=constraints)
    compilation = made["compilation"]

    # The API server kept every field the grouping code reads, in the shape it reads.
    workload = read_back(api, namespace, "workloads", made["workload"]["metadata"]["name"])
    assert workload["metadata"]["ownerReferences"][0]["uid"] == made["jobset"]["metadata"]["uid"]

    legacy = scheduling_version(api).endswith("v1alpha2")

    def templates(wl: dict[str, Any]) -> list[dict[str, Any]]:
        # 1.36 serves disruptionMode only with WorkloadAwarePreemption, off here: the server drops it
        # (1.37 keeps it); an unset schedulingConstraints reads back as an explicit null
        return [
            {k: v for k, v in t.items() if not (legacy and k == "disruptionMode") and v is not None}
            for t in wl["spec"]["podGroupTemplates"]
        ]

    assert templates(workload) == templates(compilation.workload)
    expected = {str(g.key): g for g in compilation.groups}
    for pg in made["podgroups"]:
        got = read_back(api, namespace, "podgroups", pg["metadata"]["name"])
        if legacy:
            ref = got["spec"]["podGroupTemplateRef"]["workload"]
            template = ref["podGroupTemplateName"]
        else:
            ref = got["spec"]["workloadRef"]
            template = ref["templateName"]
        assert ref["workloadName"] == workload["metadata"]["name"]
        assert template in {t["name"] for t in workload["spec"]["podGroupTemplates"]}
        group = k8s_group(got, NoLookup())
        want = expected[str(group.key)]
        assert (group.policy, group.min_member, group.topology) == (
            want.policy,
            want.min_member,
            want.topology,
        )
        assert group.policy is Policy.GANG

    # kube-scheduler + the service bind every pod, each gang whole.
    total = sum(
        int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1))
        for rj in made["jobset"]["spec"]["replicatedJobs"]
    )
    items = wait_all_bound(api, namespace, total)
    names = {p["metadata"]["name"]: p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in items}
    assert set(names.values()) == {pg["metadata"]["name"] for pg in made["podgroups"]}, names
    if in_one_rack:
        racks = {rack_of(api, node) for node in bound_nodes(items)}
        assert len(racks) == 1, f"the rack-constrained gang spans racks {sorted(racks)}"


def test_podgroup_status_the_service_writes_is_accepted_by_the_api_server(
    cluster: Cluster, namespace: str
) -> None:
    """Once the gang is bound the service writes PodGroupScheduled=True (v1alpha2) or
    PodGroupInitiallyScheduled=True (v1beta1) on the PodGroup; the API server must accept it
    (metav1.Condition validation) and it must read back."""
    api = cluster.plane.api
    made = create_scheduled_jobset(api, namespace, "single-gang.yaml", cpu="500m")
    wait_all_bound(api, namespace, 8)
    name = made["podgroups"][0]["metadata"]["name"]
    kind = initially_scheduled_condition(api)

    def scheduled() -> list[dict[str, Any]]:
        conds = (read_back(api, namespace, "podgroups", name).get("status") or {}).get("conditions") or []
        return [c for c in conds if c.get("type") == kind and c.get("status") == "True"]

    try:
        wait_until(scheduled, timeout_s=10, what=f"{kind}=True on PodGroup {namespace}/{name}")
    except AssertionError as exc:
        refused = [ln for ln in cluster.plane.log_tail("service", 200).splitlines() if "refused" in ln]
        raise AssertionError(f"{exc}; the service logged: {refused[-1:] or 'nothing refused'}") from None
    assert {c.get("reason") for c in scheduled()} == {"Scheduled"}


def test_a_replicated_job_scaled_to_zero_compiles_to_objects_the_api_server_accepts(
    cluster: Cluster, namespace: str
) -> None:
    """A gang with no pods compiles to no PodGroup: kube-apiserver refuses a gang minCount of 0, so an
    elastic JobSet whose workers are scaled to zero must not produce one."""
    api = cluster.plane.api
    jobset = seed("per-rj-independent.yaml")
    jobset["metadata"]["namespace"] = namespace
    worker = next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == "worker")
    worker["replicas"] = 0
    created = api.create(JOBSETS.format(ns=namespace), jobset)
    compilation = compile_jobset(created, api_version=scheduling_version(api))
    assert compilation.workload is not None
    assert [g.min_member for g in compilation.groups] == [1], "only the launcher's gang remains"
    api.create(scheduling_path(api, namespace, "workloads"), compilation.workload)
    (launcher,) = [create_podgroup(api, namespace, pg) for pg in compilation.podgroups]
    assert launcher["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}

    # The premise, on the real server: the same PodGroup with minCount 0 is refused, naming the field.
    zero = json.loads(json.dumps(compilation.podgroups[0]))
    zero["metadata"]["name"] = "scaled-to-zero"
    zero["spec"]["schedulingPolicy"]["gang"]["minCount"] = 0
    status, doc = api.request("POST", scheduling_path(api, namespace, "podgroups"), zero, ok=(422,))
    assert status == 422 and "minCount" in str(doc.get("message")), doc
