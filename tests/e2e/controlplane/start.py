"""A real Kubernetes control plane (1.20.2, 1.36.2 or 1.37.2) on loopback for the end-to-end tier, and a
tiny API client for tests.

Owns: finding the binaries (1.20.2 built once per machine by build.sh; 1.36.2 unpacked from the
repository's sibling `shared/k8s-1.36/` and checked against its sha256; 1.37.2 built once per machine
from the Go modules kubernetes/go.mod pins by module-build.sh; kubectl built once per
machine from the module in kubectl/ by kubectl-build.sh), one directory per version under one cache
root; starting etcd, kube-apiserver, kube-controller-manager, the service and kube-scheduler as
child processes with each version's flags; the kubeconfig; the shipped scheduler
configuration (read as it is by 1.36, converted v1 -> v1beta1 for 1.20); fake nodes. Recipes and
traps: shared/docs/real-control-plane.md and shared/k8s-1.36/README.md.

Run `python tests/e2e/controlplane/start.py --help` (or up.sh) to start one by hand.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import datetime
import fcntl
import hashlib
import json
import lzma
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
# kubectl is built from its modules (pinned by kubectl/go.mod and go.sum), never taken from PATH.
KUBECTL_MODULE = Path(__file__).resolve().parent / "kubectl"
KUBECTL_BUILD_SCRIPT = Path(__file__).resolve().parent / "kubectl-build.sh"
TOKEN = "test-token"
INSTALL = REPO / "manifests" / "base"
INSTALL_NAMESPACE = "kube-system"  # the base's kustomization.yaml `namespace:`
RBAC_WARMUP_S = 20.0  # see ControlPlane._authorizer_warming
SCHEDULER_ACCOUNT, EXTENDER_ACCOUNT = "gang-scheduler", "gang-extender"  # manifests/base/rbac.yaml
# Every request a service account makes is logged (metadata only), so a test can fail on any 403:
# the shipped RBAC must grant everything kube-scheduler and the extender do.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        # the bodies of group status writes (anyone's: a source test writes as the admin), so a status
        # test that fails shows what was written
        {
            "level": "Request",
            "verbs": ["patch"],
            "resources": [{"group": "scheduling.run.ai", "resources": ["podgroups/status", "queues/status"]}],
        },
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}
SCHEDULER_NAME = "gang-scheduler"

# The versions the e2e tier runs on, oldest first (the order the session runs them in).
LEGACY_VERSION = "1.20.2"
CURRENT_VERSION = "1.36.2"
NEWEST_VERSION = "1.37.2"
VERSIONS = (LEGACY_VERSION, CURRENT_VERSION, NEWEST_VERSION)
SERVER_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

# 1.36.2 is not built here: the binaries come xz-compressed beside the repository (a fresh clone in CI
# has a copy of shared/ next to it). Checksums of the unpacked files, from shared/k8s-1.36/README.md;
# pinned here so a changed file is refused rather than run.
SHARED_136 = REPO.parent / "shared" / "k8s-1.36"
SHA256_136 = {
    "kube-apiserver": "8cd10dc9a1e8cd19731f59fec65a18c9fd5fc2b35edb2b09527fe5e1ea6c488d",
    "kube-scheduler": "4dd18a05df40ce097f113cb544dbd255ef056dc39173c9de844235a0572caada",
    "kube-controller-manager": "e892a8e5440a4679f5fadf877caf6d642dafcecd6acb940a4e676759821d287d",
}
# Served on 1.36: the Workload API (Workload, PodGroup in scheduling.k8s.io/v1alpha2) and PodGroup
# topology constraints (without TopologyAwareWorkloadScheduling on the API server they are dropped).
# GangScheduling (kube-scheduler's native gang plugin) stays off: the extender's scheduler is tested alone.
FEATURE_GATES_136 = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
RUNTIME_CONFIG_136 = "scheduling.k8s.io/v1alpha2=true"
# Served on 1.37 (v1alpha2 is gone): Workload and PodGroup in v1beta1 (beta, off by default) and v1alpha3,
# CompositePodGroup (v1alpha3 only), PodGroup preemptionPolicy, topology constraints, and the Job
# controller's Workload integration (WorkloadWithJob: `Job.spec.scheduling`, delegated child Jobs, and a
# basic Workload and PodGroup for every other new root Job); as the JobSet seed's cluster runs it
# (GenericWorkload, WorkloadWithJob, TopologyAwareWorkloadScheduling,
# `--runtime-config=scheduling.k8s.io/v1alpha3=true,scheduling.k8s.io/v1beta1=true`). So on 1.37 every
# test's Jobs meet the Job controller's PodGroups.
FEATURE_GATES_137 = ",".join(
    f"{gate}=true"
    for gate in (
        "GenericWorkload",
        "TopologyAwareWorkloadScheduling",
        "CompositePodGroup",
        "PodGroupPreemptionPolicy",
        "WorkloadWithJob",
    )
)
RUNTIME_CONFIG_137 = "scheduling.k8s.io/v1alpha3=true,scheduling.k8s.io/v1beta1=true"
# Built here from its Go modules (module-build.sh, pinned by kubernetes/go.mod and go.sum).
MODULE_BUILD = Path(__file__).with_name("module-build.sh")
KUBERNETES_MODULE = Path(__file__).with_name("kubernetes")


class PlaneUnavailable(Exception):
    """The control plane cannot run here; the message is the one-line reason."""


# The replicas of the shipped pod the tier runs: a service and a kube-scheduler of one identity are one
# pod's two containers (the kube-scheduler in a UTS namespace whose hostname is the identity).
REPLICAS = {
    "service": "replica-a",
    "kube-scheduler": "replica-a",
    "service-b": "replica-b",
    "kube-scheduler-b": "replica-b",
}
SHIPPED_LEASE = "gang-scheduler"  # the shipped configuration's leaderElection.resourceName


def can_name_hosts() -> bool:
    """Whether this machine lets the tier give a kube-scheduler a hostname of its own (root, unshare)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machine_address() -> str:
    """This machine's own non-loopback IPv4 address (of the interface its default route uses); no packet
    is sent. PlaneUnavailable when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # a documentation address: the kernel picks the route's interface
            address = str(s.getsockname()[0])
        except OSError as exc:
            raise PlaneUnavailable(f"this machine has no non-loopback IPv4 address: {exc}") from exc
    if address.startswith("127.") or address == "0.0.0.0":
        raise PlaneUnavailable("this machine has no non-loopback IPv4 address for a webhook endpoint")
    return address


def cache_root() -> Path:
    """The directory holding one `k8s-<version>` directory per version.

    `GANG_EXTENDER_CP_CACHE` names that root; as before, it may also name the 1.20.2 directory itself
    (`.../k8s-1.20.2`), and then its parent is the root.
    """
    env = os.environ.get("GANG_EXTENDER_CP_CACHE")
    if not env:
        return Path("/var/cache/gang-extender")
    path = Path(env)
    return path.parent if path.name.startswith("k8s-") else path


def cache_dir(version: str) -> Path:
    return cache_root() / f"k8s-{version}"


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def _found(version: str) -> dict[str, str] | None:
    """The binaries of `version` when all are there: 1.20.2 runs on Debian's etcd 3.4 (build.sh installs
    it), the newer planes on the etcd release etcd/go.mod pins (built here once per machine)."""
    etcd = shutil.which("etcd") if version == LEGACY_VERSION else _built_etcd()
    paths = {n: str(cache_dir(version) / "bin" / n) for n in SERVER_BINARIES}
    if etcd and all(os.access(p, os.X_OK) for p in paths.values()):
        return {"etcd": etcd, **paths}
    return None


def binaries(version: str = LEGACY_VERSION) -> dict[str, str]:
    """Paths of etcd and the three server binaries of `version`, made ready once per machine
    (1.20.2 built, which also installs Debian's etcd; 1.36.2 unpacked; 1.37.2 built from its module; the
    etcd of both built from its module), or PlaneUnavailable."""
    if version not in VERSIONS:
        raise PlaneUnavailable(f"unknown control-plane version {version} (known: {', '.join(VERSIONS)})")
    got = _found(version)
    if got:
        return got
    if version == LEGACY_VERSION:
        return _build_120()
    etcd_binary()
    if version == NEWEST_VERSION:
        return _build_from_modules(version)
    return _unpack_136()


def upstream_crds() -> Path:
    """The directory of upstream CRDs (controlplane/upstream.py), fetched once per machine."""
    from controlplane import upstream  # the e2e tier is not a package: tests/e2e on sys.path

    try:
        return upstream.fetch(cache_root())
    except upstream.UpstreamUnavailable as exc:
        raise PlaneUnavailable(str(exc)) from exc


KAI_MODULE = Path(__file__).with_name("kai")
TRAINING_OPERATOR_MODULE = Path(__file__).with_name("training-operator")


def _run_build(argv: list[str], what: str) -> None:
    """Run a build script; PlaneUnavailable naming `what` with the script's last line when it fails."""
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode != 0:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PlaneUnavailable(f"{what} build failed (exit {run.returncode}): {tail[0]}")


