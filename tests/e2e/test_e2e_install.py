"""The shipped install on a live API server: `kubectl kustomize manifests` (and the GPU overlay) renders,
applies with server-side dry-run, and then for real; the extender's token Secret is filled.

The RBAC in it is what the whole e2e tier runs with (ControlPlane.install_rbac, with the audit-log
check in conftest.py), so these tests cover the objects around it: the Deployment, its generated
ConfigMap, the Service, the PodDisruptionBudget, the overlay's Topology.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Cluster
from controlplane.start import (
    INSTALL_NAMESPACE,
    REPO,
    Api,
    ControlPlane,
    kubectl_or_skip,
    kustomize,
    object_path,
    wait_until,
)

MANIFESTS = REPO / "manifests"


def kubectl(plane: ControlPlane, *args: str, objs: list[dict[str, Any]]) -> str:
    done = subprocess.run(
        [kubectl_or_skip(), "--kubeconfig", plane.kubeconfig, *args, "-f", "-"],
        input=yaml.safe_dump_all(objs),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


@pytest.mark.k8s(min="1.25", reason="the install targets 1.25+ (policy/v1, kubescheduler.config.k8s.io/v1)")
@pytest.mark.parametrize("kustomization", ["", "overlays/gpu"], ids=["base", "gpu-overlay"])
def test_rendered_install_applies_server_side_dry_run_then_for_real(
    plane: ControlPlane, kustomization: str
) -> None:
    objs = kustomize(MANIFESTS / kustomization if kustomization else MANIFESTS)
    dry = kubectl(plane, "apply", "--server-side", "--force-conflicts", "--dry-run=server", objs=objs)
    assert dry.count("(server dry run)") == len(objs), dry
    workload_kinds = ("Deployment", "ConfigMap", "Service", "PodDisruptionBudget")
    workload = [o for o in objs if o["kind"] in workload_kinds]
    for obj in workload:  # the dry run created nothing
        plane.api.request("GET", object_path(obj), ok=(404,))
    try:
        kubectl(plane, "apply", "--server-side", "--force-conflicts", objs=objs)
        for obj in workload:
            got = plane.api.get(object_path(obj))
            assert got["metadata"]["namespace"] == INSTALL_NAMESPACE
            assert got["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gang-extender"
        deploy = plane.api.get(object_path(next(o for o in objs if o["kind"] == "Deployment")))
        pod = deploy["spec"]["template"]["spec"]
        assert sorted(c["name"] for c in pod["containers"]) == ["gang-extender", "kube-scheduler"]
        assert pod["serviceAccountName"] == "gang-scheduler" and pod["automountServiceAccountToken"] is False
        secret = plane.api.get(f"/api/v1/namespaces/{INSTALL_NAMESPACE}/secrets/gang-extender-token")
        assert set(secret["data"]) >= {"token", "ca.crt", "namespace"}, "the token controller filled it"
    finally:
        # the pods would wait forever for a default scheduler the e2e plane does not run; the RBAC stays
        # (the tier runs with it)
        for obj in workload:
            plane.api.request(
                "DELETE", object_path(obj), {"propagationPolicy": "Background"}, ok=(200, 202, 404)
            )


@pytest.mark.k8s(min="1.25", reason="the install targets 1.25+ (policy/v1, kubescheduler.config.k8s.io/v1)")
def test_the_namespace_overlay_applies_with_server_side_dry_run(plane: ControlPlane) -> None:
    """The install in a namespace of its own: every object is accepted by the API server as rendered
    (its namespace created first; the rest is a dry run, since the overlay's ClusterRoleBindings would
    point the tier's own grants at its service accounts)."""
    objs = kustomize(MANIFESTS / "overlays" / "namespace")
    (namespace,) = [o for o in objs if o["kind"] == "Namespace"]
    kubectl(plane, "apply", "--server-side", objs=[namespace])
    try:
        rest = [o for o in objs if o["kind"] != "Namespace"]
        dry = kubectl(plane, "apply", "--server-side", "--force-conflicts", "--dry-run=server", objs=rest)
        assert dry.count("(server dry run)") == len(rest), dry
    finally:
        plane.api.request("DELETE", f"/api/v1/namespaces/{namespace['metadata']['name']}", ok=(200, 202, 404))


def test_the_e2e_components_run_as_the_shipped_service_accounts(cluster: Cluster) -> None:
    """What the audit-log check relies on: the tier's kube-scheduler and service are not admins, and
    the audit log records their requests."""
    plane = cluster.plane
    users = set()
    for line in plane.audit_log.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            users.add(json.loads(line)["user"]["username"])
    prefix = f"system:serviceaccount:{INSTALL_NAMESPACE}:"
    assert {prefix + "gang-scheduler", prefix + "gang-extender"} <= users
    for path, account in (
        (plane.scheduler_kubeconfig, "gang-scheduler"),
        (plane.extender_kubeconfig, "gang-extender"),
    ):
        assert path is not None
        cfg = yaml.safe_load(Path(path).read_text())
        token = cfg["users"][0]["user"]["token"]
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        status = plane.api.create("/apis/authentication.k8s.io/v1/tokenreviews", review)["status"]
        assert status["authenticated"] is True
        assert status["user"]["username"] == f"system:serviceaccount:{INSTALL_NAMESPACE}:{account}"
        assert "system:masters" not in status["user"].get("groups", [])
    # and the extender may not delete pods (kube-scheduler may: preemption)
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{INSTALL_NAMESPACE}:gang-extender",
            "groups": ["system:serviceaccounts"],
            "resourceAttributes": {"verb": "delete", "resource": "pods", "namespace": "default"},
        },
    }
    assert (
        plane.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]["allowed"]
        is False
    )


def test_a_refused_request_is_seen_by_the_audit_check(plane: ControlPlane) -> None:
    """The check conftest.py runs after every e2e test can fail: a request the RBAC refuses shows."""
    plane.api.create(
        f"/api/v1/namespaces/{INSTALL_NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "e2e-nobody"}},
        exist_ok=True,
    )
    offset = plane.audit_offset()
    nobody = Api(plane.server, token=plane.request_token("e2e-nobody"))
    nobody.request("DELETE", "/api/v1/namespaces/default/pods/anything", ok=(403,))

    def seen() -> list[str]:
        return plane.forbidden_since(offset, accounts=["e2e-nobody"])

    (line,) = wait_until(seen, timeout_s=10, what="the refused request in the audit log")
    assert "e2e-nobody delete /api/v1/namespaces/default/pods/anything" in line
    assert plane.forbidden_since(offset) == [], "the install's own accounts were refused nothing"
