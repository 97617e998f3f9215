"""A fatal configuration error ends `serve` with a non-zero status and the reason, instead of leaving
a process that answers /healthz 200 and /readyz 503 forever (the kubelet would never restart it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from controlplane.start import REPO, ControlPlane, free_port


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "extender", "serve", "--port", str(free_port()), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=REPO, env=env)


def test_a_missing_kubeconfig_exits_2_naming_it(tmp_path: Path) -> None:
    done = serve("--kubeconfig", str(tmp_path / "nowhere"))
    assert done.returncode == 2, done.stderr
    assert "nowhere" in done.stderr and "error" in done.stderr


def test_in_cluster_outside_a_pod_exits_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no KUBERNETES_SERVICE_HOST
    done = serve("--in-cluster", "true", env=env)
    assert done.returncode == 2, done.stderr
    assert "in-cluster" in done.stderr.lower() or "service account" in done.stderr.lower(), done.stderr


def test_credentials_the_api_server_refuses_exit_2_with_the_reason(
    plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = plane.write_kubeconfig(str(tmp_path / "kubeconfig"), user="stranger", token="not-a-token")
    done = serve("--kubeconfig", kubeconfig)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "unauthorized (HTTP 401)" in done.stderr, done.stderr[-2000:]
    assert "check the token" in done.stderr
    assert "Unclosed" not in done.stderr, "the source closed its session before exiting"


@pytest.mark.parametrize("flag", ["--gang-wait-s", "--port"])
def test_a_bad_flag_value_exits_2_before_anything_starts(flag: str) -> None:
    done = serve(flag, "soon", "--kubeconfig", "/dev/null")
    assert done.returncode == 2 and flag in done.stderr, done.stderr
