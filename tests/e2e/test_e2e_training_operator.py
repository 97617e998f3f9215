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

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import available_or_skip, free_port, training_operator_binary, wait_until
from test_e2e_gangs import seed, wait_all_bound
from test_e2e_podgroups import cpu_only, read_podgroup

from extender.grouping import kai, podgroup_objects
from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

pytestmark = pytest.mark.k8s(
    min="1.25", reason="training-operator v1.9.3 needs admissionregistration v1 and 1.25+"
)

TRAINING_OPERATOR = "training-operator"
NAMESPACE = "kubeflow"  # its install's namespace (manifests/overlays/standalone)
SECRET = "training-operator-webhook-cert"  # --webhook-secret-name's default
SERVICE = "training-operator"  # --webhook-service-name's default: its certificate is for this Service
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"  # pkg/cert: the one the rotator fills
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert: where its webhook server reads them
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def webhook_configuration() -> dict[str, Any]:
    """The module's validating webhooks for the kinds it serves (manifests/base/webhook)."""
    kinds = ("jaxjob", "paddlejob", "pytorchjob", "tfjob", "xgboostjob")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": f"validator.{kind}.training-operator.kubeflow.org",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "service": {
                        "name": SERVICE,
                        "namespace": NAMESPACE,
                        "path": f"/validate-kubeflow-org-v1-{kind}",
                    }
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "rules": [
                    {
                        "apiGroups": ["kubeflow.org"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [f"{kind}s"],
                    }
                ],
            }
            for kind in kinds
        ],
    }


@pytest.fixture(scope="module")
def training_operator(cluster: Cluster) -> Iterator[None]:
    plane = cluster.plane
    api = plane.api
    binary = available_or_skip("the Kubeflow training-operator", training_operator_binary)
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        exist_ok=True,
    )
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}
    api.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", secret, exist_ok=True)
    port = free_port()
    hooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    api.delete(f"{hooks}/{WEBHOOK_CONFIGURATION}")
    api.create(hooks, webhook_configuration())
    plane.route_service(NAMESPACE, SERVICE, port)
    shutil.rmtree(CERT_DIR, ignore_errors=True)
    CERT_DIR.mkdir(parents=True)
    probe = free_port()
    plane._spawn(
        TRAINING_OPERATOR,
        [
            binary,
            f"--kubeconfig={plane.kubeconfig}",
            "--enable-scheme=pytorchjob",
            f"--webhook-server-port={port}",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--leader-elect=false",
        ],
        env={**os.environ, "MY_POD_NAMESPACE": NAMESPACE},
    )
    try:

        def certificates() -> dict[str, str] | None:
            data = api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}").get("data") or {}
            return data if data.get("tls.crt") and data.get("tls.key") else None

        data = wait_until(certificates, timeout_s=60, what="the operator's rotator to write its certificates")
        for name in ("tls.crt", "tls.key"):  # what the Secret's volume would hold
            (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))

        def ready() -> bool:
            import urllib.request

            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        try:
            wait_until(ready, timeout_s=90, what="the training-operator to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{plane.log_tail(TRAINING_OPERATOR, 40)}") from None
        yield
    finally:
        api.delete(f"{hooks}/{WEBHOOK_CONFIGURATION}")  # first: no PyTorchJob write may meet a dead webhook
        plane.kill(TRAINING_OPERATOR)
        shutil.rmtree(CERT_DIR, ignore_errors=True)


def test_the_seed_pytorchjob_runs_through_the_real_operator_and_binds_whole(
    cluster: Cluster, namespace: str, training_operator: None
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
        raise AssertionError(f"{exc}\n{cluster.plane.log_tail(TRAINING_OPERATOR, 30)}") from None
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
