"""Side by side on kube-scheduler 1.36.2 (or 1.37.2: `--k8s 1.37.2`): its own gang scheduling (no
extender) against gang-extender.

    python -m bench versus [--quick] [--nodes 1000] [--series 1] [--configs native,extender]
        [--workloads rack8,rack64,race,stream,mixed[,large]] [--keep-dir] [--k8s 1.36.2|1.37.2]

On 1.37.2 the PodGroups are v1beta1 and the native peer's gates GenericWorkload and
TopologyAwareWorkloadScheduling (1.37 merged GangScheduling and WorkloadAwarePreemption into
GenericWorkload); the rest is as on 1.36.2.

One loopback 1.36.2 control plane (tests/e2e/controlplane/start.py; no controller-manager) whose API
server serves the Workload API with every gate the native peer uses (GenericWorkload, GangScheduling,
TopologyAwareWorkloadScheduling, WorkloadAwarePreemption), and fake Ready nodes (cpu 64, memory 256Gi,
pods 110; racks of 32, blocks of 256: bench/scheduler.py's nodes). Both configurations read the same
objects: a `scheduling.k8s.io/v1alpha2` PodGroup per gang (`schedulingPolicy.gang.minCount` = its
size, `schedulingConstraints.topology: [{key: topology.kubernetes.io/rack}]`) and pods that join it
with `spec.schedulingGroup.podGroupName`; plain pods join nothing.

- native: kube-scheduler with those four gates and no extender; the shipped profile otherwise
  (manifests/base/scheduler-config.yaml without its `extenders`: MostAllocated, BalancedAllocation off).
- extender: kube-scheduler with the shipped file as it is (no gates: the README keeps native gang
  scheduling and topology placement off in the profile that calls the service) and
  `python -m extender serve` with its defaults.
- extender-noholds: the same with `--holds false` (a gang that fits nowhere holds nothing: what the
  stream workload's large gang costs without its hold; size-class pools need holds, so none either).
- extender-nopools: the same with `--pools false` (holds without size-class pools).
- extender-early: the same with `--release-on-first-bind true` (a plan is bound whole at its first
  member's bind, not once kube-scheduler has cycled every member): the default since 2026-12-06, so
  `extender` is the same now; kept so the commands of bench/RESULTS.md section 19 measure what they did.
- extender-barrier: the same with `--release-on-first-bind false` (every member reaches bind through
  its own kube-scheduler cycle before the gang binds: what `extender` measured before that day).

Leader election is off and client qps/burst raised in both, as in bench/scheduler.py. Each
configuration gets a fresh kube-scheduler (and service) per series; workloads run one after the
other in a namespace of their own, and are deleted before the next:

- rack8: gangs of 8 pods of 16 cpu (two nodes' worth), rack required, all created at once.
- rack64: gangs of 64 pods of 32 cpu: exactly one rack each.
- race: every rack but one cordoned; two gangs of 48 pods of 32 cpu (24 nodes each, so the rack holds
  one) created interleaved. Who won, what the loser holds; then the winner is deleted and the loser
  must bind (no deadlock).
- stream: four racks left schedulable; small gangs (4 pods of 32 cpu, rack required) arrive every
  `--stream-every-s` and each is deleted `--stream-life-s` after it is whole (a job finishing);
  `--stream-large-after-s` in, one large gang (64 pods of 32 cpu: a whole rack) arrives. Whether the
  large gang binds while the stream runs, or only once it stops (starvation).
- mixed: gangs of 8 (16 cpu, rack required) and plain pods (2 cpu) created interleaved.
- large: one gang at a time of each size in `--large-sizes` (default 256 pods of 8 cpu, 1024 of 2 cpu:
  each exactly one rack's 2048 cpu), then of each size in `--large-block-sizes` with the block required
  (default 4096 pods of 4 cpu: exactly one block's 16384), all its pods created at once; per gang, last
  create -> whole bound (`whole_after_last_create_s`). Every binding POST of the gang is in that time.

Per workload: gangs bound whole, gangs inside one domain of their level (a rack; the block for a
block gang), partial gangs seen (a gang with some members bound and others not for longer than
`PARTIAL_GRACE_S` plus its size at `RELEASE_WRITES_PER_S`, or at the end), time from the last
member's creation to the whole gang bound (p50, p95), pods/s (first create -> last bind), plain pods'
create -> bind (p50), the CPU kube-scheduler and the service used, and per verb the bucket of the
service's slowest call (`slowest_call_le_s`, from its request histogram: against kube-scheduler's
httpTimeout). Every run prints one JSON object, then a Markdown table per workload. The exit status
is 1 when a gang-extender run breaks the promise (a gang not whole, spread over domains or partly
bound, a race with no single winner or a deadlock); what the native runs break is printed as
findings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import ssl
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.podwatch import PodWatch
from bench.scheduler import (
    BLOCK_LABEL,
    BLOCK_NODES,
    CREATE_CONCURRENCY,
    RACK_LABEL,
    RACK_NODES,
    RUN_LABEL,
    Bench,
    Proc,
    rack_of_node,
    scrape,
    spawn,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from controlplane.start import (  # noqa: E402  (the e2e tier is not a package)
    CURRENT_VERSION,
    NEWEST_VERSION,
    SCHEDULER_NAME,
    TOKEN,
    ControlPlane,
    PlaneUnavailable,
    free_port,
    substitute_scheduler_config,
    wait_until,
)

NATIVE_GATES = ",".join(
    f"{gate}=true"
    for gate in (
        "GenericWorkload",
        "GangScheduling",
        "TopologyAwareWorkloadScheduling",
        "WorkloadAwarePreemption",
    )
)
# 1.37 merged GangScheduling and WorkloadAwarePreemption into GenericWorkload (the old names are gone)
NATIVE_GATES_137 = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
# version -> (the Workload API version its PodGroups are written in, the native peer's gates)
VERSIONS = {CURRENT_VERSION: ("v1alpha2", NATIVE_GATES), NEWEST_VERSION: ("v1beta1", NATIVE_GATES_137)}
GANG_LABEL = "bench-gang"
PODGROUPS = "/apis/scheduling.k8s.io/{version}/namespaces/{ns}/podgroups"
PODS = "/api/v1/namespaces/{ns}/pods"
PARTIAL_GRACE_S = 1.0  # members of one release reach the watch over a few hundred ms; longer is partial
# A release's binding POSTs are written at the API server's rate (330-390 a second here for a gang of
# 1024, bench/RESULTS.md section 16): a thousand-pod gang is seen partly bound while they land. Slower
# than this rate on top of the grace counts as partial.
RELEASE_WRITES_PER_S = 200.0
WORKLOADS = ("rack8", "rack64", "race", "stream", "mixed", "large")
# `large` only when asked for: native kube-scheduler grows past 8 GB on its 1024-pod gang (and its
# 4096-pod one) on a 24 GiB machine, and the run takes minutes
DEFAULT_WORKLOADS = WORKLOADS[:-1]
LARGE_SIZES = (256, 1024)  # a rack's 2048 cpu each: 8 and 2 cpu a pod
LARGE_BLOCK_SIZES = (4096,)  # a block's 16384 cpu: 4 cpu a pod, 16 a node
LEVELS = {"rack": (RACK_LABEL, RACK_NODES), "block": (BLOCK_LABEL, BLOCK_NODES)}
_LATENCY = re.compile(r'^gang_extender_request_seconds_bucket\{(?=.*le="([^"]+)")(?=.*verb="([^"]+)").*\}$')
LARGE_SETTLE_S = 600.0  # a thousand-pod gang's time limit once its pods are created


@dataclass(frozen=True)
class Config:
    name: str
    title: str
    scheduler_gates: str
    extender: bool
    service_args: tuple[str, ...] = ()


CONFIGS = {
    "native": Config(
        "native", "kube-scheduler's own gang scheduling + TAS, no extender", NATIVE_GATES, False
    ),
    "extender": Config("extender", "kube-scheduler + gang-extender", "", True),
    "extender-noholds": Config(
        "extender-noholds", "kube-scheduler + gang-extender --holds false", "", True, ("--holds", "false")
    ),
    "extender-nopools": Config(
        "extender-nopools", "kube-scheduler + gang-extender --pools false", "", True, ("--pools", "false")
    ),
    "extender-early": Config(
        "extender-early",
        "kube-scheduler + gang-extender --release-on-first-bind true",
        "",
        True,
        ("--release-on-first-bind", "true"),
    ),
    "extender-barrier": Config(
        "extender-barrier",
        "kube-scheduler + gang-extender --release-on-first-bind false",
        "",
        True,
        ("--release-on-first-bind", "false"),
    ),
}


@dataclass(frozen=True)
class Settings:
    nodes: int
    series: int
    configs: tuple[str, ...]
    workloads: tuple[str, ...]
    rack8_gangs: int
    rack64_gangs: int
    mixed_gangs: int
    mixed_plain: int
    stream_s: float
    stream_every_s: float
    stream_life_s: float
    stream_large_after_s: float
    settle_s: float = 60.0  # a batch workload's time limit once its pods are created
    keep_dir: bool = False
    scheduler_v: int = 1
    k8s: str = CURRENT_VERSION  # the control plane: 1.36.2, or 1.37.2 (its native gang plugin merged)
    large_sizes: tuple[int, ...] = LARGE_SIZES
    large_block_sizes: tuple[int, ...] = LARGE_BLOCK_SIZES


# ---------------------------------------------------------------------------------- observations


@dataclass
class Gang:
    """One gang as the bench saw it: when each member's create returned, when each was seen bound."""

    name: str
    size: int
    level: str = "rack"  # the domain its PodGroup requires: a key of LEVELS
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)

    def whole_at(self) -> float | None:
        if len(self.bound) < self.size:
            return None
        return sorted(t for t, _ in self.bound.values())[self.size - 1]

    def partial_grace_s(self) -> float:
        """How long a release of this gang may take to reach the watch before it counts as partial."""
        return PARTIAL_GRACE_S + self.size / RELEASE_WRITES_PER_S

    def partial_s(self, end: float) -> float:
        """How long some members were bound and others not (0 for a gang bound at once or not at all)."""
        if not self.bound:
            return 0.0
        first = min(t for t, _ in self.bound.values())
        whole = self.whole_at()
        return (whole if whole is not None else end) - first

    def domains(self) -> set[str]:
        """The domains of its level (racks, or blocks) its bound members are in."""
        return {domain_of(node, self.level) for _, node in self.bound.values()}