def _module_version(go_mod: Path, module: str) -> str:
    """The version `go_mod` requires of `module` (its `require` line)."""
    for line in go_mod.read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == module and words[1].startswith("v"):
            return words[1]
    raise PlaneUnavailable(f"{go_mod} requires no {module}")


def module_tool(module_dir: Path, module: str, program: str, what: str) -> str:
    """A program that a module directory of ours names in a `tool` line, at the release of `module` its
    go.mod and go.sum pin, built once per machine by module-build.sh (into <dir>-<version> under the
    cache root); PlaneUnavailable with the build's last line otherwise."""
    version = _module_version(module_dir / "go.mod", module)
    cache = cache_root() / f"{module_dir.name}-{version}"
    binary = cache / "bin" / program
    if not os.access(binary, os.X_OK):
        _run_build(["bash", str(MODULE_BUILD), str(module_dir), str(cache)], f"{what} {version}")
    if not os.access(binary, os.X_OK):
        raise PlaneUnavailable(f"{what} {version} build finished but {binary} is missing")
    return str(binary)


def kai_podgrouper_binary() -> str:
    """KAI Scheduler's podgrouper, the release kai/go.mod pins."""
    return module_tool(KAI_MODULE, "github.com/NVIDIA/KAI-scheduler", "podgrouper", "KAI podgrouper")


def training_operator_binary() -> str:
    """The Kubeflow training-operator (its PyTorchJob controller), as training-operator/go.mod pins it."""
    return module_tool(
        TRAINING_OPERATOR_MODULE,
        "github.com/kubeflow/training-operator",
        "training-operator.v1",
        "Kubeflow training-operator",
    )


JOBSET_MODULE = Path(__file__).with_name("jobset")


def jobset_controller_binary() -> str:
    """The JobSet controller, the release jobset/go.mod pins."""
    return module_tool(JOBSET_MODULE, "sigs.k8s.io/jobset", "jobset", "JobSet controller")


ETCD_MODULE = Path(__file__).with_name("etcd")
ETCD = "go.etcd.io/etcd/server/v3"


def etcd_binary() -> str:
    """etcd of the release etcd/go.mod pins, the store of the 1.36.2 and 1.37.2 planes."""
    return module_tool(ETCD_MODULE, ETCD, "etcd", "etcd")


def _built_etcd() -> str | None:
    binary = cache_root() / f"etcd-{_module_version(ETCD_MODULE / 'go.mod', ETCD)}" / "bin" / "etcd"
    return str(binary) if os.access(binary, os.X_OK) else None


KWOK_MODULE = Path(__file__).with_name("kwok")


def kwok_binary() -> str:
    """kwok, the release kwok/go.mod pins: the kubelets of the tier's kwok nodes (controlplane/kwok.py)."""
    return module_tool(KWOK_MODULE, "sigs.k8s.io/kwok", "kwok", "kwok")


HELM_MODULE = Path(__file__).with_name("helm")


def helm_binary() -> str:
    """helm, the release helm/go.mod pins: lints, renders and installs the chart (manifests/helm)."""
    return module_tool(HELM_MODULE, "helm.sh/helm/v4", "helm", "helm")


def helm_or_skip() -> str:
    """helm_binary() for a test: skip with the one-line reason, or fail under CI=true."""
    return str(available_or_skip("helm", helm_binary))


def _build_from_modules(version: str) -> dict[str, str]:
    """module-build.sh: the release kubernetes/go.mod pins, built once per machine (it takes a lock)."""
    _run_build(
        ["bash", str(MODULE_BUILD), str(KUBERNETES_MODULE), str(cache_dir(version))], f"Kubernetes {version}"
    )
    got = _found(version)
    if not got:
        raise PlaneUnavailable(
            f"Kubernetes {version} build finished but binaries are missing in {cache_dir(version)}/bin"
        )
    return got


