"""The upstream CRDs the e2e tier applies: KAI Scheduler's, JobSet's and the Kubeflow training-operator's,
taken from their Go modules at pinned releases, each module checked against its pinned go.sum hash.

Owns: the table of modules, versions, hashes and CRD files; fetching them once per machine into the
control-plane cache (`crds-<digest of the table>`), with the machine's Go and the Go module proxy.

Three changes are made to upstream files, and they are said here. The seeds are newer than the newest
releases the proxy serves, so fields of theirs that those releases lack are added, each kept as written:
- JobSet v0.12.0 has no declarative `spec.scheduling` (it is on JobSet's unreleased main branch):
  `with_jobset_scheduling` adds it as an object whose fields are kept as they are;
- KAI v0.12.0's PodGroup has no `minSubGroup` (on the spec and on each subgroup), which the KAI seed's
  JobSet gangs use: `with_kai_seed_fields` adds it, an integer.
Every other field is the release's own schema. And for 1.20's API server only, the empty-string
defaults it refuses are left out (`for_apiserver_1_20`).

One test-time variant, never cached: `as_kai_v016_status` is the PodGroup CRD as KAI v0.16 changed it
(its status without `phase`, `running`, `succeeded`, `failed`, `pending`, KAI #1650), for the tests
that prove our status writes follow the schema the cluster serves; v0.16 itself is not served here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Webhooks:
    """A controller's admission webhooks as its module's kustomize base has them: the manifest, the
    JSON patches its kustomization applies to each configuration, and what its install's overlay adds
    (a name prefix, the namespace)."""

    manifest: str
    patches: tuple[tuple[str, str], ...]  # (configuration kind, patch file)
    name_prefix: str
    namespace: str


@dataclass(frozen=True)
class UpstreamModule:
    path: str
    version: str
    go_sum: str  # the module's h1: hash, as a go.sum line names it
    crds: tuple[str, ...]  # files inside the module
    webhooks: Webhooks | None = None


KAI = UpstreamModule(
    "github.com/NVIDIA/KAI-scheduler",
    "v0.12.0",  # the newest KAI release the proxy serves here (v0.13.0 and later are refused)
    "h1:3rhB0TdbJYNgOiZ6E0cAa+VJnr4srhoigJI/PkY85vI=",  # (with_kai_seed_fields)
    (
        "deployments/kai-scheduler/crds/scheduling.run.ai_podgroups.yaml",
        "deployments/kai-scheduler/crds/scheduling.run.ai_queues.yaml",
        "deployments/kai-scheduler/crds/kai.scheduler_topologies.yaml",
    ),
)
JOBSET = UpstreamModule(
    "sigs.k8s.io/jobset",
    "v0.12.0",
    "h1:YYPuV0px8Ongq/RXmJg6V0w2UC67aiR+rCMD06vhQQQ=",
    ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
    Webhooks(
        "config/components/webhook/manifests.yaml",
        (
            ("MutatingWebhookConfiguration", "config/components/webhook/patches/mutating-patch.yaml"),
            ("ValidatingWebhookConfiguration", "config/components/webhook/patches/validating-patch.yaml"),
        ),
        name_prefix="jobset-",  # config/default
        namespace="jobset-system",
    ),
)
TRAINING_OPERATOR = UpstreamModule(
    "github.com/kubeflow/training-operator",
    "v1.9.3",
    "h1:aaSHqskOtCY8Dn8sVd+l9p5XAczW6O0nYMPjVLAw/lc=",
    ("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",),
    Webhooks(
        "manifests/base/webhook/manifests.yaml",
        (("ValidatingWebhookConfiguration", "manifests/base/webhook/patch.yaml"),),
        name_prefix="",
        namespace="kubeflow",  # manifests/overlays/standalone
    ),
)
MODULES = (KAI, JOBSET, TRAINING_OPERATOR)


class UpstreamUnavailable(Exception):
    """The upstream CRDs cannot be had here; the message is the one-line reason."""


def table_digest(modules: tuple[UpstreamModule, ...] = MODULES) -> str:
    """Names the cache directory: it changes with the table and with the additions made to the files."""
    text = json.dumps([[m.path, m.version, m.go_sum, list(m.crds), repr(m.webhooks)] for m in modules])
    text += inspect.getsource(with_jobset_scheduling) + inspect.getsource(with_kai_seed_fields)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def with_jobset_scheduling(crd: dict[str, Any]) -> dict[str, Any]:
    """JobSet's CRD with `spec.scheduling` (the seed's declarative scheduling) kept, not pruned."""
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"].setdefault(
            "scheduling",
            {
                "description": "Declarative scheduling (JobSet main, unreleased): added by the e2e tier.",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            },
        )
    return crd


def for_apiserver_1_20(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as 1.20's API server takes it: without the empty-string defaults controller-gen writes for
    object references' `name` (1.20 refuses `default: ""`, reading it as null; 1.22 and later accept it),
    and so a list-map key that loses its default is required instead (1.20 wants one or the other).
    Nothing else changes; objects the tests create always name what those defaults would fill."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {
            k: walk(v)
            for k, v in node.items()
            if not (k == "default" and v == "" and node.get("type") == "string")
        }
        items = out.get("items")
        if out.get("x-kubernetes-list-type") == "map" and isinstance(items, dict):
            for key in out.get("x-kubernetes-list-map-keys") or ():
                prop = (items.get("properties") or {}).get(key) or {}
                if "default" not in prop and key not in items.get("required", []):
                    items["required"] = [*items.get("required", []), key]
        return out

    return walk(crd)


def with_kai_seed_fields(crd: dict[str, Any]) -> dict[str, Any]:
    """KAI v0.12.0's PodGroup CRD with the fields of the KAI seed's newer contract that v0.12.0 lacks:
    `minSubGroup` on the spec and on each subgroup (how many child subgroups must be ready). Without
    them the API server would prune what the seed's JobSet gangs need. The CRD's other kinds pass as
    they are."""
    if crd.get("spec", {}).get("names", {}).get("kind") != "PodGroup":
        return crd
    min_sub_group = {
        "description": "How many child subgroups must be ready (KAI, newer): added by the e2e tier.",
        "type": "integer",
        "format": "int32",
        "minimum": 0,
    }
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"].setdefault("minSubGroup", dict(min_sub_group))
        items = spec["properties"]["subGroups"]["items"]
        items["properties"].setdefault("minSubGroup", dict(min_sub_group))
    return crd


KAI_V016_REMOVED_STATUS = ("phase", "running", "succeeded", "failed", "pending")


def as_kai_v016_status(crd: dict[str, Any]) -> dict[str, Any]:
    """A copy of KAI's PodGroup CRD (as the API server returns it) with the status fields KAI v0.16
    removed from its schema (#1650: never written by KAI, `schedulingConditions` and `resourcesStatus`
    carry the state) left out of every version; metadata other than name and resourceVersion dropped,
    so the copy can be PUT back over the served one."""
    out = json.loads(json.dumps(crd))
    out["metadata"] = {k: crd["metadata"][k] for k in ("name", "resourceVersion") if k in crd["metadata"]}
    out.pop("status", None)
    for version in out["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        for field in KAI_V016_REMOVED_STATUS:
            status["properties"].pop(field, None)
    return out


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(go, os.X_OK):
        raise UpstreamUnavailable("fetching the upstream CRDs needs Go on PATH (or /usr/local/go/bin/go)")
    return go


def _download(go: str, module: UpstreamModule, modcache: Path) -> Path:
    """`go mod download` of the module, its hash checked against the pinned one; its directory."""
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-modcacherw",
        "GOMODCACHE": str(modcache),
        "GOPATH": str(modcache.parent / "gopath"),
    }
    ref = f"{module.path}@{module.version}"
    run = subprocess.run(
        [go, "mod", "download", "-json", ref], capture_output=True, text=True, env=env, cwd=modcache.parent
    )
    try:
        info = json.loads(run.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if run.returncode != 0 or info.get("Error"):
        why = str(info.get("Error") or run.stderr.strip() or "no output").splitlines()[0]
        raise UpstreamUnavailable(f"go mod download {ref} failed: {why}")
    if info.get("Sum") != module.go_sum:
        raise UpstreamUnavailable(f"{ref} has hash {info.get('Sum')}, pinned {module.go_sum}: refused")
    return Path(info["Dir"])


def fetch(cache: Path, modules: tuple[UpstreamModule, ...] = MODULES) -> Path:
    """The directory holding every module's CRDs (one YAML file each), fetched once per machine."""
    target = cache / f"crds-{table_digest(modules)}"
    if (target / ".complete").is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = open(cache / ".crds.lock", "w")
    except OSError as exc:
        raise UpstreamUnavailable(f"cannot write the control-plane cache {cache}: {exc}") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").is_file():
            return target
        go = _go()
        with tempfile.TemporaryDirectory(dir=cache, prefix=".crds-work.") as work:
            modcache = Path(work) / "mod"
            out = Path(work) / "out"
            out.mkdir()
            for module in modules:
                root = _download(go, module, modcache)
                for rel in module.crds:
                    source = root / rel
                    if not source.is_file():
                        raise UpstreamUnavailable(f"{module.path}@{module.version} has no {rel}")
                    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
                    if module is JOBSET:
                        docs = [with_jobset_scheduling(d) for d in docs]
                    if module is KAI:
                        docs = [with_kai_seed_fields(d) for d in docs]
                    (out / source.name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
                if module.webhooks is not None:
                    hooks = out / "webhooks"
                    hooks.mkdir(exist_ok=True)
                    rendered = _render_webhooks(root, module.webhooks)
                    (hooks / f"{module.path.rsplit('/', 1)[-1]}.yaml").write_text(
                        yaml.safe_dump_all(rendered, sort_keys=False)
                    )
            (out / ".complete").write_text(json.dumps([[m.path, m.version] for m in modules]) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            out.rename(target)
    return target


def _render_webhooks(root: Path, hooks: Webhooks) -> list[dict[str, Any]]:
    """What `kubectl kustomize` of the controller's install renders for its webhook configurations: the
    manifest, each configuration's JSON patches (`replace` operations, all these use), then the
    overlay's name prefix and namespace on the configurations and the Service they name."""
    docs = [d for d in yaml.safe_load_all((root / hooks.manifest).read_text()) if d]
    for kind, rel in hooks.patches:
        ops = yaml.safe_load((root / rel).read_text()) or []
        for doc in docs:
            if doc.get("kind") != kind:
                continue
            for op in ops:
                if op.get("op") != "replace":
                    raise UpstreamUnavailable(f"{rel}: JSON patch op {op.get('op')!r} is not handled here")
                *parents, last = [t for t in op["path"].split("/") if t]
                node: Any = doc
                for token in parents:
                    node = node[int(token)] if isinstance(node, list) else node[token]
                node[int(last) if isinstance(node, list) else last] = op["value"]
    for doc in docs:
        doc["metadata"]["name"] = hooks.name_prefix + doc["metadata"]["name"]
        for hook in doc.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service")
            if service is not None:
                service["name"] = hooks.name_prefix + service["name"]
                service["namespace"] = hooks.namespace
    return docs


def webhook_configurations(directory: Path, module: UpstreamModule) -> list[dict[str, Any]]:
    """The controller's webhook configurations (fetch's `webhooks/<module>.yaml`), as its install has
    them; never applied with the CRDs: a webhook whose server is not running refuses writes."""
    path = directory / "webhooks" / f"{module.path.rsplit('/', 1)[-1]}.yaml"
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


KAI_PODGROUP_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.run.ai"


@contextlib.contextmanager
def kai_v016_status_served(api: Any, namespace: str, *, timeout_s: float = 30.0) -> Iterator[None]:
    """While inside, the API server serves KAI's PodGroup with the v0.16 status schema
    (`as_kai_v016_status`); the CRD as it was is put back on the way out. Each change is waited for
    until it is in force: a probe PodGroup in `namespace` loses (or keeps) a `phase` written to it."""
    served = api.get(KAI_PODGROUP_CRD)
    api.request("PUT", KAI_PODGROUP_CRD, as_kai_v016_status(served))
    try:
        _wait_phase_kept(api, namespace, kept=False, timeout_s=timeout_s)
        yield
    finally:
        now = api.get(KAI_PODGROUP_CRD)
        restored = json.loads(json.dumps(served))
        restored["metadata"] = {
            "name": now["metadata"]["name"],
            "resourceVersion": now["metadata"]["resourceVersion"],
        }
        restored.pop("status", None)
        api.request("PUT", KAI_PODGROUP_CRD, restored)
        _wait_phase_kept(api, namespace, kept=True, timeout_s=timeout_s)


def _wait_phase_kept(api: Any, namespace: str, *, kept: bool, timeout_s: float) -> None:
    path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups"
    probe = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "spec": {"minMember": 1}}
    probe["metadata"] = {"name": "crd-schema-probe", "namespace": namespace}
    api.create(path, probe, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            got = api.patch(f"{path}/crd-schema-probe/status", {"status": {"phase": "Probe"}})
            if ("phase" in (got.get("status") or {})) == kept:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the PodGroup CRD change not in force after {timeout_s:.0f} s (phase kept: {not kept})"
                )
            time.sleep(0.2)
    finally:
        api.delete(f"{path}/crd-schema-probe")