def domain_of(node: str, level: str = "rack") -> str:
    if level == "rack":
        return rack_of_node(node)
    return f"block-{int(node.rsplit('-', 1)[1]) // BLOCK_NODES:03d}"  # bench/scheduler.py's label


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    vals = sorted(values)
    return vals[min(len(vals) - 1, round(q * (len(vals) - 1)))]


def gang_figures(gangs: Iterable[Gang], *, end: float) -> dict[str, Any]:
    """The per-workload gang figures: whole, in one rack, partial, last create -> whole bound."""
    gangs = list(gangs)
    whole = [g for g in gangs if g.whole_at() is not None]
    latency = [g.whole_at() - max(g.created.values()) for g in whole if len(g.created) == g.size]
    partial = [g for g in gangs if g.partial_s(end) > g.partial_grace_s()]
    return {
        "gangs": len(gangs),
        "gangs_whole": len(whole),
        "gangs_one_domain": sum(1 for g in whole if len(g.domains()) == 1),
        "gangs_partial_seen": len(partial),
        "gangs_partial_at_end": sum(1 for g in gangs if 0 < len(g.bound) < g.size),
        "max_partial_s": round(max((g.partial_s(end) for g in gangs), default=0.0), 2),
        "whole_after_last_create_p50_s": _round(percentile(latency, 0.5)),
        "whole_after_last_create_p95_s": _round(percentile(latency, 0.95)),
    }


