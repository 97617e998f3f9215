"""The live source loads its configuration through kubernetes_asyncio without importing the client's API
classes and models (34 MiB resident), and the library still works whole for anyone who asks more of it.

Each case runs in a fresh interpreter: the import happens once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

LOADED = (
    "sorted(m for m in sys.modules "
    "if m.startswith(('kubernetes_asyncio.client.models.', 'kubernetes_asyncio.client.api.')))"
)

CASES = [
    (
        "configuration only",
        f"""
        cfg = kube.load_client_config(KUBECONFIG)
        assert cfg.host == "https://127.0.0.1:6443", cfg.host
        assert asyncio.run(cfg.get_api_key_with_prefix("BearerToken")) == "Bearer secret"
        assert not kube.k8s_config.ConfigException.__module__.startswith("kubernetes_asyncio.client")
        loaded = {LOADED}
        assert loaded == [], loaded[:5]
        """,
    ),
    (
        "the whole client on demand",
        f"""
        kube.load_client_config(KUBECONFIG)
        from kubernetes_asyncio.client import CoreV1Api, V1Pod
        import kubernetes_asyncio.watch
        from kubernetes_asyncio import client
        assert CoreV1Api.__name__ == "CoreV1Api" and client.V1Pod is V1Pod
        assert client.models.V1Node.__name__ == "V1Node"
        assert kubernetes_asyncio.watch.Watch
        assert len({LOADED}) > 100
        """,
    ),
    (
        "imported before: left as it is",
        """
        """,
    ),
]


@pytest.mark.parametrize(("name", "body"), CASES, ids=[c[0] for c in CASES])
def test_kube_configuration_imports(tmp_path: Path, name: str, body: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    before = "import kubernetes_asyncio.client\n" if name.startswith("imported before") else ""
    after = (
        "assert kube.load_client_config(KUBECONFIG).host; assert kube._Configuration is "
        "kubernetes_asyncio.client.Configuration\n"
        if before
        else ""
    )
    script = (
        f"import asyncio, sys\n{before}from extender.state import kube\nKUBECONFIG = {str(kubeconfig)!r}\n"
        + textwrap.dedent(body)
        + after
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
