"""Upstream controllers (the JobSet controller, the Kubeflow training-operator) run beside a ControlPlane as
their installs run them, but as processes on this machine rather than pods.

Owns: the install's objects a controller needs before it starts (its namespace, its webhook Secret, its
webhook configurations as its module renders them: controlplane/upstream.py), starting it, and what a
kubelet and kube-proxy would do for it: the certificates its rotator (open-policy-agent's
cert-controller, which both use) writes into the Secret are put where its webhook server reads them (the
Secret's volume), and its webhook Service's endpoint is this machine's address at the webhook port
(ControlPlane.route_service), so the API server calls its webhooks and checks their certificate as in a
cluster. On the way out the webhook configurations go first (a webhook whose server is gone refuses
writes), then the process.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.start import ControlPlane, free_port, wait_until

# Where both controllers' webhook servers read their certificate: controller-runtime's default, which
# their cert packages hard-code for the rotator's Secret volume. One controller at a time per machine.
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


@dataclass(frozen=True)
class Install:
    name: str  # the process name in the plane (and its log)
    namespace: str
    secret: str  # the webhook Secret its rotator fills
    service: str  # the webhook Service its certificate is issued for
    webhooks: tuple[dict[str, Any], ...]  # its Mutating/ValidatingWebhookConfigurations


def _collection(obj: dict[str, Any]) -> str:
    plural = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations"}.get(
        obj["kind"], "validatingwebhookconfigurations"
    )
    return f"/apis/admissionregistration.k8s.io/v1/{plural}"


@contextlib.contextmanager
def running(
    plane: ControlPlane, install: Install, argv: list[str], env: dict[str, str], port: int, probe: int
) -> Iterator[None]:
    """The controller `argv` (its webhook server on `port`, its readiness on 127.0.0.1:`probe`) running,
    ready, with its webhooks in force, until the block ends."""
    api = plane.api
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": install.namespace}}
    api.create("/api/v1/namespaces", ns, exist_ok=True)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": install.secret, "namespace": install.namespace},
    }
    api.create(f"/api/v1/namespaces/{install.namespace}/secrets", secret, exist_ok=True)
    plane.route_service(install.namespace, install.service, port)
    for hook in install.webhooks:
        api.delete(f"{_collection(hook)}/{hook['metadata']['name']}")
        api.create(_collection(hook), hook)
    shutil.rmtree(CERT_DIR, ignore_errors=True)
    CERT_DIR.mkdir(parents=True)
    plane._spawn(install.name, argv, env=env)
    try:

        def certificates() -> dict[str, str] | None:
            data = (
                api.get(f"/api/v1/namespaces/{install.namespace}/secrets/{install.secret}").get("data") or {}
            )
            return data if data.get("tls.crt") and data.get("tls.key") else None

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        try:
            data = wait_until(
                certificates, timeout_s=60, what=f"{install.name}'s rotator to write its certificates"
            )
            for name in ("tls.crt", "tls.key"):  # what the Secret's volume would hold
                (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
            wait_until(ready, timeout_s=120, what=f"{install.name} to be ready")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n--- {install.name} log ---\n{plane.log_tail(install.name, 40)}"
            ) from None
        yield
    finally:
        for hook in install.webhooks:
            api.delete(f"{_collection(hook)}/{hook['metadata']['name']}")
        plane.kill(install.name)
        shutil.rmtree(CERT_DIR, ignore_errors=True)


def ports() -> tuple[int, int]:
    """A webhook port and a readiness port."""
    return free_port(), free_port()
