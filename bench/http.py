"""Filter latency through HTTP, against the null handler, side by side in one run.

    python -m bench http [--quick] [--nodes 1000,5000,15000] [--gangs 100]

Both services run as separate processes on loopback; one client sends filter calls one at a time
(kube-scheduler sends filter from its serial cycle) with every node name, as in names mode with
`percentageOfNodesToScore: 100`. Calls to the real service and the null handler alternate, so
noise from other tenants falls on both. Cases per cluster size:

- null:          the null handler (bench/null_extender.py): decodes the body, answers one name
- null-echo:     the null handler with --echo: decodes the body and answers every offered name, as any
                 extender that passes a plain pod must (the yardstick of the plain cases)
- plain:         a plain pod, offered the same list each call (its fast path compares it as bytes)
- plain-shuffled: a plain pod offered the names in a new order each call, as kube-scheduler's parallel
                 filters return them (its fast path maps every name
                 to a row by fingerprint, bench/names.py)
- gang-plan:     a gang's first member with quorum present: plans and reserves 8 pods in a rack
- gang-planned:  a member whose plan already names its node: answered without decoding the names
- gang-all:      every gang member's filter call together (1 planning + 7 planned calls per gang)

Each line printed is one JSON object; ratios are to the null handler's p50 in the same run
(`ratio_to_null_p50`) and to the echoing one's (`ratio_to_echo_p50`).
Server CPU per call is read from /proc (robust to a noisy neighbour).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson

from extender.sim.cluster import topology

GANG_SIZE = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_cluster(n_nodes: int, n_gangs: int) -> list[dict[str, Any]]:
    """Racks of 32 nodes, blocks of 256; n_gangs KAI PodGroups of 8 pods each, rack-constrained."""
    objs: list[dict[str, Any]] = [topology("dc")]
    for i in range(n_nodes):
        alloc = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"node-{i:06d}",
                    "labels": {
                        "kubernetes.io/hostname": f"node-{i:06d}",
                        "topology.kubernetes.io/rack": f"rack-{i // 32:04d}",
                        "example.com/block": f"block-{i // 256:03d}",
                    },
                },
                "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    for g in range(n_gangs):
        objs.append(
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": f"gang-{g}", "namespace": "bench"},
                "spec": {
                    "minMember": GANG_SIZE,
                    "queue": "default",
                    "topologyConstraint": {
                        "topology": "dc",
                        "requiredTopologyLevel": "topology.kubernetes.io/rack",
                    },
                },
            }
        )
        for m in range(GANG_SIZE):
            objs.append(bench_pod(f"gang-{g}-{m}", group=f"gang-{g}", gpu="1"))
    objs.append(bench_pod("plain", group=None, gpu=None))
    return objs


def bench_pod(name: str, *, group: str | None, gpu: str | None) -> dict[str, Any]:
    req = {"cpu": "4", "memory": "16Gi"}
    if gpu:
        req["nvidia.com/gpu"] = gpu
    meta: dict[str, Any] = {"name": name, "namespace": "bench", "uid": f"uid-{name}"}
    if group:
        meta["annotations"] = {"pod-group-name": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "gang-scheduler",
            "containers": [{"name": "c", "resources": {"requests": req}}],
        },
        "status": {"phase": "Pending"},
    }


class Server:
    def __init__(self, argv: list[str], port: int) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.url = f"http://127.0.0.1:{port}"

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def wait_ready(session: Any, server: Server, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.url} exited: {server.proc.stderr.read().decode()[-2000:]}")
        try:
            async with session.get(server.url + "/readyz") as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{server.url} was not ready within {timeout_s}s")


async def call(session: Any, url: str, body: bytes) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    async with session.post(url + "/filter", data=body, headers={"Content-Type": "application/json"}) as resp:
        raw = await resp.read()
    ms = (time.perf_counter() - t0) * 1000
    if resp.status != 200:
        raise RuntimeError(f"filter answered {resp.status}: {raw[:300]!r}")
    return ms, orjson.loads(raw)


def filter_body(pod: dict[str, Any], names: list[str]) -> bytes:
    # Go marshals ExtenderArgs in field order: Pod, Nodes, NodeNames
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


def summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "p50_ms": round(statistics.median(s), 3),
        "p90_ms": round(s[int(0.9 * (len(s) - 1))], 3),
        "n": len(s),
    }


async def bench_size(n_nodes: int, n_gangs: int, rounds: int) -> list[dict[str, Any]]:
    import aiohttp

    objs = make_cluster(n_nodes, n_gangs)
    pods = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Pod"}
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cluster.json")
        with open(path, "wb") as fh:
            fh.write(orjson.dumps(objs))
        real_port, null_port, echo_port = free_port(), free_port(), free_port()
        real = Server(
            [
                sys.executable,
                "-m",
                "extender",
                "serve",
                "--cluster",
                path,
                "--port",
                str(real_port),
                "--log-level",
                "WARNING",
            ],
            real_port,
        )
        null = Server([sys.executable, "-m", "bench.null_extender", "--port", str(null_port)], null_port)
        echo = Server(
            [sys.executable, "-m", "bench.null_extender", "--port", str(echo_port), "--echo"], echo_port
        )
        try:
            async with aiohttp.ClientSession() as session:
                await wait_ready(session, real)
                await wait_ready(session, null)
                await wait_ready(session, echo)
                plain_body = filter_body(pods["plain"], names)
                for _ in range(5):  # warm both
                    await call(session, null.url, plain_body)
                    await call(session, echo.url, plain_body)
                    await call(session, real.url, plain_body)
                samples: dict[str, list[float]] = {
                    "null": [],
                    "null-echo": [],
                    "plain": [],
                    "plain-shuffled": [],
                    "gang-plan": [],
                    "gang-planned": [],
                }
                cpu: dict[str, float] = dict.fromkeys(samples, 0.0)

                async def timed(case: str, server: Server, body: bytes) -> dict[str, Any]:
                    c0 = server.cpu_s()
                    ms, doc = await call(session, server.url, body)
                    cpu[case] += server.cpu_s() - c0
                    samples[case].append(ms)
                    return doc

                rng = random.Random(15)
                shuffled = []
                for _ in range(16):
                    order = list(names)
                    rng.shuffle(order)
                    shuffled.append(filter_body(pods["plain"], order))
                for _ in range(rounds):
                    await timed("null", null, plain_body)
                    await timed("null-echo", echo, plain_body)
                    await timed("plain", real, plain_body)
                for i in range(rounds):  # after "plain": its list stays among those the service knows
                    await timed("null", null, shuffled[i % len(shuffled)])
                    await timed("null-echo", echo, shuffled[i % len(shuffled)])
                    await timed("plain-shuffled", real, shuffled[i % len(shuffled)])
                for g in range(n_gangs):
                    await timed("null", null, plain_body)
                    doc = await timed("gang-plan", real, filter_body(pods[f"gang-{g}-0"], names))
                    if len(doc["NodeNames"]) != 1:
                        raise RuntimeError(f"gang-{g} was not planned: {doc}")
                    for m in range(1, GANG_SIZE):
                        await timed("null", null, plain_body)
                        doc = await timed("gang-planned", real, filter_body(pods[f"gang-{g}-{m}"], names))
                        if len(doc["NodeNames"]) != 1:
                            raise RuntimeError(f"gang-{g}-{m} lost its plan: {doc}")
        finally:
            real.stop()
            null.stop()
            echo.stop()
    # what kube-scheduler sends for a gang: one planning call, then each member's planned call
    samples["gang-all"] = samples["gang-plan"] + samples["gang-planned"]
    cpu["gang-all"] = cpu["gang-plan"] + cpu["gang-planned"]
    null_p50 = statistics.median(samples["null"])
    echo_p50 = statistics.median(samples["null-echo"])
    out = []
    for case, s in samples.items():
        row: dict[str, Any] = {"bench": "http-filter", "nodes": n_nodes, "case": case, **summary(s)}
        row["ratio_to_null_p50"] = round(statistics.median(s) / null_p50, 2)
        row["ratio_to_echo_p50"] = round(statistics.median(s) / echo_p50, 2)
        row["server_cpu_ms_per_call"] = round(1000 * cpu[case] / max(1, len(s)), 3)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench http", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, 1k and 5k nodes only")
    parser.add_argument(
        "--nodes", default=None, help="comma-separated cluster sizes (default 1000,5000,15000)"
    )
    parser.add_argument(
        "--gangs", type=int, default=None, help="gangs planned per size (default 60; quick 20)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="plain-pod calls per size (default 300; quick 100)"
    )
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.nodes or ("1000,5000" if args.quick else "1000,5000,15000")).split(",")]
    gangs = args.gangs or (20 if args.quick else 60)
    rounds = args.rounds or (100 if args.quick else 300)
    for n in sizes:
        for row in asyncio.run(bench_size(n, gangs, rounds)):
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
