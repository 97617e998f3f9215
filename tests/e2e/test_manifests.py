"""The shipped manifests say what the design needs, and the 1.20 conversion changes only what it must.

Fast checks (no control plane); the e2e scenarios prove the same files work against a real cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.start import convert_scheduler_config, kustomize, substitute_scheduler_config

from extender.state.kube import DEFAULT_KINDS

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base"


def load_all(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def scheduler_config() -> dict[str, Any]:
    return load_all("scheduler-config.yaml")[0]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("apiVersion",), "kubescheduler.config.k8s.io/v1"),
        (("profiles", 0, "schedulerName"), "gang-scheduler"),
        (("profiles", 0, "percentageOfNodesToScore"), 100),
        (("leaderElection", "resourceName"), "gang-scheduler"),
        (("extenders", 0, "urlPrefix"), "http://127.0.0.1:8888"),
        (("extenders", 0, "filterVerb"), "filter"),
        (("profiles", 0, "pluginConfig", 0, "args", "scoringStrategy", "type"), "MostAllocated"),
        (("extenders", 0, "bindVerb"), "bind"),
        (("extenders", 0, "preemptVerb"), "preempt"),
        (("extenders", 0, "nodeCacheCapable"), True),
        (("extenders", 0, "httpTimeout"), "10s"),
        (("extenders", 0, "ignorable"), False),
    ],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else None,
)
def test_scheduler_config_sets(path: tuple[Any, ...], expected: Any) -> None:
    node: Any = scheduler_config()
    for step in path:
        node = node[step]
    assert node == expected


def test_scheduler_config_ships_no_prioritize_verb_as_measured() -> None:
    # bench/RESULTS.md: planned gang members are never prioritized; for plain pods prioritize cost
    # 10-33% of throughput and in-tree MostAllocated scoring packs as well
    ext = scheduler_config()["extenders"][0]
    assert "prioritizeVerb" not in ext and "weight" not in ext


def test_conversion_to_v1beta1_moves_percentage_and_swaps_only_url_and_kubeconfig() -> None:
    v1 = scheduler_config()
    got = convert_scheduler_config(v1, url_prefix="http://127.0.0.1:1234", kubeconfig="/k")
    assert got["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert got["percentageOfNodesToScore"] == 100
    assert "percentageOfNodesToScore" not in got["profiles"][0]
    assert got["clientConnection"] == {"kubeconfig": "/k"}
    assert got["extenders"][0] == {**v1["extenders"][0], "urlPrefix": "http://127.0.0.1:1234"}
    assert got["leaderElection"] == v1["leaderElection"]
    assert v1["apiVersion"].endswith("/v1"), "the shipped file is left untouched"
    # 1.20 has MostAllocated as a score plugin of its own, not as NodeResourcesFit's strategy
    score = got["profiles"][0]["plugins"]["score"]
    assert {"name": "NodeResourcesMostAllocated", "weight": 1} in score["enabled"]
    assert {p["name"] for p in score["disabled"]} == {
        "NodeResourcesBalancedAllocation",
        "NodeResourcesLeastAllocated",
    }
    assert "pluginConfig" not in got["profiles"][0]


def test_current_scheduler_reads_the_shipped_file_with_only_url_and_kubeconfig_swapped() -> None:
    """What kube-scheduler 1.36 gets in the e2e tier: the shipped v1 file, two values substituted."""
    v1 = scheduler_config()
    got = substitute_scheduler_config(v1, url_prefix="http://127.0.0.1:1234", kubeconfig="/k")
    expected = {**v1, "clientConnection": {"kubeconfig": "/k"}}
    expected["extenders"] = [{**v1["extenders"][0], "urlPrefix": "http://127.0.0.1:1234"}]
    assert got == expected
    assert "clientConnection" not in v1, "the shipped file is left untouched"


def test_rbac_grants_the_extender_exactly_what_it_uses() -> None:
    """Least privilege: every kind extender/state/kube.py watches and every write it makes, no more."""
    role = next(d for d in load_all("rbac.yaml") if d["kind"] == "ClusterRole")
    grants = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    reads = [(k.group, k.plural) for k in DEFAULT_KINDS]  # what the cluster source lists and watches
    expected = {(g, r, v) for g, r in reads for v in ("get", "list", "watch")} | {
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("", "pods/status", "patch"),
        ("", "pods", "patch"),
        ("", "events", "create"),
        # the PodGroups it keeps for derived gangs (--podgrouper)
        ("scheduling.run.ai", "podgroups", "create"),
        ("scheduling.run.ai", "podgroups", "patch"),
        ("scheduling.run.ai", "podgroups", "delete"),
        ("scheduling.run.ai", "podgroups/status", "patch"),
        ("scheduling.k8s.io", "podgroups/status", "patch"),
        ("scheduling.k8s.io", "compositepodgroups/status", "patch"),
        ("scheduling.run.ai", "queues/status", "patch"),  # each queue's allocated and requested
        # its PodGroups' blockOwnerDeletion, under OwnerReferencesPermissionEnforcement (the tier runs it)
        ("batch", "jobs/finalizers", "update"),
        ("jobset.x-k8s.io", "jobsets/finalizers", "update"),
        ("kubeflow.org", "pytorchjobs/finalizers", "update"),
    }
    assert grants - expected == set(), f"granted but never used: {sorted(grants - expected)}"
    assert expected - grants == set(), f"used but not granted: {sorted(expected - grants)}"


def test_the_scheduler_may_hold_its_own_lease() -> None:
    cfg = yaml.safe_load((MANIFESTS / "scheduler-config.yaml").read_text())
    lease = cfg["leaderElection"]["resourceName"]
    role = next(
        d
        for d in load_all("rbac.yaml")
        if d["kind"] == "Role" and d["metadata"]["name"] == "gang-scheduler-lease"
    )
    namespace = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["namespace"]
    assert namespace == cfg["leaderElection"]["resourceNamespace"]
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        }
    ]
    binding = next(
        d
        for d in load_all("rbac.yaml")
        if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]
    )
    assert binding["subjects"][0]["name"] == "gang-scheduler"


def test_the_extender_follows_the_schedulers_lease_and_may_only_read_it() -> None:
    cfg = yaml.safe_load((MANIFESTS / "scheduler-config.yaml").read_text())
    election = cfg["leaderElection"]
    role = next(
        d
        for d in load_all("rbac.yaml")
        if d["kind"] == "Role" and d["metadata"]["name"] == "gang-extender-lease"
    )
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [election["resourceName"]],
            "verbs": ["get", "list", "watch"],
        }
    ]
    pod = next(d for d in load_all("deployment.yaml") if d["kind"] == "Deployment")["spec"]["template"][
        "spec"
    ]
    extender = next(c for c in pod["containers"] if c["name"] == "gang-extender")
    args = extender["args"]
    assert args[args.index("--leader-lease") + 1] == f"$(POD_NAMESPACE)/{election['resourceName']}"
    assert args[args.index("--leader-identity") + 1] == "$(POD_NAME)"
    assert extender["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    namespace = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["namespace"]
    assert election["resourceNamespace"] == namespace  # the pod's, which $(POD_NAMESPACE) names
    # a dead extender on the leader restarts its kube-scheduler, which hands the lease over
    scheduler = next(c for c in pod["containers"] if c["name"] == "kube-scheduler")
    probe_port = int(args[args.index("--probe-port") + 1])
    assert scheduler["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": probe_port}


def test_the_scheduler_and_the_extender_have_separate_identities() -> None:
    """kube-scheduler may delete pods (preemption); the extender, with a token of its own, may not."""
    rbac = load_all("rbac.yaml")
    bound: dict[str, set[str]] = {}
    for b in rbac:
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for subject in b["subjects"]:
                bound.setdefault(subject["name"], set()).add(b["roleRef"]["name"])
    assert bound == {
        "gang-scheduler": {
            "system:kube-scheduler",
            "system:volume-scheduler",
            "extension-apiserver-authentication-reader",
            "gang-scheduler-lease",
        },
        "gang-extender": {"gang-extender", "gang-extender-lease"},
    }
    token = next(d for d in rbac if d["kind"] == "Secret")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "gang-extender"
    pod = next(d for d in load_all("deployment.yaml") if d["kind"] == "Deployment")["spec"]["template"][
        "spec"
    ]
    assert pod["serviceAccountName"] == "gang-scheduler" and pod["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    mounted = {
        c["name"]: next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == token_path)
        for c in pod["containers"]
    }
    assert volumes[mounted["gang-extender"]]["secret"]["secretName"] == token["metadata"]["name"]
    sources = volumes[mounted["kube-scheduler"]]["projected"]["sources"]
    assert any("serviceAccountToken" in src for src in sources)


def test_probes_reach_the_containers_on_the_pod_ip_and_the_verbs_stay_on_loopback() -> None:
    """The kubelet dials the pod IP: a probe with host 127.0.0.1 would dial the node's loopback."""
    deploy = next(d for d in load_all("deployment.yaml") if d["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for c in pod["containers"]:
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for probe in ("livenessProbe", "readinessProbe"):
            get = c[probe]["httpGet"]
            assert "host" not in get, f"{c['name']} {probe} sets host {get['host']}"
            pod_ports = {p["containerPort"] for other in pod["containers"] for p in other.get("ports", [])}
            assert get["port"] in ports or get["port"] in pod_ports, (
                f"{c['name']} {probe} names no port of the pod"
            )
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert "memory" in c["resources"]["limits"]
    extender = next(c for c in pod["containers"] if c["name"] == "gang-extender")
    args = extender["args"]
    assert args[args.index("--host") + 1] == "127.0.0.1"  # the verbs: kube-scheduler alone
    assert args[args.index("--probe-host") + 1] == "0.0.0.0"
    probe_port = int(args[args.index("--probe-port") + 1])
    assert {p["containerPort"] for p in extender["ports"]} == {probe_port}
    service = next(d for d in load_all("deployment.yaml") if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    pdb = next(d for d in load_all("deployment.yaml") if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 and deploy["spec"]["replicas"] == 2


# ---------------------------------------------------------------- kustomize (kubectl kustomize)
def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def test_kustomize_base_renders_the_whole_install_and_no_crd() -> None:
    objs = kustomize(MANIFESTS.parent)
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        ["ServiceAccount"] * 2
        + ["Secret", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "ClusterRole"]
        + ["Role"] * 2
        + ["ClusterRoleBinding"] * 3
        + ["RoleBinding"] * 3
    )
    namespaced = [o for o in objs if not o["kind"].startswith("Cluster")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"kube-system"}
    (config_map,) = by_kind(objs, "ConfigMap")
    assert yaml.safe_load(config_map["data"]["scheduler-config.yaml"]) == scheduler_config()
    (deploy,) = by_kind(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"] == config_map["metadata"]["name"]  # the hashed name
    assert config_map["metadata"]["name"].startswith("gang-scheduler-config-")
    images = {c["name"]: c["image"] for c in pod["containers"] + pod["initContainers"]}
    # upstream's kube-scheduler image; the extender's as `make image` tags it, the kernels copied from it
    assert images == {
        "kube-scheduler": "registry.k8s.io/kube-scheduler:v1.36.2",
        "gang-extender": "gang-extender:0.1.0",
        "kernels": "gang-extender:0.1.0",
    }
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gang-extender" for o in objs)


def test_gpu_overlay_changes_only_images_placement_gpu_scoring_and_adds_a_topology() -> None:
    base, gpu = kustomize(MANIFESTS.parent), kustomize(MANIFESTS.parent / "overlays" / "gpu")
    (topo,) = by_kind(gpu, "Topology")
    assert topo["apiVersion"] == "kai.scheduler/v1alpha1"
    assert [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]][-1] == "kubernetes.io/hostname"
    assert sorted(o["kind"] for o in gpu if o["kind"] != "Topology") == sorted(o["kind"] for o in base)
    (gpu_config,) = by_kind(gpu, "ConfigMap")
    got = yaml.safe_load(gpu_config["data"]["scheduler-config.yaml"])
    strategy = got["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
    assert strategy.pop("resources")[0] == {"name": "nvidia.com/gpu", "weight": 5}
    assert got == scheduler_config(), "the overlay's configuration is the base's plus GPU weights"
    (deploy,) = by_kind(gpu, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert {c["image"].rsplit("/", 1)[-1] for c in pod["containers"]} == {
        "kube-scheduler:v1.36.2",
        "gang-extender:0.1.0",
    }
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["serviceAccountName"] == "gang-scheduler", "the base's pod is kept, patched"


def test_namespace_overlay_moves_the_whole_install_and_keeps_what_kube_system_must_hold() -> None:
    """A plain `namespace:` overlay leaves subjects, the lease and the auth-reader binding behind; the
    shipped namespace overlay moves each, and changes nothing else of the configuration."""
    target = "gang-system"
    objs = kustomize(MANIFESTS.parent / "overlays" / "namespace")
    base = kustomize(MANIFESTS.parent)
    assert sorted(o["kind"] for o in objs) == sorted(
        [o["kind"] for o in base] + ["Namespace", "PriorityClass"]
    )
    for obj in objs:
        if obj["kind"] in ("Namespace", "PriorityClass") or obj["kind"].startswith("Cluster"):
            assert "namespace" not in obj["metadata"], obj["metadata"]
        elif obj["metadata"]["name"] == "gang-scheduler-auth-reader":
            assert obj["metadata"]["namespace"] == "kube-system"  # its Role lives there
        else:
            assert obj["metadata"]["namespace"] == target, (obj["kind"], obj["metadata"])
        for subject in obj.get("subjects") or ():
            assert subject["namespace"] == target, (obj["metadata"]["name"], subject)
    (config_map,) = by_kind(objs, "ConfigMap")
    got = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    assert got["leaderElection"].pop("resourceNamespace") == target
    expected = scheduler_config()
    expected["leaderElection"].pop("resourceNamespace")
    assert got == expected, "the overlay's configuration is the base's but for the lease's namespace"
    (deploy,) = by_kind(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (priority,) = by_kind(objs, "PriorityClass")
    assert pod["priorityClassName"] == priority["metadata"]["name"]
    extender = next(c for c in pod["containers"] if c["name"] == "gang-extender")
    assert extender["args"][extender["args"].index("--leader-lease") + 1].startswith("$(POD_NAMESPACE)/")
