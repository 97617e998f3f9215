"""The e2e tier's kubectl: the one built from kubectl/go.mod once per machine, at the control plane's
version, never one found on PATH. Fast checks (no control plane)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from controlplane import start
from controlplane.start import (
    CURRENT_VERSION,
    PlaneUnavailable,
    kubectl_binary,
    kubectl_or_skip,
    kubectl_version,
)


def test_pinned_kubectl_is_the_current_control_planes_version() -> None:
    assert kubectl_version() == CURRENT_VERSION


def test_built_kubectl_reports_its_pinned_version() -> None:
    done = subprocess.run(
        [kubectl_or_skip(), "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["clientVersion"]["gitVersion"] == f"v{kubectl_version()}"


def fake_build(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-build.sh"
    script.write_text(f"set -e\n{body}\n")
    return script


def test_a_failed_build_is_unavailable_with_its_last_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANG_EXTENDER_CP_CACHE", str(tmp_path / "cache"))
    script = fake_build(
        tmp_path, "echo 'go: downloading x' >&2; echo 'go: module lookup refused' >&2; exit 1"
    )
    monkeypatch.setattr(start, "KUBECTL_BUILD_SCRIPT", script)
    with pytest.raises(
        PlaneUnavailable, match=r"kubectl build failed \(exit 1\): go: module lookup refused$"
    ):
        kubectl_binary()


def test_a_built_kubectl_is_used_without_building_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANG_EXTENDER_CP_CACHE", str(tmp_path / "cache"))
    built = tmp_path / "cache" / f"kubectl-{kubectl_version()}" / "bin" / "kubectl"
    script = fake_build(
        tmp_path, 'mkdir -p "$1/bin"; printf "#!/bin/sh\\n" > "$1/bin/kubectl"; chmod +x "$1/bin/kubectl"'
    )
    monkeypatch.setattr(start, "KUBECTL_BUILD_SCRIPT", script)
    assert kubectl_binary() == str(built)
    script.write_text("exit 1\n")  # a second build would fail
    assert kubectl_binary() == str(built)


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)], ids=["ci", "local"]
)
def test_an_unbuildable_kubectl_fails_under_ci_and_skips_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("GANG_EXTENDER_CP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(start, "KUBECTL_BUILD_SCRIPT", fake_build(tmp_path, "echo 'no Go here' >&2; exit 3"))
    with pytest.raises(outcome, match=r"kubectl is unavailable: kubectl build failed \(exit 3\): no Go here"):
        kubectl_or_skip()
