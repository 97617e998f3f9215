"""Scheduling throughput through a real kube-scheduler (1.20, 1.36, 1.37) calling the service.

    python -m bench.scheduler [--quick] [--nodes 1000] [--pods 2000] [--series 3] [--configs A,B,C,D,E,N]
                              [--k8s 1.36.2|1.37.2|1.20.2]

One loopback control plane (tests/e2e/controlplane/start.py: etcd + kube-apiserver; the
controller-manager is left out, nothing here needs it) with fake Nodes (cpu 64, memory 256Gi,
pods 110, Ready; racks of 32, blocks of 256). Each series runs these back to back, each with a
fresh kube-scheduler and a fresh `python -m extender serve --kubeconfig`:

- A: kube-scheduler alone, plain pods
- B: + the service with filter + bind (+ preempt, only called on failure), nodeCacheCapable
- C: + filter + prioritize + bind (+ preempt)
- D: configuration B with gangs: KAI PodGroups of 8 pods, required to share one rack of Topology dc
- E: configuration B with kube-scheduler's own bin-packing score (NodeResourcesMostAllocated in place of
     NodeResourcesLeastAllocated and NodeResourcesBalancedAllocation), the in-tree alternative to our
     prioritize for plain pods
- N: the null extender (bench/null_extender.py --echo) with E's verbs and scoring: filter passes every
     offered node, bind POSTs the Binding; the yardstick of E (issue 15: E keeps at least 0.95x of N)
- F (only on request): configuration C with D's gangs

Rate = pods / (first create sent -> last spec.nodeName seen on a watch), after one warm-up pod.
Pods are created 32 at a time with aiohttp (token auth), in order, so a gang's members arrive together.
Every run prints one JSON object; the summary prints medians, ratios to A and to N in the same series, and a
Markdown table. Per-process CPU comes from /proc; the scheduling-cycle time from kube-scheduler's
scheduler_scheduling_algorithm_duration_seconds (1.20: its insecure metrics port; newer: the secure one);
"other cores" is what the rest of the machine (other tenants) used during the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.memory import proc_status_mib
from bench.podwatch import PodWatch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from controlplane.start import (  # noqa: E402  (the e2e tier is not a package)
    CURRENT_VERSION,
    LEGACY_VERSION,
    SCHEDULER_NAME,
    TOKEN,
    VERSIONS,
    ControlPlane,
    PlaneUnavailable,
    convert_scheduler_config,
    free_port,
    substitute_scheduler_config,
    wait_until,
)

RACK_NODES, BLOCK_NODES = 32, 256
RACK_LABEL, BLOCK_LABEL = "topology.kubernetes.io/rack", "example.com/block"
POD_GROUP_ANNOTATION = "pod-group-name"  # extender.model.labels.POD_GROUP_NAME
RUN_LABEL = "bench-run"
CREATE_CONCURRENCY = 32
TOPOLOGY = {
    "apiVersion": "kai.scheduler/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "dc"},
    "spec": {
        "levels": [{"nodeLabel": BLOCK_LABEL, "alias": "block"}, {"nodeLabel": RACK_LABEL, "alias": "rack"}]
    },
}


@dataclass(frozen=True)
class Variant:
    """One configuration under test: which verbs kube-scheduler sends to the service, and the workload."""

    name: str
    title: str
    verbs: tuple[str, ...]  # empty: no extender at all
    gangs: bool = False
    most_allocated: bool = False  # in-tree bin-packing score in place of NodeResourcesLeastAllocated
    null: bool = False  # the null extender in place of the service


VARIANTS = {
    "A": Variant("A", "kube-scheduler alone", ()),
    "B": Variant("B", "+ filter + bind", ("filter", "bind", "preempt")),
    "C": Variant("C", "+ filter + prioritize + bind", ("filter", "prioritize", "bind", "preempt")),
    "D": Variant("D", "B with gangs of 8 in one rack", ("filter", "bind", "preempt"), gangs=True),
    "E": Variant("E", "B + in-tree MostAllocated", ("filter", "bind", "preempt"), most_allocated=True),
    "N": Variant(
        "N", "null extender, E's verbs", ("filter", "bind", "preempt"), most_allocated=True, null=True
    ),
    # Not in the default run: shows that gang members are never prioritized (their filter answer holds
    # one node, and kube-scheduler skips scoring when one node is feasible).
    "F": Variant(
        "F", "C with gangs of 8 in one rack", ("filter", "prioritize", "bind", "preempt"), gangs=True
    ),
}


@dataclass(frozen=True)
class Settings:
    nodes: tuple[int, ...]
    pods: int
    series: int
    variants: tuple[str, ...]
    gang_size: int = 8
    pod_cpu: str = "10m"
    run_timeout_s: float = 180.0
    keep_dir: bool = False
    profile_dir: str = ""  # run the service under cProfile, one file per run here
    k8s: str = CURRENT_VERSION  # the control plane's and kube-scheduler's version


@dataclass
class Proc:
    """A child process of this bench (its own session, so it is stopped by its process group)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def cpu_s(self) -> float:
        try:
            with open(f"/proc/{self.popen.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def peak_rss_mib(self) -> float:
        """The process's peak resident memory so far (VmHWM), what a container's memory limit must hold."""
        try:
            return round(proc_status_mib(self.popen.pid, "VmHWM"), 1)
        except (OSError, RuntimeError):
            return 0.0

    def tail(self, lines: int = 8) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)


