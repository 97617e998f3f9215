"""The kind tier: the shipped image and manifests in a kind cluster, with a gang scheduled through them.

Runs only where `kind` and a docker daemon are present (kubectl is the tier's pinned build, see
controlplane/start.py kubectl_binary); skipped with a one-line reason otherwise. It builds the image
from the Dockerfile, creates the cluster from manifests/kind-config.yaml, applies the upstream CRDs and the
kustomize base (the kube-scheduler image is the one the kind node already runs), then checks a
rack-constrained Job gang binds whole inside one rack.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.start import SCHEDULER_NAME, kubectl_or_skip, kustomize, upstream_crds, wait_until

from extender.model import labels as keys
from extender.sim.cluster import topology

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
CLUSTER = "gang-extender"
IMAGE = "gang-extender:0.1.0"

pytestmark = pytest.mark.e2e


def kind_missing() -> str | None:
    for tool in ("kind", "docker"):
        if not shutil.which(tool):
            return f"kind tier needs {tool} on PATH"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "kind tier needs a running docker daemon"
    return None


def run(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


class Kubectl:
    def __init__(self, context: str, binary: str) -> None:
        self.context = context
        self.binary = binary

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        return run(self.binary, "--context", self.context, *args, stdin=stdin)

    def get(self, *args: str) -> Any:
        return json.loads(self("get", "-o", "json", *args))

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    reason = kind_missing()
    if reason:
        pytest.skip(reason)
    binary = kubectl_or_skip()  # before any cluster exists, so a skip leaves nothing behind
    run("docker", "build", "-t", IMAGE, str(REPO))
    created = CLUSTER not in run("kind", "get", "clusters").split()
    if created:
        run("kind", "create", "cluster", "--name", CLUSTER, "--config", str(MANIFESTS / "kind-config.yaml"))
    run("kind", "load", "docker-image", IMAGE, "--name", CLUSTER)
    k = Kubectl(f"kind-{CLUSTER}", binary)
    try:
        # the upstream CRDs are too large for a client-side apply's last-applied annotation
        k("apply", "--server-side", "-f", str(upstream_crds()))
        k("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        # The install as shipped (kubectl kustomize manifests), with the kube-scheduler image the kind
        # node already runs (no pull, and it matches the cluster) and one replica.
        control = k.get("pods", "-n", "kube-system", "-l", "component=kube-scheduler")["items"][0]
        scheduler_image = control["spec"]["containers"][0]["image"]
        docs = kustomize(MANIFESTS)
        for doc in docs:
            if doc["kind"] == "Deployment":
                doc["spec"]["replicas"] = 1
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    c["image"] = scheduler_image if c["name"] == "kube-scheduler" else IMAGE
                    c["imagePullPolicy"] = "IfNotPresent"
        k.apply(docs)
        k("-n", "kube-system", "rollout", "status", "deployment/gang-scheduler", "--timeout=180s")
        yield k
    finally:
        if created:
            run("kind", "delete", "cluster", "--name", CLUSTER)


def test_kind_job_gang_binds_whole_inside_one_rack(kubectl: Kubectl) -> None:
    ns = "kind-e2e"
    kubectl("create", "namespace", ns)
    try:
        kubectl.apply(
            [
                topology("dc"),
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": "train",
                        "namespace": ns,
                        "annotations": {
                            keys.BATCH_MIN_MEMBER: "4",
                            keys.TOPOLOGY: "dc",
                            keys.TOPOLOGY_REQUIRED: "topology.kubernetes.io/rack",
                        },
                    },
                    "spec": {
                        "parallelism": 4,
                        "completions": 4,
                        "template": {
                            "spec": {
                                "schedulerName": SCHEDULER_NAME,
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "main",
                                        "image": "sleep:v0.1.0",
                                        "resources": {"requests": {"cpu": "10m"}},
                                    }
                                ],
                            }
                        },
                    },
                },
            ]
        )

        def bound() -> list[str] | None:
            items = kubectl.get("pods", "-n", ns, "-l", "job-name=train")["items"]
            nodes = [p["spec"].get("nodeName") for p in items if p["spec"].get("nodeName")]
            return nodes if len(items) == 4 and len(nodes) == 4 else None

        nodes = wait_until(bound, timeout_s=120, interval_s=1, what="4 Job pods bound in kind")
        racks = {kubectl.get("node", n)["metadata"]["labels"]["topology.kubernetes.io/rack"] for n in nodes}
        assert len(racks) == 1, f"the gang spans racks {sorted(racks)}"
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")
