"""The service's memory and initial sync with a large cluster cached (issue 15).

    python -m bench memory [--nodes 15000] [--pods 150000] [--source live,file] [--quick]

Two ways in, each a fresh `gang-extender serve` process:

- live: `serve --kubeconfig` against a stand-in API server run by this bench (aiohttp on loopback)
  that answers discovery, pages lists by `limit`/`continue` as kube-apiserver does, and holds every
  watch open without events. Its objects are shaped like a real API server's: managedFields, full
  status (node images and conditions, pod container statuses), container images, commands, env,
  probes and volumes. Pages are encoded before the service starts, so the stand-in costs no CPU
  while the service syncs.
- file: `serve --cluster FILE` with the same objects in a JSON List (the embedded API server keeps
  the whole objects; the service's store shares or projects them).

A row with no nodes and no pods is measured first for each source: the cost of the interpreter,
numpy, numba and the warmed kernels before any object is cached.

Figures per row: `ready_s` from process start to /readyz 200 (cache synced and kernels warm),
`sync_s` from the first list request to /readyz 200 (live only), `cpu_s` the service's CPU time
(user + system) until ready, which busy neighbours do not inflate, `rss_mib` the resident set once
ready (VmRSS), `peak_mib` the high-water mark (VmHWM). The kernels are compiled into numba's cache
before the first row. Each line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson

PODS_PER_PAGE = 500  # kube.KubeSettings.list_page_size


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _managed(manager: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def make_node(i: int) -> dict[str, Any]:
    """A node as kube-apiserver returns it: labels, managedFields, full status with images."""
    name = f"node-{i:06d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "gpu-8x",
        "topology.kubernetes.io/zone": f"zone-{i // 1024}",
        "topology.kubernetes.io/rack": f"rack-{i // 32:04d}",
        "example.com/block": f"block-{i // 256:03d}",
    }
    conditions = [
        {
            "type": t,
            "status": "False" if t != "Ready" else "True",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "reason": f"Kubelet{t}",
            "message": f"kubelet reports {t}",
        }
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    alloc = {
        "cpu": "64",
        "memory": "256Gi",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "ephemeral-storage": "900Gi",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                _managed("kubelet", {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}}}),
                _managed(
                    "kubelet",
                    {"f:status": {"f:conditions": {f'k:{{"type":"{c["type"]}"}}': {} for c in conditions}}},
                ),
            ],
        },
        "spec": {"podCIDR": f"10.{i // 256}.{i % 256}.0/24", "podCIDRs": [f"10.{i // 256}.{i % 256}.0/24"]},
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"{i:032x}",
                "bootID": f"{i:032x}",
                "kernelVersion": "6.1.0",
                "osImage": "Linux",
                "containerRuntimeVersion": "containerd://1.7.0",
                "kubeletVersion": "v1.30.0",
                "kubeProxyVersion": "v1.30.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [
                        f"registry.example/team/image-{k}@sha256:{k:064x}",
                        f"registry.example/team/image-{k}:v1",
                    ],
                    "sizeBytes": 100_000_000 + k,
                }
                for k in range(20)
            ],
        },
    }


def make_pod(i: int, node: str) -> dict[str, Any]:
    """A running Deployment pod bound to `node`, as kube-apiserver returns it."""
    name = f"web-{i // 10:06d}-{i % 10:05d}"
    env = [{"name": f"VAR_{k}", "value": f"value-{k}-{i}"} for k in range(8)]
    container = {
        "name": "app",
        "image": "registry.example/team/app:v1.2.3",
        "command": ["/bin/app"],
        "args": ["--port=8080", "--log-level=info"],
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": env,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [
            {"name": "kube-api-access", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/sa"}
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 10,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": f"team-{i % 50:02d}",
            "uid": f"10000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "5d8f7c9b6d"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"web-{i // 10:06d}",
                    "uid": f"20000000-0000-4000-8000-{i // 10:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed(
                    "kube-controller-manager",
                    {
                        "f:metadata": {"f:labels": {"f:app": {}, "f:pod-template-hash": {}}},
                        "f:spec": {"f:containers": {'k:{"name":"app"}': {"f:env": {}, "f:image": {}}}},
                    },
                ),
                _managed("kubelet", {"f:status": {"f:conditions": {}, "f:containerStatuses": {}}}),
            ],
        },
        "spec": {
            "containers": [container],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ]
                    },
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": node,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": "10.0.0.1",
            "podIP": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            "podIPs": [{"ip": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"}],
            "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example/team/app:v1.2.3",
                    "imageID": f"registry.example/team/app@sha256:{i:064x}",
                    "containerID": f"containerd://{i:064x}",
                    "started": True,
                }
            ],
            "qosClass": "Burstable",
        },
    }


def cluster_objects(n_nodes: int, n_pods: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [make_node(i) for i in range(n_nodes)]
    pods = [make_pod(i, nodes[i % n_nodes]["metadata"]["name"]) for i in range(n_pods)] if n_nodes else []
    return nodes, pods


def list_pages(kind: str, objs: list[dict[str, Any]], page: int) -> list[bytes]:
    """The list answers kube-apiserver would give, page by page (items carry no apiVersion/kind)."""
    pages: list[bytes] = []
    for start in range(0, max(len(objs), 1), page):
        items = [
            {k: v for k, v in o.items() if k not in ("apiVersion", "kind")}
            for o in objs[start : start + page]
        ]
        more = start + page < len(objs)
        meta = {"resourceVersion": "999999", **({"continue": str(len(pages) + 1)} if more else {})}
        pages.append(
            orjson.dumps({"kind": f"{kind}List", "apiVersion": "v1", "metadata": meta, "items": items})
        )
    return pages


class StandInApi:
    """Just enough of kube-apiserver for the live source's discovery, paged lists and watches."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.pages = {
            "nodes": list_pages("Node", nodes, PODS_PER_PAGE),
            "pods": list_pages("Pod", pods, PODS_PER_PAGE),
        }
        self.first_list_s: float | None = None
        self.bytes_served = 0
        self.closing = asyncio.Event()  # set to end the open watches, so the stand-in stops at once

    def app(self) -> Any:
        from aiohttp import web

        async def apis(_: web.Request) -> web.Response:
            return web.json_response({"kind": "APIGroupList", "groups": []})

        async def core(_: web.Request) -> web.Response:
            return web.json_response({"resources": [{"name": "nodes"}, {"name": "pods"}]})

        async def collection(request: web.Request) -> web.StreamResponse:
            plural = request.match_info["plural"]
            if request.query.get("watch") == "true":
                resp = web.StreamResponse()
                await resp.prepare(request)
                timeout_s = float(request.query.get("timeoutSeconds", "300"))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.closing.wait(), timeout_s)
                return resp
            if self.first_list_s is None:
                self.first_list_s = time.monotonic()
            body = self.pages[plural][int(request.query.get("continue") or 0)]
            self.bytes_served += len(body)
            return web.Response(body=body, content_type="application/json")

        app = web.Application()
        app.router.add_get("/apis", apis)
        app.router.add_get("/api/v1", core)
        app.router.add_get("/api/v1/{plural}", collection)
        return app