def spawn(name: str, argv: list[str], *, workdir: Path, cwd: Path | None = None) -> Proc:
    log = workdir / f"{name}.log"
    with open(log, "wb") as fh:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        popen = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=cwd
        )
    return Proc(name, popen, log)


def pid_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds spent by everything on the machine (all cores), from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------------- objects


def node_object(i: int) -> dict[str, Any]:
    name = f"node-{i:05d}"
    res = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                RACK_LABEL: f"rack-{i // RACK_NODES:04d}",
                BLOCK_LABEL: f"block-{i // BLOCK_NODES:03d}",
            },
        },
        # Nodes accept status on create, so one request per node; no kubelet ever heartbeats them.
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def rack_of_node(name: str) -> str:
    return f"rack-{int(name.rsplit('-', 1)[1]) // RACK_NODES:04d}"


def pod_object(name: str, *, namespace: str, cpu: str, group: str | None, run: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {RUN_LABEL: run}}
    if group:
        meta["annotations"] = {POD_GROUP_ANNOTATION: group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "sleep:v0.1.0", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
    }


def pod_group_object(name: str, *, namespace: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "minMember": size,
            "queue": "default",
            "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "topology.kubernetes.io/rack"},
        },
    }


def scheduler_config(variant: Variant, *, url: str, kubeconfig: str, legacy: bool = True) -> dict[str, Any]:
    """The shipped configuration (v1beta1 for 1.20 when `legacy`, else v1 as shipped), with only the
    verbs this variant tests and bench settings.

    Leader election is off (one scheduler at a time, and a fresh one need not wait for the lease);
    client qps/burst are raised so that A's in-tree binds are not throttled at the default 50/s.
    """
    shipped = yaml.safe_load((REPO / "manifests" / "base" / "scheduler-config.yaml").read_text())
    convert = convert_scheduler_config if legacy else substitute_scheduler_config
    cfg = convert(shipped, url_prefix=url, kubeconfig=kubeconfig)
    cfg["leaderElection"] = {"leaderElect": False}
    cfg["clientConnection"].update(qps=5000, burst=5000)
    if not legacy:
        # v1: the shipped profile's scoring is E's (MostAllocated, BalancedAllocation off); the
        # others take kube-scheduler's defaults
        for profile in cfg["profiles"]:
            profile["percentageOfNodesToScore"] = 100
            if not variant.most_allocated:
                profile.pop("plugins", None)
                profile.pop("pluginConfig", None)
    else:
        cfg["percentageOfNodesToScore"] = 100
        for profile in cfg["profiles"]:
            profile.pop("plugins", None)  # each variant states its own scoring: kube-scheduler's defaults...
    if variant.most_allocated and legacy:
        # ...or bin-packing, with 1.20 (v1beta1) plugin names. BalancedAllocation goes too: at equal
        # weight it outvotes MostAllocated for cpu-only requests (each pod skews cpu against memory).
        for profile in cfg["profiles"]:
            profile["plugins"] = {
                "score": {
                    "disabled": [
                        {"name": "NodeResourcesLeastAllocated"},
                        {"name": "NodeResourcesBalancedAllocation"},
                    ],
                    "enabled": [{"name": "NodeResourcesMostAllocated", "weight": 1}],
                }
            }
    if not variant.verbs:
        cfg.pop("extenders", None)
        return cfg
    (ext,) = cfg["extenders"]
    for verb in ("filter", "prioritize", "bind", "preempt"):
        if verb in variant.verbs:
            ext[f"{verb}Verb"] = verb
        else:
            ext.pop(f"{verb}Verb", None)
    if "prioritize" in variant.verbs:
        ext["weight"] = 5  # required (> 0) with a prioritize verb; the shipped file has none
    else:
        ext.pop("weight", None)
    return cfg


