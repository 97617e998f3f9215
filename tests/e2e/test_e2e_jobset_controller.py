"""KAI-style JobSets (no `spec.scheduling`) through the real JobSet controller (v0.12.0, built from its
module at the release jobset/go.mod pins, the one whose CRD the tier applies): the controller makes the
child Jobs, kube-controller-manager's Job controller their pods, the service's podgrouper keeps the KAI
PodGroup `gang-extender podgroups -f` prints for the JobSet, and the service binds every pod whole, inside
the JobSet's block and each replica in one rack.

The controller runs as its install does (namespace jobset-system, its webhook Secret, Service and its
mutating and validating webhooks for JobSets and their pods as its module renders them, failurePolicy
Fail; see controlplane/controllers.py for what is done here in place of a kubelet and kube-proxy).

The other tests create child Jobs "as the JobSet controller would" (test_e2e_gangs.create_child_jobs):
here the real controller's child Jobs are compared with that stand-in, label by label, so what those
tests feed the service is what the controller makes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from controlplane import upstream
from controlplane.controllers import Install, ports, running
from controlplane.start import available_or_skip, jobset_controller_binary, upstream_crds
from test_e2e_gangs import RACK, SEEDS, bound_nodes, rack_of, seed, wait_all_bound, with_scheduler
from test_e2e_podgroups import read_podgroup

from extender.grouping import kai, podgroup_objects
from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.k8s(
    min="1.25",
    reason="JobSet v0.12.0 needs Kubernetes 1.25+ (admissionregistration v1, batch v1 indexed Jobs)",
)

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
BLOCK = "example.com/block"


@pytest.fixture(scope="module")
def jobset_controller(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    plane = cluster.plane
    binary = available_or_skip("the JobSet controller", jobset_controller_binary)
    hooks = upstream.JOBSET.webhooks
    assert hooks is not None
    install = Install(
        name="jobset-controller",
        namespace=hooks.namespace,
        secret="jobset-webhook-server-cert",  # its Configuration's default
        service="jobset-webhook-service",  # its Configuration's default: its certificate's name
        webhooks=tuple(upstream.webhook_configurations(upstream_crds(), upstream.JOBSET)),
    )
    port, probe = ports()
    config = tmp_path_factory.mktemp("jobset") / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {  # config/components/manager/controller_manager_config.yaml, with this machine's ports
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": True},
                "webhook": {"port": port},
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
            }
        )
    )
    argv = [binary, f"--kubeconfig={plane.kubeconfig}", f"--config={config}"]
    with running(plane, install, argv, {}, port, probe):
        yield install.name


def kai_topology_jobset(namespace: str) -> dict[str, Any]:
    """The KAI seed's JobSet (kai-jobset-topology.yaml) on the tier's Topology: levels named by their
    node labels (KAI v0.12.0's Topology has no alias), cpu only."""
    jobset = next(
        d
        for d in yaml.safe_load_all((SEEDS / "kai-jobset-topology.yaml").read_text())
        if d and d["kind"] == "JobSet"
    )
    jobset["metadata"]["namespace"] = namespace
    ann = jobset["metadata"]["annotations"]
    ann[keys.TOPOLOGY], ann[keys.TOPOLOGY_REQUIRED] = "dc", BLOCK
    for rj in jobset["spec"]["replicatedJobs"]:
        meta = rj["template"].get("metadata") or {}
        if keys.TOPOLOGY_REQUIRED in (meta.get("annotations") or {}):
            meta["annotations"][keys.TOPOLOGY], meta["annotations"][keys.TOPOLOGY_REQUIRED] = "dc", RACK
        with_scheduler(rj["template"]["spec"]["template"], cpu="500m")
    return jobset


def stand_in_jobs(created: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The child Jobs test_e2e_gangs.create_child_jobs would create for `created`, by name."""
    made: list[dict[str, Any]] = []

    class Recorder:
        def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
            made.append(copy.deepcopy(obj))
            return obj

    from test_e2e_gangs import create_child_jobs

    create_child_jobs(Recorder(), created)  # type: ignore[arg-type]
    return {j["metadata"]["name"]: j for j in made}


# Labels and annotations the stand-in does not set, and why that does not matter to grouping.
NOT_STANDING_IN = {
    "batch.kubernetes.io/controller-uid",  # set by the Job controller on its pods, not by JobSet
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
    "jobset.sigs.k8s.io/coordinator",  # the controller's DNS coordinator hint (spec.coordinator unset)
    "alpha.jobset.sigs.k8s.io/exclusive-topology",  # exclusive placement, not used by these JobSets
    "alpha.jobset.sigs.k8s.io/node-selector",
}


@pytest.mark.parametrize("seed_name", ["kai-jobset-topology.yaml", "no-sched-baseline.yaml"])
def test_a_kai_style_jobset_runs_through_the_real_controller_and_binds_whole(
    cluster: Cluster, namespace: str, jobset_controller: str, seed_name: str
) -> None:
    api = cluster.plane.api
    if seed_name == "kai-jobset-topology.yaml":
        jobset = kai_topology_jobset(namespace)
    else:
        jobset = seed(seed_name)
        jobset["metadata"]["namespace"] = namespace
        for rj in jobset["spec"]["replicatedJobs"]:
            with_scheduler(rj["template"]["spec"]["template"], cpu="500m")
    created = api.create(JOBSETS.format(ns=namespace), jobset)
    name = created["metadata"]["name"]
    count = sum(
        int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1))
        for rj in created["spec"]["replicatedJobs"]
    )
    try:
        items = wait_all_bound(api, namespace, count, f"{keys.JOBSET_NAME}={name}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.plane.log_tail(jobset_controller, 30)}") from None

    # the controller's child Jobs carry what the stand-in gives the other tests' Jobs
    real = {j["metadata"]["name"]: j for j in api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]}
    stand_in = stand_in_jobs(api.get(f"{JOBSETS.format(ns=namespace)}/{name}"))
    assert sorted(real) == sorted(stand_in)
    for job_name, ours in stand_in.items():
        theirs = real[job_name]
        for part in ("labels", "annotations"):
            got = {k: v for k, v in (theirs["metadata"].get(part) or {}).items() if k not in NOT_STANDING_IN}
            want = {k: v for k, v in (ours["metadata"].get(part) or {}).items() if k not in NOT_STANDING_IN}
            assert got == want, (job_name, part, got, want)
        (owner,) = theirs["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner.get("controller")) == (
            "JobSet",
            created["metadata"]["uid"],
            True,
        )

    (expected,) = podgroup_objects([created])  # what `gang-extender podgroups -f` prints for it
    pg = read_podgroup(api, namespace, kai.derived_name(created))
    assert pg is not None and pg["spec"] == expected["spec"], (pg and pg["spec"], expected["spec"])
    if seed_name == "kai-jobset-topology.yaml":
        nodes = bound_nodes(items)
        blocks = {api.get(f"/api/v1/nodes/{n}")["metadata"]["labels"][BLOCK] for n in nodes}
        assert len(blocks) == 1, f"the JobSet spans blocks {blocks}"
        by_job: dict[str, set[str]] = {}
        for pod in items:
            if pod["metadata"]["labels"].get(keys.REPLICATED_JOB_NAME) == "worker":
                job = pod["metadata"]["labels"][keys.JOB_INDEX]
                by_job.setdefault(job, set()).add(rack_of(api, pod["spec"]["nodeName"]))
        assert all(len(racks) == 1 for racks in by_job.values()), f"a worker replica spans racks: {by_job}"