def proc_cpu_s(pid: int) -> float:
    """User plus system CPU of the process: unlike wall time, not inflated by busy neighbours."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_mib(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


async def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
    import aiohttp

    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"service exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            try:
                async with session.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        return time.monotonic()
            except OSError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"not ready within {timeout_s}s")


def service_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "nbc-bench-memory"))
    return env


def warm_kernel_cache() -> None:
    """Compile the kernels into the cache first, so no row pays (in time and memory) a cold compile."""
    code = "from extender import placement; placement.warm_up()"
    subprocess.run([sys.executable, "-c", code], env=service_env(), check=True)


async def measure(
    source: str, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], tmp: str, profile_dir: str = ""
) -> dict[str, Any]:
    from aiohttp import web

    port = free_port()
    argv = [sys.executable, "-m", "extender", "serve", "--port", str(port), "--log-level", "WARNING"]
    api: StandInApi | None = None
    runner = None
    if source == "live":
        api = StandInApi(nodes, pods)
        runner = web.AppRunner(api.app(), access_log=None)
        await runner.setup()
        api_port = free_port()
        await web.TCPSite(runner, "127.0.0.1", api_port).start()
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as fh:
            fh.write(
                orjson.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
                        "users": [{"name": "u", "user": {"token": "bench"}}],
                        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                        "current-context": "c",
                    }
                ).decode()
            )
        argv += ["--kubeconfig", kubeconfig, "--podgrouper", "false"]
    else:
        path = os.path.join(tmp, f"cluster-{len(nodes)}-{len(pods)}.json")
        with open(path, "wb") as fh:
            fh.write(orjson.dumps([*nodes, *pods]))
        argv += ["--cluster", path]
    if profile_dir:  # written when SIGTERM ends the service, once its row is measured
        out = os.path.join(profile_dir, f"service-{source}-{len(nodes)}-{len(pods)}.prof")
        argv = [argv[0], "-m", "cProfile", "-o", out, *argv[1:]]
    env = service_env()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        ready = await wait_ready(f"http://127.0.0.1:{port}", proc, timeout_s=1800)
        cpu_s = proc_cpu_s(proc.pid)
        await asyncio.sleep(1.0)  # let the allocator settle; RSS is read once ready
        row = {
            "source": source,
            "nodes": len(nodes),
            "pods": len(pods),
            "ready_s": round(ready - t0, 2),
            "sync_s": round(ready - api.first_list_s, 2) if api and api.first_list_s else None,
            "cpu_s": round(cpu_s, 2),
            "rss_mib": round(proc_status_mib(proc.pid, "VmRSS"), 1),
            "peak_mib": round(proc_status_mib(proc.pid, "VmHWM"), 1),
        }
        if api is not None:
            row["listed_mib"] = round(api.bytes_served / 2**20, 1)
        return row
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if api is not None:
            api.closing.set()
        if runner is not None:
            await runner.cleanup()


async def run(args: argparse.Namespace) -> None:
    sources = [s.strip() for s in args.source.split(",") if s.strip()]
    warm_kernel_cache()
    nodes, pods = cluster_objects(args.nodes, args.pods)
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            for n, p in ([] if args.no_empty else [([], [])]) + [(nodes, pods)]:
                row = await measure(source, n, p, tmp, args.profile_service)
                print(orjson.dumps(row).decode(), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=None, help="nodes (15000; quick 1000)")
    parser.add_argument("--pods", type=int, default=None, help="bound pods (150000; quick 10000)")
    parser.add_argument("--source", default="live,file", help="live, file or both (comma-separated)")
    parser.add_argument("--no-empty", action="store_true", help="skip the row with an empty cluster")
    parser.add_argument("--quick", action="store_true", help="1000 nodes and 10000 pods")
    parser.add_argument(
        "--profile-service",
        default="",
        metavar="DIR",
        help="run the service under cProfile, one file per row here",
    )
    args = parser.parse_args(argv)
    args.nodes = args.nodes if args.nodes is not None else (1000 if args.quick else 15_000)
    args.pods = args.pods if args.pods is not None else (10_000 if args.quick else 150_000)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