def _build_120() -> dict[str, str]:
    cache = cache_dir(LEGACY_VERSION)
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PlaneUnavailable(f"control plane not built in {cache} and building it needs root and apt-get")
    cache.mkdir(parents=True, exist_ok=True)
    # One build per machine even when several test sessions start at once.
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        got = _found(LEGACY_VERSION)
        if got:
            return got
        _run_build(["bash", str(BUILD_SCRIPT), str(cache)], f"Kubernetes {LEGACY_VERSION} control plane")
    got = _found(LEGACY_VERSION)
    if not got:
        raise PlaneUnavailable(f"control plane build finished but binaries are missing in {cache}/bin")
    return got


def _unpack_136(source: Path | None = None) -> dict[str, str]:
    """`xz -dc NAME.xz > NAME && chmod +x NAME` for each binary, each checked against its sha256."""
    source = source or SHARED_136
    cache = cache_dir(CURRENT_VERSION)
    missing = [n for n in SERVER_BINARIES if not (source / f"{n}.xz").is_file()]
    if missing:
        raise PlaneUnavailable(
            f"{CURRENT_VERSION} binaries not unpacked in {cache}/bin, "
            f"and {source} lacks {', '.join(missing)}.xz"
        )
    try:
        (cache / "bin").mkdir(parents=True, exist_ok=True)
        lock_file = open(cache / ".unpack.lock", "w")  # held for the whole unpack
    except OSError as exc:
        raise PlaneUnavailable(f"cannot write the control-plane cache {cache}: {exc}") from exc
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        got = _found(CURRENT_VERSION)
        if got:
            return got
        for name in SERVER_BINARIES:
            target = cache / "bin" / name
            tmp = target.with_name(f".{name}.tmp")
            digest = hashlib.sha256()
            try:
                with lzma.open(source / f"{name}.xz") as src, open(tmp, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        digest.update(chunk)
                        dst.write(chunk)
            except (OSError, lzma.LZMAError) as exc:
                tmp.unlink(missing_ok=True)
                raise PlaneUnavailable(f"cannot unpack {source / name}.xz: {exc}") from exc
            if digest.hexdigest() != SHA256_136[name]:
                tmp.unlink(missing_ok=True)
                raise PlaneUnavailable(
                    f"{source / name}.xz unpacks to sha256 {digest.hexdigest()}, expected {SHA256_136[name]}"
                )
            tmp.chmod(0o755)
            tmp.replace(target)
    got = _found(CURRENT_VERSION)
    if not got:
        raise PlaneUnavailable(f"{CURRENT_VERSION} unpacked into {cache}/bin but etcd is not installed")
    return got


def kubectl_version() -> str:
    """The Kubernetes version of the pinned kubectl: k8s.io/kubectl v0.X.Y in its go.mod is 1.X.Y."""
    version = _module_version(KUBECTL_MODULE / "go.mod", "k8s.io/kubectl")
    if not version.startswith("v0."):
        raise PlaneUnavailable(f"{KUBECTL_MODULE / 'go.mod'} requires no k8s.io/kubectl v0.X.Y")
    return "1." + version.removeprefix("v0.")


def kubectl_binary() -> str:
    """Path of the pinned kubectl, built once per machine into `kubectl-<version>/bin` under the cache
    root by kubectl-build.sh, or PlaneUnavailable with the build's last error line."""
    cache = cache_root() / f"kubectl-{kubectl_version()}"
    binary = cache / "bin" / "kubectl"
    if os.access(binary, os.X_OK):
        return str(binary)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock_file = open(cache / ".build.lock", "w")
    except OSError as exc:
        raise PlaneUnavailable(f"cannot write the kubectl cache {cache}: {exc}") from exc
    # One build per machine even when several test sessions start at once.
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not os.access(binary, os.X_OK):
            _run_build(["bash", str(KUBECTL_BUILD_SCRIPT), str(cache)], "kubectl")
    if not os.access(binary, os.X_OK):
        raise PlaneUnavailable(f"kubectl build finished but {binary} is missing")
    return str(binary)


def available_or_skip(what: str, get: Any) -> Any:
    """get() for a test, or skip it with the one-line reason why `what` cannot be had here; under
    CI=true that fails the test instead (CI must build every part)."""
    import pytest

    try:
        return get()
    except PlaneUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {what} is unavailable: {exc}", pytrace=False)
        pytest.skip(f"{what} is unavailable: {exc}")


def kubectl_or_skip() -> str:
    """kubectl_binary() for a test: skip with the one-line reason, or fail under CI=true."""
    return str(available_or_skip("kubectl", kubectl_binary))


class Api:
    """A minimal synchronous JSON client for test set-up and assertions (token auth, TLS unverified)."""

    def __init__(self, server: str, token: str = TOKEN) -> None:
        self.server = server
        self.token = token
        self._ssl = ssl.create_default_context()
        self._ssl.check_hostname = False
        self._ssl.verify_mode = ssl.CERT_NONE

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: Iterable[int] = (200, 201, 202),
        timeout_s: float = 30.0,
        decode: bool = True,
    ) -> tuple[int, Any]:
        """`body` bytes are sent as they are (JSON this module's encoder cannot write); `decode` False
        answers the body's bytes (JSON its decoder cannot read)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout_s) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        if not decode:
            if status not in tuple(ok):
                raise AssertionError(f"{method} {path} -> {status}: {raw[:300]!r}")
            return status, raw
        try:
            doc = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            doc = raw.decode(errors="replace")  # /readyz and friends answer plain text
        if status not in tuple(ok):
            detail = doc.get("message") if isinstance(doc, dict) else raw[:300]
            raise AssertionError(f"{method} {path} -> {status}: {detail}")
        return status, doc

    def get(self, path: str) -> Any:
        return self.request("GET", path)[1]

    def create(self, path: str, obj: dict[str, Any], *, exist_ok: bool = False) -> Any:
        ok = (200, 201, 202, 409) if exist_ok else (200, 201, 202)
        return self.request("POST", path, obj, ok=ok)[1]

    def patch(self, path: str, patch: dict[str, Any], *, kind: str = "merge") -> Any:
        ctype = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }
        return self.request("PATCH", path, patch, content_type=ctype[kind])[1]

    def delete(self, path: str) -> None:
        self.request("DELETE", path, {"gracePeriodSeconds": 0}, ok=(200, 202, 404))

    def ready(self) -> bool:
        try:
            return self.request("GET", "/readyz", ok=(200,), timeout_s=2)[0] == 200
        except (OSError, AssertionError):
            return False


def collection_path(obj: dict[str, Any], plural: str | None = None) -> str:
    """The POST path for an object, from apiVersion, kind and namespace (plurals for the kinds we use)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    plurals = {
        "Namespace": "namespaces",
        "Node": "nodes",
        "Pod": "pods",
        "Job": "jobs",
        "JobSet": "jobsets",
        "PyTorchJob": "pytorchjobs",
        "PodGroup": "podgroups",
        "Topology": "topologies",
        "CustomResourceDefinition": "customresourcedefinitions",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "Event": "events",
        "Secret": "secrets",
        "ConfigMap": "configmaps",
        "Service": "services",
        "Deployment": "deployments",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "PriorityClass": "priorityclasses",
    }
    plural = plural or plurals[kind]
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    ns = (obj.get("metadata") or {}).get("namespace")
    return f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"


