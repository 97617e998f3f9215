"""The Helm chart (manifests/helm/gang-extender), with the pinned helm and no control plane: it lints, its
defaults render what the kustomize base renders, each value does what values.yaml says, and bad values
are refused with a reason. test_e2e_helm.py installs it on a live API server and runs a gang through it.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.start import REPO, helm_or_skip, kustomize

from extender.cli import SERVE_FLAGS, build_parser, settings_from

CHART = REPO / "manifests" / "helm" / "gang-extender"
KUBE_VERSION = "v1.36.2"
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")


def helm(
    *args: str, values: dict[str, Any] | None = None, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [helm_or_skip(), *args]
    if values is not None:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(json.dumps(values))
        argv += ["-f", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def render(
    tmp: Path,
    values: dict[str, Any] | None = None,
    *,
    namespace: str = "kube-system",
    kube: str = KUBE_VERSION,
) -> list[dict[str, Any]]:
    done = helm(
        "template",
        "gang-extender",
        str(CHART),
        "-n",
        namespace,
        "--kube-version",
        kube,
        values=values or {},
        tmp=tmp,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (deploy,) = by_kind(objs, "Deployment")
    return dict(deploy["spec"]["template"]["spec"])


def container(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(objs)["containers"] if c["name"] == name)


def scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = by_kind(objs, "ConfigMap")
    return dict(yaml.safe_load(cm["data"]["scheduler-config.yaml"]))


def serve_errors(args: list[str]) -> list[str]:
    """What `gang-extender serve` says of the rendered arguments (the downward API's variables filled)."""
    filled = [
        a.replace("$(POD_NAMESPACE)", "gang-system").replace("$(POD_NAME)", "gang-scheduler-0") for a in args
    ]
    ns = build_parser().parse_args(filled)
    return settings_from(ns, SERVE_FLAGS)[1]


def test_the_chart_lints_strictly_with_its_defaults_and_every_optional_part_on(tmp_path: Path) -> None:
    everything = {
        "tls": {"enabled": True, "secretName": "extender-tls", "clientSecretName": "scheduler-client"},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "queues": [{"name": "research", "spec": {"resources": {"gpu": {"quota": 8, "limit": 16}}}}],
    }
    for values in ({}, everything):
        done = helm("lint", "--strict", str(CHART), "--namespace", "gang-system", values=values, tmp=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


def normalized(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Objects by kind, namespace and name, without what only one of the two tools adds: Helm's labels and
    the pod's configuration checksum, kustomize's hash suffix of the ConfigMap, a default pull policy; the
    scheduler configuration compared as the YAML it holds (the base's file has comments)."""
    out = {}
    for obj in copy.deepcopy(objs):
        meta = obj["metadata"]
        for labels in (
            meta.get("labels"),
            obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels"),
        ):
            for key in (*HELM_LABELS, "app.kubernetes.io/part-of"):
                (labels or {}).pop(key, None)
        if obj["kind"] == "ConfigMap":
            meta["name"] = meta["name"].rsplit("-", 1)[0] if meta["name"].count("-") > 2 else meta["name"]
            obj["data"] = {k: yaml.safe_load(v) for k, v in obj["data"].items()}
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            template["metadata"].pop("annotations", None)
            spec = template["spec"]
            for c in spec["containers"] + spec.get("initContainers", []):
                if c.get("imagePullPolicy") == "IfNotPresent":
                    del c["imagePullPolicy"]
            for volume in spec["volumes"]:
                if "configMap" in volume and volume["configMap"]["name"].startswith("gang-scheduler-config"):
                    volume["configMap"]["name"] = "gang-scheduler-config"
        out[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    return out


def test_the_defaults_in_kube_system_render_what_the_kustomize_base_renders(tmp_path: Path) -> None:
    chart = normalized(render(tmp_path))
    base = normalized(kustomize(REPO / "manifests"))
    assert sorted(chart) == sorted(base)
    for key, obj in base.items():
        assert chart[key] == obj, f"{key}: the chart and the kustomize base differ"


def test_in_another_namespace_every_reference_follows_it(tmp_path: Path) -> None:
    objs = render(tmp_path, namespace="gang-system")
    for obj in objs:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "PriorityClass"):
            assert "namespace" not in obj["metadata"], obj["metadata"]
        elif obj["metadata"]["name"] == "gang-scheduler-auth-reader":
            assert obj["metadata"]["namespace"] == "kube-system", "its Role lives in kube-system"
        else:
            assert obj["metadata"]["namespace"] == "gang-system", obj["metadata"]
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "gang-system", obj["metadata"]["name"]
    assert scheduler_config(objs)["leaderElection"]["resourceNamespace"] == "gang-system"
    (priority,) = by_kind(objs, "PriorityClass")
    assert pod_spec(objs)["priorityClassName"] == priority["metadata"]["name"] == "gang-scheduler-critical"
    assert serve_errors(container(objs, "gang-extender")["args"]) == []


@pytest.mark.parametrize(
    ("values", "check"),
    [
        (
            {"schedulerName": "gpu-gangs", "extenderName": "gpu-gangs-extender"},
            lambda objs: (
                scheduler_config(objs)["profiles"][0]["schedulerName"] == "gpu-gangs"
                and scheduler_config(objs)["leaderElection"]["resourceName"] == "gpu-gangs"
                and "$(POD_NAMESPACE)/gpu-gangs" in container(objs, "gang-extender")["args"]
                and pod_spec(objs)["serviceAccountName"] == "gpu-gangs"
                and {"gpu-gangs"}
                == {
                    r["resourceNames"][0]
                    for o in by_kind(objs, "Role")
                    for r in o["rules"]
                    if "resourceNames" in r
                }
            ),
        ),
        ({"replicas": 1}, lambda objs: by_kind(objs, "PodDisruptionBudget") == []),
        ({"replicas": 3}, lambda objs: by_kind(objs, "Deployment")[0]["spec"]["replicas"] == 3),
        (
            {"extender": {"podgrouper": False}},
            lambda objs: " --podgrouper false " in f" {' '.join(container(objs, 'gang-extender')['args'])} ",
        ),
        (
            {"scheduler": {"httpTimeoutSeconds": 5}},
            lambda objs: (
                scheduler_config(objs)["extenders"][0]["httpTimeout"] == "5s"
                and " --http-timeout-s 5 --gang-wait-s 3 "
                in f" {' '.join(container(objs, 'gang-extender')['args'])} "
            ),
        ),
        (
            {"tls": {"enabled": True, "secretName": "extender-tls", "clientSecretName": "scheduler-client"}},
            lambda objs: (
                scheduler_config(objs)["extenders"][0]["urlPrefix"] == "https://127.0.0.1:8888"
                and scheduler_config(objs)["extenders"][0]["enableHTTPS"] is True
                and scheduler_config(objs)["extenders"][0]["tlsConfig"]
                == {
                    "caFile": "/etc/gang-extender-tls/ca.crt",
                    "certFile": "/etc/gang-scheduler-client/tls.crt",
                    "keyFile": "/etc/gang-scheduler-client/tls.key",
                }
                and {"--tls-cert-file", "--tls-key-file", "--tls-client-ca-file"}
                <= set(container(objs, "gang-extender")["args"])
                and {"extender-tls", "scheduler-client"}
                <= {v.get("secret", {}).get("secretName") for v in pod_spec(objs)["volumes"]}
            ),
        ),
        (
            {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
            lambda objs: (
                by_kind(objs, "ServiceMonitor")[0]["spec"]["endpoints"][0]["port"] == "metrics"
                and by_kind(objs, "ServiceMonitor")[0]["metadata"]["labels"]["release"] == "prometheus"
                and by_kind(objs, "ServiceMonitor")[0]["spec"]["selector"]["matchLabels"]
                == by_kind(objs, "Service")[0]["spec"]["selector"]
            ),
        ),
        (
            {"queues": [{"name": "research", "spec": {"resources": {"gpu": {"quota": 8, "limit": 16}}}}]},
            lambda objs: (
                [(q["apiVersion"], q["metadata"]["name"], q["spec"]) for q in by_kind(objs, "Queue")]
                == [("scheduling.run.ai/v2", "research", {"resources": {"gpu": {"quota": 8, "limit": 16}}})]
            ),
        ),
        (
            {
                "images": {
                    "scheduler": {"repository": "mirror.internal/kube-scheduler", "tag": "v1.36.9"},
                    "extender": {"repository": "mirror.internal/gang-extender", "tag": "0.1.0-rc1"},
                }
            },
            lambda objs: (
                container(objs, "kube-scheduler")["image"] == "mirror.internal/kube-scheduler:v1.36.9"
                and container(objs, "gang-extender")["image"] == "mirror.internal/gang-extender:0.1.0-rc1"
                and pod_spec(objs)["initContainers"][0]["image"] == "mirror.internal/gang-extender:0.1.0-rc1"
            ),
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["system"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            lambda objs: list(pod_spec(objs)["affinity"]) == ["nodeAffinity"],
        ),
        (
            {"extender": {"extraArgs": ["--stale-gang-grace-s", "120"], "logFormat": "json"}},
            lambda objs: (
                container(objs, "gang-extender")["args"][-4:]
                == ["--log-format", "json", "--stale-gang-grace-s", "120"]
            ),
        ),
    ],
    ids=[
        "names",
        "one-replica-no-pdb",
        "replicas",
        "podgrouper-off",
        "http-timeout",
        "tls",
        "service-monitor",
        "queues",
        "images",
        "affinity",
        "extra-args",
    ],
)
def test_each_value_does_what_values_yaml_says(tmp_path: Path, values: dict[str, Any], check: Any) -> None:
    objs = render(tmp_path, values, namespace="gang-system")
    assert check(objs), yaml.safe_dump_all(objs)
    # whatever the values, the extender accepts the arguments the chart gives it
    assert serve_errors(container(objs, "gang-extender")["args"]) == []


def test_the_scheduler_image_follows_the_clusters_release(tmp_path: Path) -> None:
    for kube, tag in (("v1.37.2", "v1.37.2"), ("v1.36.2-gke.1200", "v1.36.2"), ("v1.35.4+k3s1", "v1.35.4")):
        assert (
            container(render(tmp_path, kube=kube), "kube-scheduler")["image"]
            == f"registry.k8s.io/kube-scheduler:{tag}"
        )


def test_the_pods_run_with_a_read_only_root_filesystem_and_apart(tmp_path: Path) -> None:
    objs = render(tmp_path)
    spec = pod_spec(objs)
    for c in spec["containers"] + spec["initContainers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, c["name"]
    (init,) = spec["initContainers"]
    assert init["command"] == ["cp", "-a", "/opt/gang-extender/kernels/.", "/var/cache/numba/"]
    mounts = {
        c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in spec["containers"] + [init]
    }
    assert mounts["kernels"]["numba-cache"] == mounts["gang-extender"]["numba-cache"] == "/var/cache/numba"
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        anti["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == by_kind(objs, "Deployment")[0]["spec"]["selector"]["matchLabels"]
    )


@pytest.mark.parametrize(
    ("values", "kube", "reason"),
    [
        ({"replicas": 0}, KUBE_VERSION, "replicas"),
        ({"extender": {"logFormat": "xml"}}, KUBE_VERSION, "logFormat"),
        ({"scheduler": {"httpTimeoutSeconds": 2}}, KUBE_VERSION, "httpTimeoutSeconds"),
        ({"schedulerName": "Gang_Scheduler"}, KUBE_VERSION, "schedulerName"),
        ({"replica": 2}, KUBE_VERSION, "replica"),  # a misspelt key is not silently ignored
        ({"tls": {"enabled": True}}, KUBE_VERSION, "tls.enabled needs tls.secretName"),
        ({"tls": {"clientSecretName": "c"}}, KUBE_VERSION, "set tls.enabled and tls.secretName"),
        ({"queues": [{"name": "research"}]}, KUBE_VERSION, "spec"),
        ({}, "v1.24.9", "kubeVersion"),
    ],
    ids=[
        "replicas",
        "log-format",
        "http-timeout",
        "scheduler-name",
        "unknown-key",
        "tls-no-secret",
        "client-without-tls",
        "queue-no-spec",
        "old-cluster",
    ],
)
def test_bad_values_are_refused_with_the_reason(
    tmp_path: Path, values: dict[str, Any], kube: str, reason: str
) -> None:
    done = helm("template", "gang-extender", str(CHART), "--kube-version", kube, values=values, tmp=tmp_path)
    assert done.returncode != 0, done.stdout
    assert reason in done.stderr, done.stderr
