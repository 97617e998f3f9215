"""The KAI seed's PyTorchJob through the real Kubeflow training-operator (its PyTorchJob controller,
built from the module at the release training-operator/go.mod pins, the one whose CRD the tier applies):
the operator makes the master and worker pods and their Services, the service's podgrouper keeps the
KAI PodGroup `gang-extender podgroups -f` prints for the job, and the service binds the three pods whole.

The operator runs as its Deployment would, but outside a pod: in its namespace (`MY_POD_NAMESPACE`) with
its webhook Secret and its ValidatingWebhookConfiguration (as the module's manifests/base/webhook has
them: its Service, paths, rules and failurePolicy Fail), where its certificate rotator fills both. What
a kubelet and kube-proxy would do is done here instead: the certificates the rotator writes into the
Secret are put where its webhook server reads them (the Secret's volume), and the Service's endpoint
is this machine's address at the webhook server's port (route_service); the API server calls the
operator's validation for every PyTorchJob and checks its certificate as in a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from controlplane import upstream
from controlplane.controllers import Install, ports, running
from controlplane.start import available_or_skip, training_operator_binary, upstream_crds, wait_until
from test_e2e_gangs import seed, wait_all_bound
from test_e2e_podgroups import cpu_only, read_podgroup

from extender.grouping import kai, podgroup_objects
from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.k8s(
    min="1.25", reason="training-operator v1.9.3 needs admissionregistration v1 and 1.25+"
)

JOB_NAME_LABEL = "training.kubeflow.org/job-name"


@pytest.fixture(scope="module")
def training_operator(cluster: Cluster) -> Iterator[str]:
    """The operator, as its standalone install runs it (namespace kubeflow, its Secret, Service and
    validating webhooks, failurePolicy Fail); yields its process name."""
    plane = cluster.plane
    binary = available_or_skip("the Kubeflow training-operator", training_operator_binary)
    install = Install(
        name="training-operator",
        namespace=upstream.TRAINING_OPERATOR.webhooks.namespace,  # type: ignore[union-attr]
        secret="training-operator-webhook-cert",  # --webhook-secret-name's default
        service="training-operator",  # --webhook-service-name's default: its certificate's name
        webhooks=tuple(upstream.webhook_configurations(upstream_crds(), upstream.TRAINING_OPERATOR)),
    )
    port, probe = ports()
    argv = [
        binary,
        f"--kubeconfig={plane.kubeconfig}",
        "--enable-scheme=pytorchjob",
        f"--webhook-server-port={port}",
        "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        "--leader-elect=false",
    ]
    with running(plane, install, argv, {**os.environ, "MY_POD_NAMESPACE": install.namespace}, port, probe):
        yield install.name


def test_the_seed_pytorchjob_runs_through_the_real_operator_and_binds_whole(
    cluster: Cluster, namespace: str, training_operator: str
) -> None:
    api = cluster.plane.api
    job = seed("pytorch-job.yaml")  # a master and two workers
    job["metadata"]["namespace"] = namespace
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        cpu_only(rs["template"], cpu="250m")
    created = api.create(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", job)
    name = created["metadata"]["name"]
    selector = f"{JOB_NAME_LABEL}={name}"
    try:
        items = wait_all_bound(api, namespace, 3, selector)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.plane.log_tail(training_operator, 30)}") from None
    # the operator's pods: its names and labels, each owned by the PyTorchJob
    assert sorted(p["metadata"]["name"] for p in items) == [
        f"{name}-master-0",
        f"{name}-worker-0",
        f"{name}-worker-1",
    ]
    for pod in items:
        (owner,) = [r for r in pod["metadata"]["ownerReferences"] if r.get("controller")]
        assert (owner["kind"], owner["uid"]) == ("PyTorchJob", created["metadata"]["uid"])
        assert pod["metadata"]["labels"].get(keys.PYTORCH_REPLICA_TYPE) in ("master", "worker")
    (expected,) = podgroup_objects([created])  # what `gang-extender podgroups -f` prints for it
    pg = wait_until(
        lambda: read_podgroup(api, namespace, kai.derived_name(created)),
        timeout_s=30,
        what="its KAI PodGroup",
    )
    assert pg["spec"] == expected["spec"], (pg["spec"], expected["spec"])
    services = api.get(f"/api/v1/namespaces/{namespace}/services")["items"]
    assert {s["metadata"]["name"] for s in services} >= {f"{name}-master-0"}, "the operator made its Services"