def object_path(obj: dict[str, Any]) -> str:
    """The path of an object itself (its collection's, then its name)."""
    return f"{collection_path(obj)}/{obj['metadata']['name']}"


def kustomize(path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize path` with the pinned kubectl, parsed. pytest.skip when kubectl cannot be
    built here, pytest.fail under CI=true."""
    kubectl = kubectl_or_skip()
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {path}: {done.stderr.strip()}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def wait_until(check: Any, *, timeout_s: float, interval_s: float = 0.2, what: str = "condition") -> Any:
    """Poll `check()` until it returns something truthy; AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


def convert_scheduler_config(v1: dict[str, Any], *, url_prefix: str, kubeconfig: str) -> dict[str, Any]:
    """The shipped v1 configuration as kube-scheduler 1.20's v1beta1, with only URL and kubeconfig swapped.

    1.20 reads only v1beta1, where percentageOfNodesToScore is a top-level field, not per profile.
    """
    cfg = json.loads(json.dumps(v1))
    cfg["apiVersion"] = "kubescheduler.config.k8s.io/v1beta1"
    cfg.setdefault("clientConnection", {})["kubeconfig"] = kubeconfig
    for profile in cfg.get("profiles") or []:
        pct = profile.pop("percentageOfNodesToScore", None)
        if pct is not None:
            cfg["percentageOfNodesToScore"] = pct
        _score_plugins_to_v1beta1(profile)
    for ext in cfg.get("extenders") or []:
        ext["urlPrefix"] = url_prefix
    return cfg


def substitute_scheduler_config(v1: dict[str, Any], *, url_prefix: str, kubeconfig: str) -> dict[str, Any]:
    """The shipped v1 configuration as it is, for kube-scheduler releases that read v1 (1.25+): only the
    kubeconfig path and the extenders' URL (the service's port) are swapped."""
    cfg = json.loads(json.dumps(v1))
    cfg.setdefault("clientConnection", {})["kubeconfig"] = kubeconfig
    for ext in cfg.get("extenders") or []:
        ext["urlPrefix"] = url_prefix
    return cfg


def _score_plugins_to_v1beta1(profile: dict[str, Any]) -> None:
    """v1's NodeResourcesFit scoringStrategy MostAllocated is a plugin of its own in 1.20's v1beta1."""
    args = [pc for pc in profile.get("pluginConfig") or [] if pc.get("name") == "NodeResourcesFit"]
    strategy = (((args[0].get("args") or {}).get("scoringStrategy") or {}).get("type")) if args else None
    if args:
        profile["pluginConfig"] = [
            pc for pc in profile["pluginConfig"] if pc.get("name") != "NodeResourcesFit"
        ]
        if not profile["pluginConfig"]:
            del profile["pluginConfig"]
    if strategy == "MostAllocated":
        score = profile.setdefault("plugins", {}).setdefault("score", {})
        score.setdefault("disabled", []).append({"name": "NodeResourcesLeastAllocated"})
        score.setdefault("enabled", []).append({"name": "NodeResourcesMostAllocated", "weight": 1})


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) on loopback, each a child process."""

    def __init__(
        self,
        workdir: str | None = None,
        *,
        controller_manager: bool = True,
        version: str = LEGACY_VERSION,
        feature_gates: str | None = None,
    ) -> None:
        self.version = version
        self.bins = binaries(version)
        self.legacy = version_tuple(version) < (1, 25)  # reads v1beta1; components still take --port=0
        # `feature_gates`: extra gates for every component (e.g. "GangScheduling=true" for the native
        # peer), 1.36 only. The Workload API's own gates go to kube-apiserver and kube-controller-manager
        # (its PodGroup protection controller) but not to kube-scheduler: with them on, 1.36's
        # kube-scheduler runs its own pod-group queueing and topology placement (TopologyPlacementGenerator
        # offers the extender one placement's nodes only), which is the native peer, not this tier's subject.
        self.scheduler_gates = feature_gates or ""
        self.newest = version_tuple(version) >= (1, 37)  # serves scheduling.k8s.io v1beta1, not v1alpha2
        own_gates = None if self.legacy else FEATURE_GATES_137 if self.newest else FEATURE_GATES_136
        self.feature_gates = ",".join(g for g in (own_gates, feature_gates) if g)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="gang-e2e-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else self.workdir
        self.etcd_dir = Path(tempfile.mkdtemp(prefix="gang-e2e-etcd-", dir=shm))
        self.with_controller_manager = controller_manager
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig = str(self.workdir / "kubeconfig")
        self.api = Api(self.server)
        self.service_url: str | None = None
        self.service_args: list[str] = []
        self.service_kubeconfig: str | None = None  # None: the extender's (install_rbac) or the admin's
        self.audit_log = self.workdir / "audit.log"
        self.apiserver_starts: list[float] = []  # wall-clock times kube-apiserver was (re)started
        # Written by install_rbac(): kubeconfigs with the shipped service accounts' tokens. Until then
        # (and in benches, which never install) both components use the admin's (system:masters).
        self.scheduler_kubeconfig: str | None = None
        self.extender_kubeconfig: str | None = None
        self.extender_token: str | None = None
        self.argv: dict[str, tuple[list[str], dict[str, str] | None]] = {}
        self.etcd_url = ""
        self.kubelet: Any = None  # a KubeletStandIn once start_kubelet_standin() ran
        self.leases: dict[str, str] = {}  # kube-scheduler process name -> the path of the lease it elects on

    # -- processes -------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        self.argv[name] = (list(argv), env)
        if name == "kube-apiserver":
            self.apiserver_starts.append(time.time())
        log_path = self.workdir / f"{name}.log"
        if log_path.exists():  # a restarted process: keep the previous log as <name>.<n>.log
            n = 1
            while (self.workdir / f"{name}.{n}.log").exists():
                n += 1
            log_path.rename(self.workdir / f"{name}.{n}.log")
        with open(log_path, "wb") as log:  # the child keeps its own descriptor
            self.procs[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=str(REPO)
            )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a child's process group and wait until it is gone (fault injection)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def respawn(self, name: str) -> None:
        """Start a killed child again with the same command line (same ports, same data)."""
        argv, env = self.argv[name]
        self._spawn(name, argv, env=env)

    def restart_apiserver(self, *, down_s: float = 0.0) -> None:
        """SIGKILL kube-apiserver, keep it down for `down_s`, start it again on the same port (etcd keeps
        the data); returns once /readyz answers. Every client's connections and watches are cut."""
        self.kill("kube-apiserver")
        time.sleep(down_s)
        self.respawn("kube-apiserver")

        def up() -> bool:
            self._check_alive("kube-apiserver")
            return self.api.ready()

        wait_until(up, timeout_s=60, what="kube-apiserver /readyz after a restart")

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (through its v3 JSON gateway): any watch resumed from an
        older resourceVersion then gets 410 Gone and must relist. Returns the compacted revision."""

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(
                self.etcd_url + path,
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())

        revision = int(post("/v3/kv/range", {"key": "Lw==", "limit": 1})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def restart_scheduler(self, *, down_s: float = 0.0) -> None:
        """SIGKILL kube-scheduler and start it again with the same configuration. With leader election
        on, the new process waits for the dead one's lease to expire before it schedules."""
        self.kill("kube-scheduler")
        time.sleep(down_s)
        self.respawn("kube-scheduler")
        self._check_alive("kube-scheduler")

    def revive_after_lost_lease(self, name: str = "kube-scheduler") -> bool:
        """Start a kube-scheduler again (same command line) if it exited because it lost its lease: it
        cannot renew it while kube-apiserver is down, and past renewDeadline (10 s; a restart under load
        takes that long) it exits, as in a cluster, where its kubelet restarts it. Any other exit is left
        for the test to see. Returns whether it was started again."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is None:
            return False
        log = self.workdir / f"{name}.log"
        if not log.exists() or "leaderelection lost" not in log.read_text(errors="replace"):
            return False
        self.respawn(name)
        return True

    def _check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            tail = (self.workdir / f"{name}.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise PlaneUnavailable(f"{name} exited with {proc.returncode}: {' | '.join(tail)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def start(self) -> ControlPlane:
        w = self.workdir
        (w / "certs").mkdir(exist_ok=True)
        (w / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
        (w / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        subprocess.run(
            ["openssl", "genrsa", "-out", str(w / "sa.key"), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(w / "sa.key"), "-pubout", "-out", str(w / "sa.pub")],
            check=True,
            capture_output=True,
        )
        if not self.legacy:
            # 1.36's controller-manager signs CSRs with a CA of its own (--cluster-signing-*).
            subprocess.run(
                [
                    *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
                    *("-subj", "/CN=gang-e2e-ca", "-keyout", str(w / "ca.key"), "-out", str(w / "ca.crt")),
                ],
                check=True,
                capture_output=True,
            )
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                self.bins["etcd"],
                f"--data-dir={self.etcd_dir}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--log-level=warn",
            ],
        )
        issuer = "https://kubernetes.default.svc" + ("" if self.legacy else ".cluster.local")
        runtime_config = RUNTIME_CONFIG_137 if self.newest else RUNTIME_CONFIG_136
        current = [f"--runtime-config={runtime_config}"] if not self.legacy else []
        if self.feature_gates:
            current.append(f"--feature-gates={self.feature_gates}")
        self._spawn(
            "kube-apiserver",
            [
                self.bins["kube-apiserver"],
                f"--etcd-servers=http://127.0.0.1:{client}",
                f"--secure-port={self.apiserver_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={w / 'certs'}",
                "--endpoint-reconciler-type=none",
                f"--service-account-issuer={issuer}",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--authorization-mode=RBAC",
                f"--token-auth-file={w / 'tokens.csv'}",
                f"--audit-policy-file={w / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                # as hardened clusters run it: an ownerReference with blockOwnerDeletion (the service's
                # PodGroups) needs update on the owner's finalizers
                "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
                # a webhook naming a Service is called at the Service's endpoint (route_service), with
                # its certificate checked against the Service's DNS name, as in a cluster
                "--enable-aggregator-routing=true",
                *current,
                "--v=1",
            ],
        )

        def up() -> bool:
            self._check_alive("etcd")
            self._check_alive("kube-apiserver")
            return self.api.ready()

        wait_until(up, timeout_s=60, what="kube-apiserver /readyz")
        self.write_kubeconfig()
        if self.with_controller_manager:
            if self.legacy:
                per_version = ["--port=0"]
            else:
                per_version = [
                    f"--cluster-signing-cert-file={w / 'ca.crt'}",
                    f"--cluster-signing-key-file={w / 'ca.key'}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                ]
                if self.feature_gates:
                    per_version.append(f"--feature-gates={self.feature_gates}")
            self._spawn(
                "kube-controller-manager",
                [
                    self.bins["kube-controller-manager"],
                    f"--kubeconfig={self.kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    *per_version,
                    "--leader-elect=false",
                    f"--service-account-private-key-file={w / 'sa.key'}",
                    f"--root-ca-file={w / 'certs' / 'apiserver.crt'}",
                    # no node lifecycle (fake nodes never report) and no cloud service controller, which
                    # 1.37 no longer has (nor its old name)
                    "--controllers=*,-node-lifecycle-controller"
                    if self.newest
                    else "--controllers=*,-nodelifecycle,-service",
                    "--v=1",
                ],
            )
        return self

    def write_kubeconfig(self, path: str | None = None, *, user: str = "admin", token: str = TOKEN) -> str:
        """A kubeconfig for this plane with `token` (the admin's, system:masters, by default)."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "e2e", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
        path = path or self.kubeconfig
        Path(path).write_text(yaml.safe_dump(cfg))
        return path

    def install_rbac(self) -> None:
        """Create the shipped identities and RBAC (manifests/base/rbac.yaml, in the base's namespace) and
        write kubeconfigs with their tokens: from then on kube-scheduler runs as gang-scheduler and the
        service as gang-extender, with only the shipped grants (the API server authorizes with RBAC).
        The extender's token is the one the token controller writes into the shipped Secret."""
        objs = [d for d in yaml.safe_load_all((INSTALL / "rbac.yaml").read_text()) if d]
        for obj in objs:
            if not obj["kind"].startswith("Cluster"):
                obj["metadata"]["namespace"] = INSTALL_NAMESPACE
            self.api.create(collection_path(obj), obj, exist_ok=True)
        secret = next(o for o in objs if o["kind"] == "Secret")["metadata"]["name"]
        path = f"/api/v1/namespaces/{INSTALL_NAMESPACE}/secrets/{secret}"
        if self.with_controller_manager:
            data = wait_until(
                lambda: (self.api.get(path).get("data") or {}).get("token"),
                timeout_s=60,
                what=f"the token controller to fill Secret {secret}",
            )
            extender_token = base64.b64decode(data).decode()
        else:
            extender_token = self.request_token(EXTENDER_ACCOUNT)
        self.extender_token = extender_token
        self.extender_kubeconfig = self.write_kubeconfig(
            str(self.workdir / "kubeconfig.gang-extender"), user=EXTENDER_ACCOUNT, token=extender_token
        )
        self.scheduler_kubeconfig = self.write_kubeconfig(
            str(self.workdir / "kubeconfig.gang-scheduler"),
            user=SCHEDULER_ACCOUNT,
            token=self.request_token(SCHEDULER_ACCOUNT),
        )

    def request_token(self, account: str, namespace: str = INSTALL_NAMESPACE) -> str:
        """A bound token for a service account of the install (TokenRequest), valid for a day."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
        body["spec"] = {"expirationSeconds": 86400}
        return str(self.api.create(path, body)["status"]["token"])

    def _authorizer_warming(self, event: dict[str, Any]) -> bool:
        """Whether a request reached kube-apiserver within RBAC_WARMUP_S of a (re)start: until its RBAC
        informers sync, a restarted 1.36 server refuses what the roles allow (the clients retry). A
        grant that is really missing is refused again after the window and still fails the test."""
        stamp = str(event.get("requestReceivedTimestamp", ""))
        try:
            received = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return False
        return any(0 <= received - start <= RBAC_WARMUP_S for start in self.apiserver_starts[1:])

    def audit_offset(self) -> int:
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def status_writes(self, resource: str, name: str) -> list[str]:
        """Each status PATCH of the object `name` of `resource` (e.g. "podgroups") in the audit log, as
        "time code body" lines: what a status test that fails was written."""
        if not self.audit_log.exists():
            return []
        out = []
        for line in self.audit_log.read_bytes().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ref = event.get("objectRef") or {}
            wanted = (resource, name, "status")
            if (ref.get("resource"), ref.get("name"), ref.get("subresource")) == wanted:
                code = (event.get("responseStatus") or {}).get("code")
                body = json.dumps(event.get("requestObject"))[:400]
                out.append(f"{event.get('requestReceivedTimestamp')} {code} {body}")
        return out

    def audit_events_since(self, offset: int) -> Iterator[dict[str, Any]]:
        """The audit log's events from `offset` on (a line still being written is left out)."""
        if not self.audit_log.exists():
            return
        with open(self.audit_log, "rb") as log:
            log.seek(offset)
            lines = log.read().splitlines()
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                yield json.loads(line)

    def writes_since(self, offset: int, user_agent: str) -> list[str]:
        """Every write (create, update, patch, delete) since `offset` of the audit log by a client whose
        User-Agent contains `user_agent`, as "verb uri" lines: which replica wrote what."""
        return [
            f"{event['verb']} {event.get('requestURI')}"
            for event in self.audit_events_since(offset)
            if event.get("stage") == "ResponseComplete"
            and user_agent in str(event.get("userAgent", ""))
            and event.get("verb") in ("create", "update", "patch", "delete", "deletecollection")
        ]

    def forbidden_since(
        self,
        offset: int,
        *,
        accounts: Iterable[str] = (SCHEDULER_ACCOUNT, EXTENDER_ACCOUNT),
        namespace: str = INSTALL_NAMESPACE,
    ) -> list[str]:
        """Every request the authorizer refused (HTTP 403, decision forbid) one of the install's `accounts`
        since `offset` of the audit log, as "user verb uri: message" lines; and those that
        OwnerReferencesPermissionEnforcement refused for want of RBAC on an owner's finalizers."""
        users = {f"system:serviceaccount:{namespace}:{a}" for a in accounts}
        refused = []
        for event in self.audit_events_since(offset):
            status = event.get("responseStatus") or {}
            user = (event.get("user") or {}).get("username", "?")
            # RBAC's refusals only: a 403 from admission (a namespace being deleted refuses new events)
            # is authorized and says so
            decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
            owners = "cannot set blockOwnerDeletion" in str(status.get("message", ""))
            if (
                status.get("code") == 403
                and (decision == "forbid" or owners)
                and user in users
                and not self._authorizer_warming(event)
            ):
                refused.append(
                    f"{user} {event.get('verb')} {event.get('requestURI')}: {status.get('message', '')}"
                )
        return refused

    def start_service(
        self,
        *,
        port: int | None = None,
        extra_args: Iterable[str] = (),
        kubeconfig: str | None = None,
        name: str = "service",
        readyz_url: str | None = None,
    ) -> str:
        """`python -m extender serve` against this plane (or through `kubeconfig`, e.g. a fault-injecting
        proxy's); returns its base URL (https with --tls-cert-file) once /readyz answers 200.

        Another `name` runs a second service beside the shared one: its own process and log, and the
        shared one's restart settings untouched. `readyz_url`: where /readyz is polled instead, e.g. the
        plain --probe-host address of a service whose TLS port wants a client certificate."""
        port = port or free_port()
        shared = name == "service"
        if shared:
            self.service_kubeconfig = kubeconfig
        python = REPO / ".venv" / "bin" / "python"
        argv = [
            str(python if python.exists() else sys.executable),
            "-m",
            "extender",
            "serve",
            "--kubeconfig",
            kubeconfig or self.extender_kubeconfig or self.kubeconfig,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra_args,
        ]
        identity = REPLICAS.get(name)
        if identity and can_name_hosts() and "--leader-lease" not in argv:
            # as in the shipped pod: it acts only while its own kube-scheduler (hostname = identity) leads
            argv += ["--leader-lease", f"{INSTALL_NAMESPACE}/{SHIPPED_LEASE}", "--leader-identity", identity]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if shared:
            self.service_args = list(extra_args)
        self._spawn(name, argv, env=env)
        url = f"{'https' if '--tls-cert-file' in argv else 'http'}://127.0.0.1:{port}"

        def ready() -> bool:
            self._check_alive(name)
            try:
                with urllib.request.urlopen((readyz_url or url) + "/readyz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_until(ready, timeout_s=120, interval_s=0.25, what=f"the {name}'s /readyz")
        if shared:
            self.service_url = url
        return url

    def stop_service(self, *, timeout_s: float = 5.0) -> None:
        """Stop the service (SIGTERM, then SIGKILL past `timeout_s`); kube-scheduler keeps its URL."""
        proc = self.procs.pop("service", None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def restart_service(self) -> str:
        """Stop the service and start it again on the same port with the same flags, so
        kube-scheduler's configured urlPrefix still reaches it; the previous log is kept as
        service.<n>.log. Returns the URL once /readyz answers 200."""
        if self.service_url is None:
            raise PlaneUnavailable("restart_service: the service was never started")
        port = int(self.service_url.rsplit(":", 1)[1])
        self.stop_service()
        return self.start_service(port=port, extra_args=self.service_args, kubeconfig=self.service_kubeconfig)

    def scheduler_config(
        self, *, url_prefix: str, kubeconfig: str, config: Path | None = None
    ) -> dict[str, Any]:
        """The configuration kube-scheduler gets: the shipped file (or `config`) as it is on 1.36, with
        only the kubeconfig path and the extender URL swapped; converted to v1beta1 for 1.20."""
        src = yaml.safe_load((config or INSTALL / "scheduler-config.yaml").read_text())
        if not self.legacy:
            return substitute_scheduler_config(src, url_prefix=url_prefix, kubeconfig=kubeconfig)
        cfg = convert_scheduler_config(src, url_prefix=url_prefix, kubeconfig=kubeconfig)
        # With --config, 1.20 takes its insecure healthz/metrics address from the file and ignores
        # --port=0; left unset it binds 0.0.0.0:10251, which a second plane on the machine also wants.
        cfg["healthzBindAddress"] = cfg["metricsBindAddress"] = f"127.0.0.1:{free_port()}"
        return cfg

    def start_scheduler(
        self,
        *,
        url_prefix: str,
        config: Path | None = None,
        name: str = "kube-scheduler",
        kubeconfig: str | None = None,
    ) -> None:
        """kube-scheduler with the shipped configuration (see scheduler_config). Another `name` runs a
        second kube-scheduler beside the shared one (give it its own schedulerName and lease, or none);
        `kubeconfig`: as another identity than the install's gang-scheduler account."""
        kubeconfig = kubeconfig or self.scheduler_kubeconfig or self.kubeconfig
        cfg = self.scheduler_config(url_prefix=url_prefix, config=config, kubeconfig=kubeconfig)
        prefix = "scheduler" if name == "kube-scheduler" else name
        path = self.workdir / f"{prefix}-config.{cfg['apiVersion'].rsplit('/', 1)[1]}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        if self.legacy:
            per_version = ["--port=0"]
        else:
            # its own port's delegated authentication and authorization, as the shipped pod's
            per_version = [
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
            ]
            if self.scheduler_gates:
                per_version.append(f"--feature-gates={self.scheduler_gates}")
        argv = [
            self.bins["kube-scheduler"],
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            *per_version,
            "--v=2",
        ]
        identity = REPLICAS.get(name)
        if identity and can_name_hosts():
            # a hostname of its own, as a pod's: it leads as <identity>_<uuid>, and its sidecar knows it
            argv = ["unshare", "--uts", "--fork", "sh", "-c", 'hostname "$0" && exec "$@"', identity, *argv]
        self._spawn(name, argv)

        election = cfg.get("leaderElection") or {}
        if not election.get("leaderElect", True):
            self._check_alive(name)
            return
        ns = election.get("resourceNamespace", "kube-system")
        lease_name = election.get("resourceName", "kube-scheduler")
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease_name}"
        self.leases[name] = lease

        def leading() -> bool:
            self._check_alive(name)
            status, doc = self.api.request("GET", lease, ok=(200, 404))
            return status == 200 and bool((doc.get("spec") or {}).get("holderIdentity"))

        wait_until(leading, timeout_s=60, what=f"kube-scheduler to hold lease {lease}")

    def stop_scheduler(self, name: str = "kube-scheduler") -> None:
        """SIGTERM a kube-scheduler, wait until it is gone, and release its lease when no other running
        kube-scheduler of this plane elects on it: 1.36 releases it on the way out, 1.20 does not, and
        the next one would wait for it to expire (15 s). For the restarts the tests' fixtures make; a
        test of lease expiry kills with kill() or restart_scheduler()."""
        self.kill(name, signal.SIGTERM)
        lease = self.leases.pop(name, None)
        others = [
            n
            for n, path in self.leases.items()
            if path == lease and n in self.procs and self.procs[n].poll() is None
        ]
        if lease and not others:
            self.api.request("DELETE", lease, ok=(200, 202, 404))

    def start_kubelet_standin(self) -> None:
        """Complete the deletion of terminating pods on the fake nodes, as their kubelets would
        (tests/e2e/controlplane/kubelet.py); stopped with the plane."""
        from controlplane.kubelet import (
            KubeletStandIn,
        )  # the e2e tier is not a package: tests/e2e on sys.path

        if self.kubelet is None:
            self.kubelet = KubeletStandIn(self.server, self.api.token).start()

    def stop(self) -> None:
        """Stop every child; etcd last, since kube-apiserver 1.36 does not finish shutting down while it
        retries a vanished etcd. Idempotent."""
        if self.kubelet is not None:
            self.kubelet.stop(wait_s=0)  # its watch ends with kube-apiserver, below
        last = [n for n in ("etcd",) if n in self.procs]
        for batch in ([n for n in reversed(list(self.procs)) if n not in last], last):
            for name in batch:
                proc = self.procs[name]
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
            for name in batch:
                proc = self.procs[name]
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        self.procs.clear()
        if self.kubelet is not None:
            self.kubelet.stop(wait_s=5)
            self.kubelet = None
        shutil.rmtree(self.etcd_dir, ignore_errors=True)

    # -- cluster content -------------------------------------------------------------------------

    def apply_file(self, path: Path) -> list[dict[str, Any]]:
        """Create every object of a YAML stream (existing ones are left as they are)."""
        objs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for obj in objs:
            self.api.create(collection_path(obj), obj, exist_ok=True)
        return objs

    def apply_crds(self, directory: Path | None = None) -> None:
        """Create the upstream CRDs (KAI's, JobSet's, the training-operator's: upstream_crds()), or those
        in `directory`, and wait until each is Established."""
        from controlplane import upstream

        names = []
        for path in sorted((directory or upstream_crds()).glob("*.yaml")):
            for crd in (d for d in yaml.safe_load_all(path.read_text()) if d):
                if self.legacy:
                    crd = upstream.for_apiserver_1_20(crd)
                self.api.create(collection_path(crd), crd, exist_ok=True)
                names.append(crd["metadata"]["name"])
        for name in names:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

            def established(path: str = path) -> bool:
                conds = (self.api.get(path).get("status") or {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

            wait_until(established, timeout_s=30, what=f"CRD {name} Established")

    def add_node(
        self,
        name: str,
        *,
        labels: dict[str, str],
        cpu: str = "8",
        memory: str = "32Gi",
        pods: str = "110",
        taints: tuple[dict[str, str], ...] = (),
    ) -> None:
        """A fake Node, Ready, with allocatable set through /status (no kubelet ever heartbeats it)."""
        meta = {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}
        node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
        if taints:
            node["spec"] = {"taints": list(taints)}
        self.api.create("/api/v1/nodes", node, exist_ok=True)
        res = {"cpu": cpu, "memory": memory, "pods": pods}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "fake node",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.api.patch(
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": res, "allocatable": res, "conditions": [ready]}},
            kind="strategic",
        )

    def route_service(self, namespace: str, name: str, port: int) -> None:
        """A Service without a selector whose one endpoint is this machine's own address at `port`: a
        webhook configuration naming the Service reaches a controller's webhook server running here, and
        the API server checks the server's certificate for `<name>.<namespace>.svc`, as in a cluster
        (the API server runs with --enable-aggregator-routing; an endpoint may not be loopback)."""
        address = machine_address()
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": port}]},
        }
        endpoints = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name, "namespace": namespace},
            "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "webhook", "port": port}]}],
        }
        for path, obj in (
            (f"/api/v1/namespaces/{namespace}/services", svc),
            (f"/api/v1/namespaces/{namespace}/endpoints", endpoints),
        ):
            self.api.delete(f"{path}/{name}")
            self.api.create(path, obj)

    def add_racks(self, *, blocks: int, racks_per_block: int, nodes_per_rack: int, **node: str) -> list[str]:
        """Nodes named b<i>-r<j>-n<k> labelled with their block, rack and hostname; returns their names."""
        names = []
        for b in range(blocks):
            for r in range(racks_per_block):
                for n in range(nodes_per_rack):
                    name = f"b{b}-r{r}-n{n}"
                    rack = f"b{b}-r{r}"
                    labels = {"topology.kubernetes.io/rack": rack, "example.com/block": f"b{b}"}
                    self.add_node(name, labels=labels, **node)
                    names.append(name)
        return names


_shared: dict[str, ControlPlane] = {}
_shared_error: dict[str, str] = {}


def shared_plane(version: str = LEGACY_VERSION) -> ControlPlane:
    """One control plane per process and version (CRDs applied), stopped at exit; PlaneUnavailable when it
    cannot run. One runs at a time: asking for another version stops the running one first (2 cores)."""
    if version in _shared:
        return _shared[version]
    if version in _shared_error:
        raise PlaneUnavailable(_shared_error[version])
    for other in list(_shared):
        stop_shared_plane(other)
    workdir = os.environ.get("GANG_EXTENDER_E2E_DIR")
    try:
        plane = ControlPlane(f"{workdir}/{version}" if workdir else None, version=version)
    except PlaneUnavailable as exc:
        _shared_error[version] = str(exc)
        raise
    atexit.register(plane.stop)
    try:
        plane.start()
        plane.apply_crds()
        plane.install_rbac()
        plane.start_kubelet_standin()
    except BaseException as exc:
        plane.stop()
        _shared_error[version] = f"control plane {version} failed to start: {exc}"
        raise
    _shared[version] = plane
    return plane


def stop_shared_plane(version: str) -> None:
    """Stop the shared plane of `version`, if one runs; the next shared_plane(version) starts afresh."""
    plane = _shared.pop(version, None)
    if plane is not None:
        plane.stop()


def plane_for_tests(version: str = LEGACY_VERSION) -> ControlPlane:
    """shared_plane() for a pytest fixture: skip with the one-line reason, or fail under CI=true."""
    import pytest

    try:
        return shared_plane(version)
    except PlaneUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and control plane {version} is unavailable: {exc}", pytrace=False)
        pytest.skip(f"control plane {version} unavailable: {exc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start a loopback Kubernetes control plane.")
    parser.add_argument("--version", choices=VERSIONS, default=LEGACY_VERSION, help="Kubernetes version")
    parser.add_argument(
        "--feature-gates", help="extra feature gates for every component, kube-scheduler included (1.36 only)"
    )
    parser.add_argument("--dir", help="work directory (kubeconfig, logs); a new temporary one by default")
    parser.add_argument("--no-controller-manager", action="store_true")
    parser.add_argument(
        "--crds", action="store_true", help="apply the upstream CRDs (KAI, JobSet, training-operator)"
    )
    parser.add_argument("--racks", default="", help="fake nodes as BLOCKSxRACKSxNODES, e.g. 2x2x4")
    parser.add_argument("--service", action="store_true", help="also start the service")
    parser.add_argument(
        "--scheduler", action="store_true", help="also start kube-scheduler (implies --service)"
    )
    args = parser.parse_args(argv)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        plane = ControlPlane(
            args.dir,
            controller_manager=not args.no_controller_manager,
            version=args.version,
            feature_gates=args.feature_gates,
        )
    except PlaneUnavailable as exc:
        print(f"control plane unavailable: {exc}", file=sys.stderr)
        return 2
    try:
        plane.start()
        if args.crds or args.service or args.scheduler:
            plane.apply_crds()
        if args.racks:
            b, r, n = (int(x) for x in args.racks.split("x"))
            plane.add_racks(blocks=b, racks_per_block=r, nodes_per_rack=n)
        url = None
        if args.service or args.scheduler:
            url = plane.start_service()
        if args.scheduler and url:
            plane.start_scheduler(url_prefix=url)
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(
            f"# logs in {plane.workdir}; service: {url or 'not started'}; Ctrl-C stops everything", flush=True
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except PlaneUnavailable as exc:
        print(f"control plane failed: {exc}", file=sys.stderr)
        return 1
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/e2e, for `controlplane.*`
    raise SystemExit(main())
