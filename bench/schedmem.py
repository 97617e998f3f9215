"""kube-scheduler's own memory with a large cluster cached: what the shipped Deployment's memory limit for
its kube-scheduler container must hold (issue 23).

    python -m bench schedmem [--nodes 15000] [--pods 150000] [--pending 1000] [--k8s 1.36.2] [--quick]

A real control plane of that version (etcd, kube-apiserver; the e2e tier's, built once per machine), with
`--nodes` nodes (64 CPU each, racks and blocks labelled) and `--pods` pods already bound across them, then a
fresh kube-scheduler with the shipped configuration (leader election off; no extender, whose process is
measured by `bench memory`): its resident set once its informers are synced (`/readyz`), then while it
schedules `--pending` plain pods with the shipped profile (percentageOfNodesToScore 100, MostAllocated),
and its high-water mark (VmHWM). Each line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.memory import proc_status_mib
from bench.scheduler import node_object, pod_object

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from controlplane.start import (
    CURRENT_VERSION,
    REPO,
    TOKEN,
    VERSIONS,
    ControlPlane,
    PlaneUnavailable,
    free_port,
    substitute_scheduler_config,
    wait_until,
)

CONCURRENCY = 48
NAMESPACE = "schedmem"


def status_mib(pid: int, field: str) -> float:
    return round(proc_status_mib(pid, field), 1)


async def create_all(server: str, items: list[tuple[str, dict[str, Any]]]) -> float:
    """POST every (path, object), CONCURRENCY at a time; the seconds it took."""
    t0 = time.monotonic()
    it = iter(items)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=CONCURRENCY + 4, ssl=False)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def worker() -> None:
            for path, obj in it:
                async with session.post(server + path, data=orjson.dumps(obj)) as resp:
                    if resp.status not in (200, 201, 409):
                        raise RuntimeError(f"POST {path} -> {resp.status}: {(await resp.read())[:300]!r}")

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return time.monotonic() - t0


def bound_pod(i: int, nodes: int) -> dict[str, Any]:
    pod = pod_object(f"r{i:06d}", namespace=NAMESPACE, cpu="100m", group=None, run="resident")
    pod["spec"]["nodeName"] = f"node-{i % nodes:05d}"
    return pod


def readyz(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench schedmem", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=None, help="nodes (default 15000; quick 1000)")
    parser.add_argument("--pods", type=int, default=None, help="bound pods (default 150000; quick 5000)")
    parser.add_argument(
        "--pending", type=int, default=None, help="pods it schedules (default 1000; quick 100)"
    )
    parser.add_argument("--k8s", default=CURRENT_VERSION, choices=[v for v in VERSIONS if v != "1.20.2"])
    parser.add_argument("--quick", action="store_true", help="1000 nodes, 5000 pods, 100 pending")
    args = parser.parse_args(argv)
    nodes = args.nodes or (1000 if args.quick else 15000)
    pods = args.pods if args.pods is not None else (5000 if args.quick else 150000)
    pending = args.pending if args.pending is not None else (100 if args.quick else 1000)
    try:
        plane = ControlPlane(controller_manager=False, version=args.k8s)
    except PlaneUnavailable as exc:
        print(f"control plane unavailable: {exc}", file=sys.stderr)
        return 2
    row: dict[str, Any] = {
        "bench": "schedmem",
        "k8s": args.k8s,
        "nodes": nodes,
        "pods": pods,
        "pending": pending,
    }
    try:
        plane.start()
        plane.api.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        row["create_nodes_s"] = round(
            asyncio.run(create_all(plane.server, [("/api/v1/nodes", node_object(i)) for i in range(nodes)])),
            1,
        )
        print(f"# {nodes} nodes in {row['create_nodes_s']} s", file=sys.stderr, flush=True)
        items = [(f"/api/v1/namespaces/{NAMESPACE}/pods", bound_pod(i, nodes)) for i in range(pods)]
        row["create_pods_s"] = round(asyncio.run(create_all(plane.server, items)), 1)
        print(f"# {pods} bound pods in {row['create_pods_s']} s", file=sys.stderr, flush=True)
        shipped = yaml.safe_load((REPO / "manifests" / "base" / "scheduler-config.yaml").read_text())
        cfg = substitute_scheduler_config(
            shipped, url_prefix="http://127.0.0.1:1", kubeconfig=plane.kubeconfig
        )
        cfg.pop("extenders")
        cfg["leaderElection"] = {"leaderElect": False}
        path = plane.workdir / "schedmem-config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        port = free_port()
        t0 = time.monotonic()
        plane._spawn(
            "kube-scheduler",
            [
                plane.bins["kube-scheduler"],
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--v=1",
            ],
        )
        pid = plane.procs["kube-scheduler"].pid
        wait_until(lambda: readyz(port), timeout_s=600, interval_s=0.5, what="kube-scheduler's /readyz")
        row["ready_s"] = round(time.monotonic() - t0, 1)
        time.sleep(5)  # the caches' first snapshot settles
        row["rss_synced_mib"] = status_mib(pid, "VmRSS")
        new = [
            (
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                pod_object(f"p{i:05d}", namespace=NAMESPACE, cpu="10m", group=None, run="pending"),
            )
            for i in range(pending)
        ]
        t1 = time.monotonic()
        asyncio.run(create_all(plane.server, new))

        def scheduled() -> bool:
            listed = plane.api.get(
                f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=bench-run%3Dpending&limit=5000"
            )
            return sum(1 for p in listed["items"] if p["spec"].get("nodeName")) >= pending

        wait_until(scheduled, timeout_s=900, interval_s=2, what=f"{pending} pods scheduled")
        row["schedule_s"] = round(time.monotonic() - t1, 1)
        row["rss_after_mib"] = status_mib(pid, "VmRSS")
        row["peak_mib"] = status_mib(pid, "VmHWM")
        row["apiserver_peak_mib"] = status_mib(plane.procs["kube-apiserver"].pid, "VmHWM")
    except (PlaneUnavailable, RuntimeError, AssertionError) as exc:
        print(f"bench failed: {exc}\n# logs in {plane.workdir}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
