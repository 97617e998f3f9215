"""The chart installed for real: `helm install` (the pinned helm) on the tier's API server, then the pod it
describes played as its kubelet would run it: kube-scheduler with the installed ConfigMap, as the installed
service account, and the extender with the installed token and the Deployment's own arguments. A KAI seed
gang binds whole through them, neither identity is refused anything, and `helm uninstall` takes it all away.

It installs beside the tier's own gang-scheduler (kube-system), under other names (values schedulerName and
extenderName) in a namespace of its own, so the two never share a lease, a profile or a grant.
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import Cluster
from controlplane.start import REPO, free_port, helm_or_skip, object_path, wait_until
from test_e2e_gangs import batch_job, bound_nodes, pods, wait_all_bound

from extender.model import labels as keys

CHART = REPO / "manifests" / "helm" / "gang-extender"
RELEASE, NAMESPACE = "gang-helm", "gang-helm"
SCHEDULER, EXTENDER = "helm-gang-scheduler", "helm-gang-extender"
SERVICE_PROC, SCHEDULER_PROC = "service-helm", "kube-scheduler-helm"


def helm(cluster: Cluster, *args: str) -> str:
    argv = [helm_or_skip(), "--kubeconfig", cluster.plane.kubeconfig, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def extender_args(chart_args: list[str], *, port: int, probe_port: int) -> list[str]:
    """The Deployment's arguments as this machine runs them, after `serve`: the kubeconfig start_service
    gives for the in-cluster token, this machine's ports for the pod's, the downward API's variables
    filled (the pod's name is the hostname kube-scheduler leads under)."""
    assert chart_args[0] == "serve", chart_args
    swap = {"--in-cluster": None, "--host": None, "--port": str(port)}
    swap |= {"--probe-host": "127.0.0.1", "--probe-port": str(probe_port)}
    out: list[str] = []
    flags = iter(chart_args[1:])
    for arg in flags:
        if arg in swap:
            next(flags)  # the pod's value
            local = swap[arg]
            out += [arg, local] if local is not None else []
            continue
        out.append(arg.replace("$(POD_NAMESPACE)", NAMESPACE).replace("$(POD_NAME)", socket.gethostname()))
    return out


@pytest.mark.k8s(
    min="1.25", reason="the chart's kubeVersion is >=1.25 (kubescheduler.config.k8s.io/v1, policy/v1)"
)
def test_helm_install_then_a_seed_gang_binds_whole_through_what_it_installed(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    plane, api = cluster.plane, cluster.plane.api
    values = tmp_path / "values.yaml"
    values.write_text(
        json.dumps(
            {
                "schedulerName": SCHEDULER,
                "extenderName": EXTENDER,
                # the tier's own service keeps the derived PodGroups (one podgrouper in a cluster)
                "extender": {"podgrouper": False},
            }
        )
    )
    helm(cluster, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "-f", str(values))
    offset = plane.audit_offset()
    try:
        installed = [
            d for d in yaml.safe_load_all(helm(cluster, "get", "manifest", RELEASE, "-n", NAMESPACE)) if d
        ]
        kinds = sorted(o["kind"] for o in installed)
        assert (
            kinds.count("Deployment") == 1 and "PriorityClass" in kinds and "PodDisruptionBudget" in kinds
        ), kinds
        (cm,) = [o for o in installed if o["kind"] == "ConfigMap"]
        live_cm = api.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{cm['metadata']['name']}")
        config = tmp_path / "scheduler-config.yaml"
        config.write_text(live_cm["data"]["scheduler-config.yaml"])
        deploy = api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{SCHEDULER}")
        pod = deploy["spec"]["template"]["spec"]
        chart_args = next(c for c in pod["containers"] if c["name"] == "gang-extender")["args"]

        # the identities the pod runs as: the extender's token Secret, filled by the token controller
        secret = f"/api/v1/namespaces/{NAMESPACE}/secrets/{EXTENDER}-token"
        token = wait_until(
            lambda: (api.get(secret).get("data") or {}).get("token"),
            timeout_s=60,
            what="the extender's token",
        )
        extender_kc = plane.write_kubeconfig(
            str(tmp_path / "kubeconfig.extender"), user=EXTENDER, token=base64.b64decode(token).decode()
        )
        scheduler_kc = plane.write_kubeconfig(
            str(tmp_path / "kubeconfig.scheduler"),
            user=SCHEDULER,
            token=plane.request_token(SCHEDULER, NAMESPACE),
        )
        port, probe = free_port(), free_port()
        args = extender_args(chart_args, port=port, probe_port=probe)
        url = plane.start_service(
            name=SERVICE_PROC,
            port=port,
            kubeconfig=extender_kc,
            extra_args=args,
            readyz_url=f"http://127.0.0.1:{probe}",
        )
        plane.start_scheduler(url_prefix=url, config=config, name=SCHEDULER_PROC, kubeconfig=scheduler_kc)

        # the KAI seed's Job gang, for this scheduler: whole, in one rack
        job = batch_job(namespace, "helm-gang", pods_n=3, cpu="1", annotations={keys.BATCH_MIN_MEMBER: "3"})
        job["spec"]["template"]["spec"]["schedulerName"] = SCHEDULER
        api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
        bound = wait_all_bound(api, namespace, 3, "job-name=helm-gang")
        assert len(bound_nodes(bound)) == 3
        binders = {
            (e.get("user") or {}).get("username")
            for e in plane.audit_events_since(offset)
            if (e.get("objectRef") or {}).get("subresource") == "binding"
            and e.get("verb") == "create"
            and (e.get("objectRef") or {}).get("namespace") == namespace
        }
        assert binders == {f"system:serviceaccount:{NAMESPACE}:{EXTENDER}"}, (
            "the installed extender bound the gang"
        )
        refused = plane.forbidden_since(offset, accounts=(SCHEDULER, EXTENDER), namespace=NAMESPACE)
        assert refused == [], "\n".join(refused)
    finally:
        for proc in (SCHEDULER_PROC, SERVICE_PROC):
            if proc in plane.procs:
                plane.kill(proc, signal.SIGTERM)
                del plane.procs[proc]
        helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "60s")
    # nothing it installed is left, cluster-wide objects included
    for obj in installed:
        meta = obj["metadata"]
        status, _ = api.request("GET", object_path(obj), ok=(200, 404))
        assert status == 404, f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']} left after uninstall"
    api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}", ok=(200, 202, 404))
    assert pods(api, namespace, "job-name=helm-gang")  # the workload is the user's: uninstall leaves it