# ---------------------------------------------------------------------------------- metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE  # kube-scheduler's secure port serves a self-signed certificate


def scrape(url: str) -> dict[str, float]:
    """Prometheus text as {name{labels}: value}; empty when the endpoint does not answer."""
    try:
        context = _UNVERIFIED if url.startswith("https:") else None
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            with contextlib.suppress(ValueError):
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


# ---------------------------------------------------------------------------------- the run


@dataclass
class Bench:
    plane: ControlPlane
    settings: Settings
    workdir: Path
    session: Any = None
    node_count: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    async def post(self, path: str, obj: dict[str, Any], *, ok: tuple[int, ...] = (200, 201)) -> Any:
        async with self.session.post(self.plane.server + path, data=orjson.dumps(obj)) as resp:
            raw = await resp.read()
            if resp.status not in ok:
                raise RuntimeError(f"POST {path} -> {resp.status}: {raw[:300]!r}")
            return orjson.loads(raw) if raw else None

    async def create_all(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        """POST every (path, object) in order, CREATE_CONCURRENCY at a time."""
        it = iter(items)

        async def worker() -> None:
            for path, obj in it:
                await self.post(path, obj, ok=(200, 201, 409))

        await asyncio.gather(*(worker() for _ in range(CREATE_CONCURRENCY)))

    async def grow_nodes(self, total: int) -> None:
        t0 = time.monotonic()
        items = [("/api/v1/nodes", node_object(i)) for i in range(self.node_count, total)]
        await self.create_all(items)
        got = self.plane.api.get(f"/api/v1/nodes/node-{total - 1:05d}")
        alloc = (got.get("status") or {}).get("allocatable") or {}
        if alloc.get("cpu") != "64":  # older servers drop status on create: set it through /status
            for _, obj in items:
                name = obj["metadata"]["name"]
                self.plane.api.patch(
                    f"/api/v1/nodes/{name}/status", {"status": obj["status"]}, kind="strategic"
                )
        self.node_count = total
        print(f"# {total} nodes ready in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)

    # -- processes ---------------------------------------------------------------------------

    def start_service(self, tag: str, *, null: bool = False, args: tuple[str, ...] = ()) -> tuple[Proc, str]:
        port = free_port()
        python = REPO / ".venv" / "bin" / "python"
        argv = [str(python if python.exists() else sys.executable), "-m", "extender", "serve"]
        argv += ["--kubeconfig", self.plane.kubeconfig, "--port", str(port), "--log-level", "WARNING", *args]
        # versus builds its Bench without scheduler settings: nothing to profile there
        profile_dir = getattr(self.settings, "profile_dir", "")
        if profile_dir and not null:  # written when SIGTERM ends the run
            out = Path(profile_dir) / f"service-{tag}.prof"
            argv = [argv[0], "-m", "cProfile", "-o", str(out), *argv[1:]]
        if null:
            token = self.workdir / "null-token"
            token.write_text(TOKEN)
            argv = [argv[0], "-m", "bench.null_extender", "--echo", "--port", str(port)]
            argv += ["--api-server", self.plane.server, "--token-file", str(token)]
        spawned = time.monotonic()
        proc = spawn(f"service-{tag}", argv, workdir=self.workdir, cwd=REPO)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            if not proc.alive():
                raise RuntimeError(f"the service exited: {proc.tail()}")
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        try:
            wait_until(ready, timeout_s=180, interval_s=0.2, what="the service's /readyz")
        except BaseException:
            proc.stop()
            raise
        if not null:  # the rate is steady state's: past the service's start-up bind fence (5 s)
            time.sleep(max(0.0, spawned + 5.0 - time.monotonic()))
        return proc, url

    def start_scheduler(self, variant: Variant, *, url: str, tag: str) -> tuple[Proc, str]:
        legacy = self.plane.version == LEGACY_VERSION
        cfg = scheduler_config(variant, url=url, kubeconfig=self.plane.kubeconfig, legacy=legacy)
        secure_port = free_port()
        argv = [
            self.plane.bins["kube-scheduler"],
            "--bind-address=127.0.0.1",
            f"--secure-port={secure_port}",
            "--v=1",
        ]
        if legacy:
            # With --config, 1.20 takes the insecure (deprecated, unauthenticated) /metrics address
            # from the file, not from --port; left unset it binds 10251 on every interface, shared by
            # other planes.
            metrics_addr = f"127.0.0.1:{free_port()}"
            cfg["healthzBindAddress"] = cfg["metricsBindAddress"] = metrics_addr
            metrics = f"http://{metrics_addr}/metrics"
        else:
            # newer releases serve /metrics only on the secure port: let it be read without a token
            argv += [
                f"--authentication-kubeconfig={self.plane.kubeconfig}",
                f"--authorization-kubeconfig={self.plane.kubeconfig}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            ]
            metrics = f"https://127.0.0.1:{secure_port}/metrics"
        path = self.workdir / f"scheduler-{tag}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        argv.insert(1, f"--config={path}")
        proc = spawn(f"kube-scheduler-{tag}", argv, workdir=self.workdir)

        def up() -> bool:
            if not proc.alive():
                raise RuntimeError(f"kube-scheduler exited: {proc.tail()}")
            return bool(scrape(metrics))

        try:
            wait_until(up, timeout_s=60, interval_s=0.2, what="kube-scheduler's metrics endpoint")
        except BaseException:
            proc.stop()
            raise
        return proc, metrics

    # -- one run -----------------------------------------------------------------------------

    async def bound_watch(self, namespace: str, run: str, expected: int, deadline_s: float) -> dict[str, Any]:
        """Open a watch on the run's pods; returns a handle whose wait records when each pod got a node.

        The watch runs on a thread of its own (bench/podwatch.py) and resumes where it was cut:
        kube-apiserver 1.36 force-closes a watcher that falls behind a burst of binds, which ended the
        old in-loop watch after a few dozen of them (the run then looked stuck)."""
        loop = asyncio.get_running_loop()
        bound: dict[str, tuple[float, str]] = {}
        done = asyncio.Event()

        def observe(kind: str, pod: dict[str, Any], now: float) -> None:
            meta = pod.get("metadata") or {}
            if (meta.get("labels") or {}).get(RUN_LABEL) != run or kind not in ("ADDED", "MODIFIED"):
                return
            node = (pod.get("spec") or {}).get("nodeName")
            if node and meta.get("name") not in bound:
                bound[meta["name"]] = (now, node)
                if len(bound) >= expected:
                    loop.call_soon_threadsafe(done.set)

        watch = PodWatch(self.plane.server, f"/api/v1/namespaces/{namespace}/pods", observe, token=TOKEN)
        await asyncio.to_thread(watch.start)

        async def wait() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), deadline_s)
            watch.stop(wait_s=0)

        return {"bound": bound, "wait": wait}

    async def run(self, variant: Variant, *, series: int, nodes: int) -> dict[str, Any]:
        s = self.settings
        tag = f"{nodes}-{series}-{variant.name}"
        namespace = f"tput-{tag.lower()}"
        run = tag
        api = self.plane.api
        api.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        gangs = s.pods // s.gang_size if variant.gangs else 0
        n_pods = gangs * s.gang_size if variant.gangs else s.pods
        if gangs:  # the groups exist before the service lists, as a Job's PodGroup exists before its pods
            groups = [
                (
                    f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups",
                    pod_group_object(f"g{g:04d}", namespace=namespace, size=s.gang_size),
                )
                for g in range(gangs)
            ]
            await self.create_all(groups)
        procs: list[Proc] = []
        try:
            url = "http://127.0.0.1:1"
            service: Proc | None = None
            t_start = time.monotonic()
            if variant.verbs:
                service, url = self.start_service(tag, null=variant.null)
                procs.append(service)
            t_service = time.monotonic() - t_start
            scheduler, metrics_url = self.start_scheduler(variant, url=url, tag=tag)
            procs.append(scheduler)
            # Warm-up: one plain pod through the whole path, so informers are synced and connections open.
            warm = pod_object("warmup", namespace=namespace, cpu=s.pod_cpu, group=None, run="warmup")
            await self.post(f"/api/v1/namespaces/{namespace}/pods", warm)
            wait_until(
                lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/warmup")["spec"].get("nodeName"),
                timeout_s=60,
                interval_s=0.1,
                what=f"the warm-up pod bound ({variant.name})",
            )
            if gangs:
                pods = [
                    pod_object(
                        f"g{g:04d}-{m}", namespace=namespace, cpu=s.pod_cpu, group=f"g{g:04d}", run=run
                    )
                    for g in range(gangs)
                    for m in range(s.gang_size)
                ]
            else:
                pods = [
                    pod_object(f"p{i:05d}", namespace=namespace, cpu=s.pod_cpu, group=None, run=run)
                    for i in range(n_pods)
                ]
            items = [(f"/api/v1/namespaces/{namespace}/pods", p) for p in pods]
            watch = await self.bound_watch(namespace, run, n_pods, s.run_timeout_s)
            others = {
                "apiserver": self.plane.procs["kube-apiserver"].pid,
                "etcd": self.plane.procs["etcd"].pid,
            }
            cpu0 = {"scheduler": scheduler.cpu_s(), "service": service.cpu_s() if service else 0.0}
            cpu0 |= {k: pid_cpu(p) for k, p in others.items()}
            cpu0["driver"] = self_cpu_s()
            cpu0["machine"] = machine_busy_s()
            m0 = scrape(metrics_url)
            e0 = scrape(url + "/metrics") if service else {}
            t0 = time.monotonic()
            await self.create_all(items)
            t_created = time.monotonic()
            await watch["wait"]()
            t_end = time.monotonic()
            bound: dict[str, tuple[float, str]] = watch["bound"]
            cpu1 = {"scheduler": scheduler.cpu_s(), "service": service.cpu_s() if service else 0.0}
            cpu1 |= {k: pid_cpu(p) for k, p in others.items()}
            cpu1["driver"] = self_cpu_s()
            cpu1["machine"] = machine_busy_s()
            m1 = scrape(metrics_url)
            e1 = scrape(url + "/metrics") if service else {}
            peak_mib = {
                "scheduler": scheduler.peak_rss_mib(),
                "service": service.peak_rss_mib() if service else 0.0,
            }
        finally:
            for proc in reversed(procs):
                proc.stop()
        times = sorted(t for t, _ in bound.values())
        complete = len(bound) >= n_pods
        last = times[-1] if times else t_end
        elapsed = last - t0
        row: dict[str, Any] = {
            "bench": "scheduler",
            "nodes": nodes,
            "series": series,
            "config": variant.name,
            "title": variant.title,
            "pods": n_pods,
            "bound": len(bound),
            "complete": complete,
            "pods_per_s": round(len(bound) / elapsed, 1) if elapsed > 0 else 0.0,
            "elapsed_s": round(elapsed, 2),
            "create_s": round(t_created - t0, 2),
            "service_start_s": round(t_service, 1),
            "scheduler_peak_rss_mib": peak_mib["scheduler"],
        }
        if service:
            row["service_peak_rss_mib"] = peak_mib["service"]
        if len(times) >= 10:
            i10, i90 = int(0.1 * (len(times) - 1)), int(0.9 * (len(times) - 1))
            row["p10_p90_pods_per_s"] = round((i90 - i10) / max(1e-9, times[i90] - times[i10]), 1)
        if gangs:
            row |= self.check_gangs(bound, gangs=gangs, elapsed_s=elapsed)
        count = delta(m1, m0, "scheduler_scheduling_algorithm_duration_seconds_count")
        if count:
            algo_s = delta(m1, m0, "scheduler_scheduling_algorithm_duration_seconds_sum")
            row["cycle_ms_per_attempt"] = round(1000 * algo_s / count, 2)
            row["attempts"] = int(count)
        span = max(1e-9, t_end - t0)
        per_pod = max(1, len(bound))
        used = {k: cpu1[k] - cpu0[k] for k in cpu0}
        # Whatever else ran on the box meanwhile (other tenants): the noise floor of this run.
        used["other"] = max(0.0, used.pop("machine") - sum(used.values()))
        for k, cpu_s in used.items():
            if k == "service" and not service:
                continue
            if k != "other":
                row[f"cpu_ms_per_pod_{k}"] = round(1000 * cpu_s / per_pod, 2)
            row[f"cores_{k}"] = round(cpu_s / span, 2)
        row["nodes_used"] = len({node for _, node in bound.values()})
        if service:
            for verb in ("filter", "prioritize", "bind", "preempt"):
                key = f'gang_extender_request_seconds_count{{verb="{verb}"}}'
                calls = delta(e1, e0, key)
                if calls:
                    sum_s = delta(e1, e0, f'gang_extender_request_seconds_sum{{verb="{verb}"}}')
                    row[f"{verb}_calls"] = int(calls)
                    row[f"{verb}_ms_mean"] = round(1000 * sum_s / calls, 3)
            fast = delta(e1, e0, "gang_extender_filter_fast_path_total")
            if fast:
                row["filter_fast_path"] = int(fast)
            plain_fast = delta(e1, e0, "gang_extender_filter_plain_fast_path_total")
            if plain_fast:
                row["filter_plain_fast_path"] = int(plain_fast)
        await self.clean(namespace, gangs=bool(gangs))
        return row

    def check_gangs(
        self, bound: dict[str, tuple[float, str]], *, gangs: int, elapsed_s: float
    ) -> dict[str, Any]:
        """Every gang bound whole, and all its members in one rack."""
        members: dict[str, list[str]] = {}
        for name, (_, node) in bound.items():
            members.setdefault(name.rsplit("-", 1)[0], []).append(node)
        whole = [g for g, nodes in members.items() if len(nodes) == self.settings.gang_size]
        one_rack = [g for g in whole if len({rack_of_node(n) for n in members[g]}) == 1]
        return {
            "gangs": gangs,
            "gangs_whole": len(whole),
            "gangs_one_rack": len(one_rack),
            "gangs_partial": len(members) - len(whole),
            "gangs_per_s": round(len(whole) / elapsed_s, 2) if elapsed_s > 0 else 0.0,
            "gangs_ok": len(one_rack) == gangs,
        }

    async def clean(self, namespace: str, *, gangs: bool) -> None:
        """Delete the run's pods (grace 0: no kubelet confirms); the next run starts from the same cluster."""
        body = orjson.dumps({"gracePeriodSeconds": 0})
        paths = [f"/api/v1/namespaces/{namespace}/pods"]
        if gangs:
            paths.append(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups")
        for path in paths:
            async with self.session.delete(self.plane.server + path, data=body) as resp:
                await resp.read()

        def empty() -> bool:
            return not self.plane.api.get(f"/api/v1/namespaces/{namespace}/pods?limit=1")["items"]

        wait_until(empty, timeout_s=120, interval_s=0.5, what=f"pods of {namespace} deleted")


# ---------------------------------------------------------------------------------- summary


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (nodes, config): median rate, the runs, and the median over series of the ratio to A."""
    out = []
    for nodes in sorted({r["nodes"] for r in rows}):
        at = [r for r in rows if r["nodes"] == nodes]
        a_by_series = {r["series"]: r["pods_per_s"] for r in at if r["config"] == "A"}
        n_by_series = {r["series"]: r["pods_per_s"] for r in at if r["config"] == "N"}
        for cfg in sorted({r["config"] for r in at}):
            runs = [r for r in at if r["config"] == cfg]
            rates = [r["pods_per_s"] for r in runs]
            ratios = [
                r["pods_per_s"] / a_by_series[r["series"]] for r in runs if a_by_series.get(r["series"])
            ]
            row: dict[str, Any] = {
                "bench": "scheduler-summary",
                "nodes": nodes,
                "config": cfg,
                "title": runs[0]["title"],
                "pods_per_s_median": round(statistics.median(rates), 1),
                "runs": rates,
                "ratio_to_A_median": round(statistics.median(ratios), 2) if ratios else None,
                "ratios_to_N": [
                    round(r["pods_per_s"] / n_by_series[r["series"]], 2)
                    for r in runs
                    if n_by_series.get(r["series"])
                ],
                "all_complete": all(r["complete"] for r in runs),
            }
            to_n = row["ratios_to_N"]
            row["ratio_to_N_median"] = round(statistics.median(to_n), 2) if to_n else None
            for key in (
                "cycle_ms_per_attempt",
                "cpu_ms_per_pod_scheduler",
                "cpu_ms_per_pod_service",
                "cpu_ms_per_pod_apiserver",
                "filter_ms_mean",
                "prioritize_ms_mean",
                "bind_ms_mean",
                "gangs_per_s",
                "nodes_used",
                "cores_other",
                "scheduler_peak_rss_mib",
                "service_peak_rss_mib",
            ):
                vals = [r[key] for r in runs if key in r]
                if vals:
                    row[key] = round(statistics.median(vals), 2)
            if any("gangs" in r for r in runs):
                row["gangs_ok_all"] = all(r.get("gangs_ok") for r in runs)
            out.append(row)
    return out


def markdown(summary: list[dict[str, Any]]) -> str:
    head = (
        "| nodes | config | pods/s median (runs) | ratio to A | ratio to N | cycle ms/attempt "
        "| scheduler CPU ms/pod | service CPU ms/pod | filter ms | prioritize ms | bind ms | gangs/s "
        "| nodes used | other cores |"
    )
    lines = [head, "|" + "---|" * 14]
    keys = (
        "ratio_to_A_median",
        "ratio_to_N_median",
        "cycle_ms_per_attempt",
        "cpu_ms_per_pod_scheduler",
        "cpu_ms_per_pod_service",
        "filter_ms_mean",
        "prioritize_ms_mean",
        "bind_ms_mean",
        "gangs_per_s",
        "nodes_used",
        "cores_other",
    )
    for r in summary:
        runs = ", ".join(f"{x:g}" for x in r["runs"])
        cells = " | ".join("-" if r.get(k) is None else f"{r[k]:g}" for k in keys)
        rate = f"**{r['pods_per_s_median']:g}** ({runs})"
        lines.append(f"| {r['nodes']} | {r['config']} {r['title']} | {rate} | {cells} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- entry


async def bench_all(settings: Settings, plane: ControlPlane) -> list[dict[str, Any]]:
    bench = Bench(plane, settings, plane.workdir)
    connector = aiohttp.TCPConnector(limit=CREATE_CONCURRENCY + 4, ssl=False)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        bench.session = session
        await bench.post("/apis/kai.scheduler/v1alpha1/topologies", TOPOLOGY, ok=(200, 201, 409))
        for nodes in settings.nodes:
            await bench.grow_nodes(nodes)
            for series in range(1, settings.series + 1):
                for name in settings.variants:
                    row = await bench.run(VARIANTS[name], series=series, nodes=nodes)
                    bench.results.append(row)
                    print(json.dumps(row), flush=True)
    return bench.results


def parse(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m bench scheduler", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes, 500 pods, 2 series (under ~4 min)")
    parser.add_argument(
        "--nodes", default=None, help="comma-separated cluster sizes, grown in order (default 1000)"
    )
    parser.add_argument("--pods", type=int, default=None, help="pods per run (default 2000; quick 500)")
    parser.add_argument(
        "--series", type=int, default=None, help="series of all configurations per size (default 3; quick 2)"
    )
    parser.add_argument(
        "--configs", default="A,B,C,D,E,N", help="configurations in run order (default A,B,C,D,E,N)"
    )
    parser.add_argument("--pod-cpu", default="10m", help="cpu request of every pod (default 10m)")
    parser.add_argument("--run-timeout-s", type=float, default=180.0, help="give up on a run after this long")
    parser.add_argument("--keep-dir", action="store_true", help="keep the work directory (logs, configs)")
    parser.add_argument(
        "--profile-service",
        default="",
        metavar="DIR",
        help="run the service under cProfile (slower); one service-<run>.prof per run in DIR",
    )
    parser.add_argument(
        "--k8s",
        default=CURRENT_VERSION,
        choices=VERSIONS,
        help=f"control plane version (default {CURRENT_VERSION})",
    )
    args = parser.parse_args(argv)
    variants = tuple(v.strip().upper() for v in args.configs.split(",") if v.strip())
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; choose from {','.join(VARIANTS)}")
    try:
        nodes = tuple(int(x) for x in (args.nodes or ("500" if args.quick else "1000")).split(","))
    except ValueError:
        parser.error("--nodes: expected comma-separated integers, e.g. 1000,5000")
    if any(n < RACK_NODES for n in nodes) or list(nodes) != sorted(nodes):
        parser.error(f"--nodes: sizes must be >= {RACK_NODES} and ascending (nodes are only added)")
    return Settings(
        nodes=nodes,
        pods=args.pods or (500 if args.quick else 2000),
        series=args.series or (2 if args.quick else 3),
        variants=variants,
        pod_cpu=args.pod_cpu,
        run_timeout_s=args.run_timeout_s,
        keep_dir=args.keep_dir,
        profile_dir=args.profile_service,
        k8s=args.k8s,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    t0 = time.monotonic()
    try:
        plane = ControlPlane(controller_manager=False, version=settings.k8s)
    except PlaneUnavailable as exc:
        print(f"control plane unavailable: {exc}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    try:
        plane.start()
        plane.apply_crds()
        rows = asyncio.run(bench_all(settings, plane))
    except (PlaneUnavailable, RuntimeError, AssertionError) as exc:
        print(f"bench failed: {exc}\n# logs in {plane.workdir}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        if not settings.keep_dir and rows:
            shutil.rmtree(plane.workdir, ignore_errors=True)
    summary = summarize(rows)
    for row in summary:
        print(json.dumps(row), flush=True)
    print(markdown(summary))
    print(f"# total {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return 0 if all(r["complete"] and r.get("gangs_ok", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