def slowest_call_le_s(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """Per verb, the upper bound of the latency bucket its slowest call between two scrapes fell in
    (the service's request histogram; +Inf past its last bucket)."""
    counts: dict[str, dict[float, float]] = {}
    for key, value in after.items():
        if m := _LATENCY.match(key):
            le, verb = float(m.group(1)), m.group(2)
            counts.setdefault(verb, {})[le] = value - before.get(key, 0.0)
    out = {}
    for verb, cumulative in sorted(counts.items()):
        total = cumulative.get(float("inf"), 0.0)
        if total > 0:
            out[verb] = min(le for le, n in cumulative.items() if n >= total)
    return out


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------------------- objects


def podgroup_object(name: str, size: int, version: str = "v1alpha2", level: str = "rack") -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": size}},
            "schedulingConstraints": {"topology": [{"key": LEVELS[level][0]}]},
        },
    }


def pod_object(name: str, *, run: str, cpu: str, gang: str | None) -> dict[str, Any]:
    labels = {RUN_LABEL: run}
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "sleep:v0.1.0", "resources": {"requests": {"cpu": cpu}}}],
    }
    if gang:
        labels[GANG_LABEL] = gang
        spec["schedulingGroup"] = {"podGroupName": gang}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def scheduler_config(config: Config, *, url: str, kubeconfig: str) -> dict[str, Any]:
    """The shipped v1 file, as kube-scheduler 1.36 reads it; native drops the extender."""
    shipped = yaml.safe_load((REPO / "manifests" / "base" / "scheduler-config.yaml").read_text())
    cfg = substitute_scheduler_config(shipped, url_prefix=url, kubeconfig=kubeconfig)
    cfg["leaderElection"] = {"leaderElect": False}
    cfg["clientConnection"].update(qps=5000, burst=5000)
    if not config.extender:
        cfg.pop("extenders", None)
    return cfg


# ---------------------------------------------------------------------------------- the run


@dataclass
class Run:
    """One workload in its own namespace: creates, a watch recording binds, and the gangs seen."""

    versus: Versus
    namespace: str
    gangs: dict[str, Gang] = field(default_factory=dict)
    plain_created: dict[str, float] = field(default_factory=dict)
    plain_bound: dict[str, float] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    first_create: float | None = None
    last_bind: float | None = None
    watch_restarts: int = 0
    _watch: PodWatch | None = None

    async def start(self) -> None:
        self.versus.plane.api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
        )
        loop = asyncio.get_running_loop()

        def observe(kind: str, pod: dict[str, Any], now: float) -> None:
            self._observe({"type": kind, "object": pod}, now)
            loop.call_soon_threadsafe(self.changed.set)

        plane = self.versus.plane
        self._watch = PodWatch(
            plane.server, PODS.format(ns=self.namespace), observe, token=TOKEN, timeout_s=5
        )
        await asyncio.to_thread(self._watch.start)

    def _observe(self, event: dict[str, Any], now: float) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if event.get("type") == "DELETED":
            self.deleted.add(name)
            return
        node = (obj.get("spec") or {}).get("nodeName")
        if not node:
            return
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if gang in self.gangs:
            if name not in self.gangs[gang].bound:
                self.gangs[gang].bound[name] = (now, node)
                self.last_bind = now
        elif name in self.plain_created and name not in self.plain_bound:
            self.plain_bound[name] = now
            self.last_bind = now

    async def stop(self) -> None:
        if self._watch is not None:
            await asyncio.to_thread(self._watch.stop)
            self.watch_restarts = self._watch.restarts

    # -- creates ---------------------------------------------------------------------------------

    async def add_gang(self, name: str, size: int, level: str = "rack") -> Gang:
        gang = self.gangs[name] = Gang(name, size, level)
        version = self.versus.podgroup_version
        await self.versus.post(
            PODGROUPS.format(version=version, ns=self.namespace), podgroup_object(name, size, version, level)
        )
        return gang

    async def create_pods(self, pods: list[dict[str, Any]]) -> None:
        """POST pods in order, CREATE_CONCURRENCY at a time; each one's create time is when it returned."""
        path = PODS.format(ns=self.namespace)
        it = iter(pods)
        if self.first_create is None:
            self.first_create = time.monotonic()

        async def worker() -> None:
            for pod in it:
                await self.versus.post(path, pod)
                now = time.monotonic()
                meta = pod["metadata"]
                gang = meta["labels"].get(GANG_LABEL)
                if gang:
                    self.gangs[gang].created[meta["name"]] = now
                else:
                    self.plain_created[meta["name"]] = now

        await asyncio.gather(*(worker() for _ in range(min(CREATE_CONCURRENCY, len(pods)) or 1)))

    async def delete_gang(self, name: str) -> None:
        """Delete a gang's pods (grace 0: no kubelet confirms) and its PodGroup."""
        body = orjson.dumps({"gracePeriodSeconds": 0})
        server = self.versus.plane.server
        async with self.versus.session.delete(
            server + PODS.format(ns=self.namespace),
            params={"labelSelector": f"{GANG_LABEL}={name}"},
            data=body,
        ) as resp:
            await resp.read()
        async with self.versus.session.delete(
            server + PODGROUPS.format(version=self.versus.podgroup_version, ns=self.namespace) + f"/{name}",
            data=body,
        ) as resp:
            await resp.read()

    async def wait(self, done: Any, timeout_s: float) -> bool:
        """Wait until done() holds (checked on every watch event), at most timeout_s."""
        deadline = time.monotonic() + timeout_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        return True

    # -- figures ---------------------------------------------------------------------------------

    def figures(self, *, end: float) -> dict[str, Any]:
        row = gang_figures(self.gangs.values(), end=end)
        bound = sum(len(g.bound) for g in self.gangs.values()) + len(self.plain_bound)
        span = (self.last_bind or end) - (self.first_create or end)
        row["pods_bound"] = bound
        row["pods_per_s"] = round(bound / span, 1) if span > 0 else 0.0
        if self.plain_created:
            waits = [self.plain_bound[n] - t for n, t in self.plain_created.items() if n in self.plain_bound]
            row["plain"] = len(self.plain_created)
            row["plain_bound"] = len(waits)
            row["plain_bind_p50_s"] = _round(percentile(waits, 0.5), 3)
        return row


@dataclass
class Versus:
    plane: ControlPlane
    settings: Settings
    session: aiohttp.ClientSession
    bench: Bench

    @property
    def podgroup_version(self) -> str:
        """The Workload API version the plane serves PodGroups in (v1alpha2 on 1.36, v1beta1 on 1.37)."""
        return VERSIONS[self.plane.version][0]

    async def post(self, path: str, obj: dict[str, Any]) -> Any:
        return await self.bench.post(path, obj)

    async def set_unschedulable(self, names: list[str], value: bool) -> None:
        """Cordon (or uncordon) nodes, CREATE_CONCURRENCY at a time."""
        it = iter(names)
        headers = {"Content-Type": "application/merge-patch+json"}
        body = orjson.dumps({"spec": {"unschedulable": value or None}})

        async def worker() -> None:
            for name in it:
                url = f"{self.plane.server}/api/v1/nodes/{name}"
                async with self.session.patch(url, data=body, headers=headers) as resp:
                    if resp.status != 200:
                        raise RuntimeError(
                            f"PATCH node {name} -> {resp.status}: {(await resp.read())[:200]!r}"
                        )

        await asyncio.gather(*(worker() for _ in range(CREATE_CONCURRENCY)))

    def node_names(self) -> list[str]:
        return [f"node-{i:05d}" for i in range(self.settings.nodes)]

    async def keep_racks(self, racks: int) -> list[str]:
        """Cordon every node outside the first `racks` racks; returns the cordoned names."""
        cordoned = self.node_names()[racks * RACK_NODES :]
        await self.set_unschedulable(cordoned, True)
        await asyncio.sleep(2.0)  # both schedulers (and the service) learn of it from their node watch
        return cordoned

    # -- processes -------------------------------------------------------------------------------

    def start_scheduler(self, config: Config, *, url: str, tag: str) -> Proc:
        cfg = scheduler_config(config, url=url, kubeconfig=self.plane.kubeconfig)
        path = self.plane.workdir / f"scheduler-{tag}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        port = free_port()
        argv = [
            self.plane.bins["kube-scheduler"],
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={self.plane.kubeconfig}",
            f"--authorization-kubeconfig={self.plane.kubeconfig}",
            f"--v={self.settings.scheduler_v}",
        ]
        gates = VERSIONS[self.plane.version][1] if config.scheduler_gates else ""
        if gates:
            argv.append(f"--feature-gates={gates}")
        proc = spawn(f"kube-scheduler-{tag}", argv, workdir=self.plane.workdir)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            if not proc.alive():
                raise RuntimeError(f"kube-scheduler exited: {proc.tail()}")
            try:
                with urllib.request.urlopen(
                    f"https://127.0.0.1:{port}/healthz", timeout=2, context=insecure
                ) as r:
                    return r.status == 200
            except OSError:
                return False

        try:
            wait_until(healthy, timeout_s=60, interval_s=0.2, what="kube-scheduler /healthz")
        except BaseException:
            proc.stop()
            raise
        return proc

    async def warm_up(self, tag: str) -> None:
        """One plain pod through the whole path, so informers are synced and connections open."""
        ns = f"warm-{tag}"
        self.plane.api.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        await self.post(PODS.format(ns=ns), pod_object("warmup", run="warmup", cpu="10m", gang=None))
        await asyncio.to_thread(
            wait_until,
            lambda: self.plane.api.get(PODS.format(ns=ns) + "/warmup")["spec"].get("nodeName"),
            timeout_s=60,
            interval_s=0.1,
            what=f"the warm-up pod bound ({tag})",
        )

    async def clean(self, run: Run) -> None:
        body = orjson.dumps({"gracePeriodSeconds": 0})
        for path in (PODS, PODGROUPS):
            url = path.format(version=self.podgroup_version, ns=run.namespace)
            async with self.session.delete(self.plane.server + url, data=body) as r:
                await r.read()
        await run.stop()

        def empty() -> bool:
            return not self.plane.api.get(PODS.format(ns=run.namespace) + "?limit=1")["items"]

        await asyncio.to_thread(wait_until, empty, timeout_s=120, interval_s=0.5, what="pods deleted")

    # -- workloads -------------------------------------------------------------------------------

    async def batch(
        self,
        run: Run,
        gangs: list[tuple[str, int, str]],
        plain: list[str],
        plain_cpu: str,
        settle_s: float | None = None,
        level: str = "rack",
    ) -> None:
        """Create gangs (name, size, cpu) and plain pods interleaved, and wait until all are bound."""
        pods: list[list[dict[str, Any]]] = []
        for name, size, cpu in gangs:
            await run.add_gang(name, size, level)
            pods.append(
                [pod_object(f"{name}-{m}", run=run.namespace, cpu=cpu, gang=name) for m in range(size)]
            )
        per_gang = max(1, len(plain) // max(1, len(gangs)))
        plain_pods = [pod_object(n, run=run.namespace, cpu=plain_cpu, gang=None) for n in plain]
        order: list[dict[str, Any]] = []
        for i in range(max(len(pods), 1)):
            order += pods[i] if i < len(pods) else []
            order += plain_pods[i * per_gang : (i + 1) * per_gang]
        order += plain_pods[max(len(pods), 1) * per_gang :]
        await run.create_pods(order)

        def done() -> bool:
            gangs_done = all(g.whole_at() is not None for g in run.gangs.values())
            return gangs_done and len(run.plain_bound) == len(run.plain_created)

        await run.wait(done, self.settings.settle_s if settle_s is None else settle_s)

    async def rack8(self, run: Run) -> dict[str, Any]:
        await self.batch(run, [(f"g{g:03d}", 8, "16") for g in range(self.settings.rack8_gangs)], [], "0")
        return run.figures(end=time.monotonic())

    async def rack64(self, run: Run) -> dict[str, Any]:
        await self.batch(run, [(f"g{g:03d}", 64, "32") for g in range(self.settings.rack64_gangs)], [], "0")
        return run.figures(end=time.monotonic())

    async def large(self, run: Run) -> dict[str, Any]:
        """Thousand-pod gangs, one at a time, each exactly a rack (then each exactly a block)."""
        s = self.settings
        for level, sizes in (("rack", s.large_sizes), ("block", s.large_block_sizes)):
            for size in sizes:
                cpu = str(LEVELS[level][1] * 64 // size)
                name = f"large-{size}" if level == "rack" else f"large-{level}-{size}"
                await self.batch(run, [(name, size, cpu)], [], "0", settle_s=LARGE_SETTLE_S, level=level)
        row = run.figures(end=time.monotonic())
        row["whole_after_last_create_s"] = {
            g.name: _round(g.whole_at() - max(g.created.values()))
            for g in run.gangs.values()
            if g.whole_at() is not None and len(g.created) == g.size
        }
        return row

    async def mixed(self, run: Run) -> dict[str, Any]:
        s = self.settings
        gangs = [(f"g{g:03d}", 8, "16") for g in range(s.mixed_gangs)]
        await self.batch(run, gangs, [f"p{i:04d}" for i in range(s.mixed_plain)], "2")
        return run.figures(end=time.monotonic())

    async def race(self, run: Run) -> dict[str, Any]:
        """Two gangs of 24 nodes' worth for one free rack of 32 nodes."""
        cordoned = await self.keep_racks(1)
        try:
            a, b = await run.add_gang("race-a", 48), await run.add_gang("race-b", 48)
            pods = []
            for m in range(48):
                for gang in (a, b):
                    pods.append(pod_object(f"{gang.name}-{m}", run=run.namespace, cpu="32", gang=gang.name))
            await run.create_pods(pods)
            one_whole = await run.wait(lambda: any(g.whole_at() for g in (a, b)), self.settings.settle_s)
            await asyncio.sleep(10.0)  # let anything that would go wrong (a partial loser) show
            t_settled = time.monotonic()
            row: dict[str, Any] = {"one_bound_whole": one_whole}
            winners = [g for g in (a, b) if g.whole_at() is not None]
            loser = next((g for g in (a, b) if g.whole_at() is None), None)
            row["winner"] = winners[0].name if len(winners) == 1 else ("both" if winners else "none")
            row["loser_members_bound_while_waiting"] = len(loser.bound) if loser else None
            if len(winners) == 1 and loser is not None:
                t_free = time.monotonic()
                await run.delete_gang(winners[0].name)
                got = await run.wait(lambda: loser.whole_at() is not None, self.settings.settle_s)
                row["loser_bound_after_winner_deleted_s"] = (
                    round(loser.whole_at() - t_free, 2) if got else None
                )
                row["deadlock"] = not got
            fig = gang_figures([a, b], end=t_settled)
            row |= {k: fig[k] for k in ("gangs_partial_seen", "max_partial_s", "gangs_one_domain")}
            row["whole_after_last_create_s"] = fig["whole_after_last_create_p50_s"]
            return row
        finally:
            await self.set_unschedulable(cordoned, False)

    async def stream(self, run: Run) -> dict[str, Any]:
        """Small gangs keep arriving and finishing on four racks while one whole-rack gang waits."""
        s = self.settings
        cordoned = await self.keep_racks(4)
        tasks: set[asyncio.Task[Any]] = set()
        try:
            t0 = time.monotonic()
            large: Gang | None = None
            n = 0

            async def small(name: str) -> None:
                gang = await run.add_gang(name, 4)
                await run.create_pods(
                    [pod_object(f"{name}-{m}", run=run.namespace, cpu="32", gang=name) for m in range(4)]
                )
                if await run.wait(lambda: gang.whole_at() is not None, s.stream_s + s.settle_s):
                    await asyncio.sleep(s.stream_life_s)
                    await run.delete_gang(name)

            while time.monotonic() - t0 < s.stream_s:
                if large is None and time.monotonic() - t0 >= s.stream_large_after_s:
                    large = await run.add_gang("large", 64)
                    pods = [
                        pod_object(f"large-{m}", run=run.namespace, cpu="32", gang="large") for m in range(64)
                    ]
                    tasks.add(asyncio.create_task(run.create_pods(pods)))
                task = asyncio.create_task(small(f"s{n:04d}"))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
                await asyncio.sleep(s.stream_every_s)
            t_stream_end = time.monotonic()
            assert large is not None
            # the last small gangs and the large one: each created gang gets settle_s to bind
            await run.wait(lambda: all(g.whole_at() is not None for g in run.gangs.values()), s.settle_s)
            end = time.monotonic()
            smalls = [g for g in run.gangs.values() if g.name != "large"]
            small_fig = gang_figures(smalls, end=end)
            large_whole = large.whole_at()
            large_created = max(large.created.values()) if len(large.created) == large.size else None
            return {
                "small_gangs": len(smalls),
                "small_whole": small_fig["gangs_whole"],
                "small_bound_after_large_created": sum(
                    1
                    for g in smalls
                    if g.whole_at() is not None and large_created is not None and g.whole_at() > large_created
                ),
                "small_whole_after_last_create_p50_s": small_fig["whole_after_last_create_p50_s"],
                "small_whole_after_last_create_p95_s": small_fig["whole_after_last_create_p95_s"],
                "large_whole": large_whole is not None,
                "large_wait_s": (
                    round(large_whole - large_created, 2) if large_whole and large_created else None
                ),
                "large_bound_during_stream": bool(large_whole and large_whole <= t_stream_end),
                "large_partial_s": round(large.partial_s(end), 2),
                "gangs_partial_seen": gang_figures(run.gangs.values(), end=end)["gangs_partial_seen"],
                "gangs_one_domain": gang_figures(run.gangs.values(), end=end)["gangs_one_domain"],
            }
        finally:
            for task in list(tasks):
                task.cancel()
            for task in list(tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.set_unschedulable(cordoned, False)

    # -- one configuration -----------------------------------------------------------------------

    async def run_config(self, config: Config, series: int) -> list[dict[str, Any]]:
        tag = f"{config.name}-{series}"
        procs: list[Proc] = []
        rows: list[dict[str, Any]] = []
        try:
            url = "http://127.0.0.1:1"
            service: Proc | None = None
            if config.extender:
                service, url = self.bench.start_service(tag, args=config.service_args)
                procs.append(service)
            scheduler = self.start_scheduler(config, url=url, tag=tag)
            procs.append(scheduler)
            await self.warm_up(tag)
            for workload in self.settings.workloads:
                run = Run(self, f"{workload}-{tag}")
                await run.start()
                cpu0 = (scheduler.cpu_s(), service.cpu_s() if service else 0.0)
                calls0 = scrape(url + "/metrics") if service else {}
                t0 = time.monotonic()
                try:
                    figures = await getattr(self, workload)(run)
                finally:
                    wall = time.monotonic() - t0
                    cpu1 = (scheduler.cpu_s(), service.cpu_s() if service else 0.0)
                    calls1 = scrape(url + "/metrics") if service else {}
                    await self.clean(run)
                row = {
                    "bench": "versus",
                    "nodes": self.settings.nodes,
                    "series": series,
                    "config": config.name,
                    "workload": workload,
                    **figures,
                    "wall_s": round(wall, 1),
                    "watch_restarts": run.watch_restarts,
                    "scheduler_cpu_s": round(cpu1[0] - cpu0[0], 1),
                    "service_cpu_s": round(cpu1[1] - cpu0[1], 1),
                }
                if service:
                    row["slowest_call_le_s"] = slowest_call_le_s(calls1, calls0)
                for proc in procs:
                    if not proc.alive():
                        raise RuntimeError(f"{proc.name} exited: {proc.tail()}")
                print(json.dumps(row), flush=True)
                rows.append(row)
        finally:
            for proc in reversed(procs):
                proc.stop()
        return rows


# ---------------------------------------------------------------------------------- report

BATCH_COLUMNS = (
    "gangs_whole",
    "gangs_one_domain",
    "gangs_partial_seen",
    "whole_after_last_create_p50_s",
    "whole_after_last_create_p95_s",
    "pods_per_s",
    "scheduler_cpu_s",
    "service_cpu_s",
)
COLUMNS = {
    "rack8": BATCH_COLUMNS,
    "rack64": BATCH_COLUMNS,
    "large": ("whole_after_last_create_s", *BATCH_COLUMNS, "slowest_call_le_s"),
    "mixed": (
        "gangs_whole",
        "gangs_one_domain",
        "gangs_partial_seen",
        "whole_after_last_create_p50_s",
        "whole_after_last_create_p95_s",
        "plain_bound",
        "plain_bind_p50_s",
        "pods_per_s",
        "scheduler_cpu_s",
        "service_cpu_s",
    ),
    "race": (
        "winner",
        "loser_members_bound_while_waiting",
        "gangs_partial_seen",
        "gangs_one_domain",
        "whole_after_last_create_s",
        "loser_bound_after_winner_deleted_s",
        "deadlock",
    ),
    "stream": (
        "small_gangs",
        "small_whole",
        "small_whole_after_last_create_p50_s",
        "small_whole_after_last_create_p95_s",
        "large_whole",
        "large_bound_during_stream",
        "large_wait_s",
        "small_bound_after_large_created",
        "gangs_partial_seen",
        "gangs_one_domain",
    ),
}


def markdown(rows: list[dict[str, Any]]) -> str:
    out = []
    for workload, keys in COLUMNS.items():
        at = [r for r in rows if r["workload"] == workload]
        if not at:
            continue
        extra = ("gangs",) if "gangs" in at[0] else ()
        head = ("config", "series", *extra, *keys, "wall_s")
        out.append(f"\n**{workload}**\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in at:
            out.append("| " + " | ".join("-" if r.get(k) is None else str(r[k]) for k in head) + " |")
    return "\n".join(out)


def broken_promises(row: dict[str, Any]) -> list[str]:
    """What a run broke of the promise: every gang whole in its rack, none partial, no deadlock."""
    out = []
    w = row["workload"]
    if row.get("gangs_partial_seen"):
        out.append(
            f"{row['gangs_partial_seen']} gang(s) partly bound for over {PARTIAL_GRACE_S:g} s"
            f" and a {RELEASE_WRITES_PER_S:g}/s release"
        )
    if w in ("rack8", "rack64", "mixed", "large"):
        if row["gangs_whole"] != row["gangs"]:
            out.append(f"{row['gangs'] - row['gangs_whole']} of {row['gangs']} gangs not bound whole")
        if row["gangs_one_domain"] != row["gangs_whole"]:
            out.append(
                f"{row['gangs_whole'] - row['gangs_one_domain']} gang(s) spread over domains of their level"
            )
        if row.get("plain_bound", 0) != row.get("plain", 0):
            out.append(f"{row['plain'] - row['plain_bound']} plain pod(s) never bound")
    elif w == "race":
        if row["winner"] not in ("race-a", "race-b"):
            out.append(f"race: winner {row['winner']!r}, expected exactly one whole gang")
        if row.get("loser_members_bound_while_waiting"):
            out.append(f"race: the loser held {row['loser_members_bound_while_waiting']} bound member(s)")
        if row.get("deadlock"):
            out.append("race: the loser never bound after the winner left")
    elif w == "stream":
        if row["small_whole"] != row["small_gangs"] or not row["large_whole"]:
            small = f"{row['small_whole']}/{row['small_gangs']}"
            out.append(f"stream: {small} small gangs whole, the large one whole: {row['large_whole']}")
        if row["gangs_one_domain"] != row["small_whole"] + int(row["large_whole"]):
            out.append("stream: a gang spread over racks")
    return out


# ---------------------------------------------------------------------------------- entry


async def bench_all(settings: Settings, plane: ControlPlane) -> list[dict[str, Any]]:
    connector = aiohttp.TCPConnector(limit=2 * CREATE_CONCURRENCY + 8, ssl=False)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        bench = Bench(plane, None, plane.workdir, session=session)  # type: ignore[arg-type]
        await bench.grow_nodes(settings.nodes)
        versus = Versus(plane, settings, session, bench)
        for series in range(1, settings.series + 1):
            for name in settings.configs:
                rows += await versus.run_config(CONFIGS[name], series)
    return rows


def parse(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m bench versus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer gangs and a shorter stream (about 5 min)")
    parser.add_argument("--nodes", type=int, default=1000, help="fake nodes (default 1000; at least 4 racks)")
    parser.add_argument("--series", type=int, default=1, help="series of every configuration (default 1)")
    parser.add_argument("--configs", default="native,extender", help="configurations in run order")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT_WORKLOADS),
        help=f"workloads in run order (default all but large; of {','.join(WORKLOADS)})",
    )
    parser.add_argument("--stream-s", type=float, default=None, help="how long small gangs keep arriving")
    parser.add_argument("--stream-every-s", type=float, default=0.25, help="a small gang every this long")
    parser.add_argument(
        "--stream-life-s", type=float, default=12.0, help="a small gang runs this long once whole"
    )
    parser.add_argument(
        "--stream-large-after-s",
        type=float,
        default=None,
        help="the large gang arrives then (default: once the stream is steady, life + 5 s)",
    )
    parser.add_argument("--keep-dir", action="store_true", help="keep the work directory (logs, configs)")
    parser.add_argument(
        "--k8s",
        default=CURRENT_VERSION,
        choices=sorted(VERSIONS),
        help=f"control plane (default {CURRENT_VERSION})",
    )
    parser.add_argument("--scheduler-v", type=int, default=1, help="kube-scheduler's log verbosity (--v)")
    parser.add_argument(
        "--large-sizes",
        default=",".join(map(str, LARGE_SIZES)),
        help="the large workload's gang sizes, one rack each (divisors of 2048 cpu; default 256,1024)",
    )
    parser.add_argument(
        "--large-block-sizes",
        default=",".join(map(str, LARGE_BLOCK_SIZES)),
        help="then its block-constrained gang sizes, one block each (divisors of 16384 cpu; default 4096;"
        " empty for none)",
    )
    args = parser.parse_args(argv)
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
    if bad := [c for c in configs if c not in CONFIGS]:
        parser.error(f"--configs: unknown {bad}; choose from {','.join(CONFIGS)}")
    workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    if bad := [w for w in workloads if w not in WORKLOADS]:
        parser.error(f"--workloads: unknown {bad}; choose from {','.join(WORKLOADS)}")
    if args.nodes < 4 * RACK_NODES:
        parser.error(f"--nodes: at least {4 * RACK_NODES} (the stream keeps four racks of {RACK_NODES})")
    racks = args.nodes // RACK_NODES
    rack_cpu = RACK_NODES * 64
    try:
        large_sizes = tuple(int(x) for x in args.large_sizes.split(",") if x.strip())
        large_block_sizes = tuple(int(x) for x in args.large_block_sizes.split(",") if x.strip())
    except ValueError:
        parser.error("--large-sizes, --large-block-sizes: expected comma-separated integers, e.g. 256,1024")
    if any(n < 1 or rack_cpu % n or n > RACK_NODES * 110 for n in large_sizes):
        parser.error(f"--large-sizes: each must divide a rack's {rack_cpu} cpu and fit its pod slots")
    block_cpu = BLOCK_NODES * 64
    if any(n < 1 or block_cpu % n or n > BLOCK_NODES * 110 for n in large_block_sizes):
        parser.error(f"--large-block-sizes: each must divide a block's {block_cpu} cpu and fit its pod slots")
    # the gangs stay until the workload ends: each rack gang takes a rack, each block gang a block the
    # others leave whole, and the warm-up pod one node of some block
    blocks = len(large_block_sizes) + 1 if large_block_sizes else 0
    needed = RACK_NODES * len(large_sizes) + BLOCK_NODES * blocks
    if "large" in workloads and args.nodes < needed:
        parser.error(
            f"--nodes: the large workload's gangs need {needed} nodes ({len(large_sizes)} rack(s) of "
            f"{RACK_NODES}, {len(large_block_sizes)} free block(s) of {BLOCK_NODES} and one more block)"
        )
    if not large_sizes + large_block_sizes:
        parser.error("--large-sizes, --large-block-sizes: give at least one gang size")
    quick = args.quick
    return Settings(
        nodes=args.nodes,
        series=args.series,
        configs=configs,
        workloads=workloads,
        rack8_gangs=16 if quick else 48,
        rack64_gangs=min(racks, 4 if quick else 8),
        mixed_gangs=8 if quick else 24,
        mixed_plain=64 if quick else 192,
        stream_s=args.stream_s or (40.0 if quick else 90.0),
        stream_every_s=args.stream_every_s,
        stream_life_s=args.stream_life_s,
        stream_large_after_s=(
            args.stream_large_after_s if args.stream_large_after_s is not None else args.stream_life_s + 5.0
        ),
        keep_dir=args.keep_dir,
        scheduler_v=args.scheduler_v,
        k8s=args.k8s,
        large_sizes=large_sizes,
        large_block_sizes=large_block_sizes,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    t0 = time.monotonic()
    try:
        plane = ControlPlane(
            controller_manager=False, version=settings.k8s, feature_gates=VERSIONS[settings.k8s][1]
        )
    except PlaneUnavailable as exc:
        print(f"control plane {settings.k8s} unavailable: {exc}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    try:
        plane.start()
        rows = asyncio.run(bench_all(settings, plane))
    except (PlaneUnavailable, RuntimeError, AssertionError) as exc:
        print(f"bench failed: {exc}\n# logs in {plane.workdir}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
    broken = [(row, b) for row in rows for b in broken_promises(row)]
    if not settings.keep_dir and rows and not broken:
        shutil.rmtree(plane.workdir, ignore_errors=True)
    print(markdown(rows))
    print(f"# total {time.monotonic() - t0:.0f}s", file=sys.stderr)
    failed = False
    for row, what in broken:
        # Only gang-extender's runs decide the exit status; the native peer's are findings.
        ours = CONFIGS[row["config"]].extender
        failed |= ours
        label = "FAILED" if ours else "finding"
        print(f"# {label}: {row['config']} {row['workload']} series {row['series']}: {what}", file=sys.stderr)
    if broken:
        print(f"# logs kept in {plane.workdir}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
