"""Soak: gang churn (create, bind, delete) through a real kube-scheduler for a fixed time.

    python -m bench soak --quick          # CI: 120 s of churn, 30 s warm-up, 20 s windows (under 4 min)
    python -m bench soak                  # 600 s of churn, 60 s warm-up, 60 s windows
    python -m bench soak [--version 1.36.2|1.20.2] [--nodes 1000] [--duration-s S] [--warmup-s S]
        [--window-s S] [--sample-s S] [--gangs 20] [--gang-size 8] [--plain 16] [--life-s S]
        [--max-rss-growth 0.05] [--creep-ratio 2] [--creep-floor-ms 5] [--keep-dir]

Owns the soak: whether the service stays flat while gangs keep arriving and leaving. One loopback
control plane (tests/e2e/controlplane/start.py; 1.36.2 by default, 1.20.2 on request; no
controller-manager) with the KAI CRDs, the KAI Topology `dc` and fake Ready nodes (bench/scheduler.py's:
cpu 64, memory 256Gi, pods 110; racks of 32, blocks of 256). One kube-scheduler reads the shipped
manifests/base/scheduler-config.yaml (as it is on 1.36, converted to v1beta1 on 1.20) with leader election
off and client qps/burst raised, and calls one `python -m extender serve --kubeconfig`.

Churn: `--gangs` KAI PodGroups of `--gang-size` pods (16 cpu each, rack required through
`topologyConstraint`) and `--plain` plain pods (2 cpu) are kept alive. Each lives `--life-s` (jittered
0.5-1.5x) after it is bound whole, then its pods and PodGroup are deleted (grace 0: there is no
kubelet) and a new one with a fresh name takes its place. Binds are followed on a watch thread that
resumes when the API server force-closes it (bench/versus.py's pattern). When `--duration-s` is up
nothing new is created; gangs in flight must still bind whole; then everything is deleted, the bench
waits for the pods to be gone and for the service to forget them, and reads its `/debug/gangs` and
`/metrics`.

Every `--sample-s` the service's and kube-scheduler's RSS (/proc/<pid>/status VmRSS) is sampled. Per
window (`--window-s`; windows that start before `--warmup-s` are warm-up): median RSS of both, the
service's filter and bind latency (mean, and p95 interpolated inside the bucket as PromQL's
histogram_quantile does, from the deltas of `gang_extender_request_seconds` between the scrapes at the
window's edges), gangs bound whole, create -> whole bound (p50, p95), the CPU both used, and the
gangs and reservations the service holds at the window's end. Output: one JSON line per window, a
JSON summary, a Markdown table; progress on stderr.

Verdict (exit 0 when every check holds, 1 otherwise, one line per broken check):
- memory flat: the service's median RSS in the last window is under `--max-rss-growth` (5%) above
  its median in the first window after warm-up;
- no latency creep: the last window's filter p95 is at most `--creep-ratio` (2x) the first
  post-warm-up window's, OR at most `--creep-floor-ms` (5 ms) above it. Both must be exceeded to
  fail: this runs on 2 shared cores beside etcd, kube-apiserver and kube-scheduler, where a filter
  answered in 0.3 ms can take 2 ms in a window in which another tenant is busy, and the histogram's
  buckets (0.2, 0.5, 1, 2, 5 ms...) make a p95 jump between bucket edges; a real creep (a cache or a
  list growing with every gang seen) keeps growing and crosses both;
- zero leftovers: no gang, reservation or pod held by the service once the cluster has settled;
- every gang bound whole, inside one rack, none partly bound when it was deleted; every plain pod bound;
- no internal error answered by the service.
kube-scheduler's RSS is reported, not judged (Go's heap grows until its GC target settles).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import re
import shutil
import statistics
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.podwatch import PodWatch
from bench.scheduler import (
    CREATE_CONCURRENCY,
    RACK_NODES,
    RUN_LABEL,
    TOPOLOGY,
    Bench,
    pid_cpu,
    pod_group_object,
    pod_object,
    rack_of_node,
    scrape,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from controlplane.start import (  # noqa: E402  (the e2e tier is not a package)
    CURRENT_VERSION,
    TOKEN,
    VERSIONS,
    ControlPlane,
    PlaneUnavailable,
    wait_until,
)

NAMESPACE = "soak"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PODGROUPS = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{NAMESPACE}/podgroups"
LATENCY = "gang_extender_request_seconds"
GANG_CPU, PLAIN_CPU = "16", "2"  # a gang of 8 fills two nodes of 64 cpu; a rack holds 16 such gangs


# ---------------------------------------------------------------------------------- pure figures


def rss_mib(status_text: str) -> float | None:
    """VmRSS from the text of /proc/<pid>/status, in MiB; None when absent (a zombie, a kernel thread)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024  # reported in kB
    return None


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def split_key(key: str) -> tuple[str, dict[str, str]]:
    """`name{a="1",b="2"}` (bench.scheduler.scrape's keys) -> (name, {a: 1, b: 2})."""
    name, _, rest = key.partition("{")
    return name, dict(_LABEL.findall(rest))


def buckets(samples: Mapping[str, float], name: str, **labels: str) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets [(le, count)], sorted by le (+Inf last), for one label set."""
    out = []
    for key, value in samples.items():
        metric, got = split_key(key)
        if metric != f"{name}_bucket" or "le" not in got:
            continue
        if all(got.get(k) == v for k, v in labels.items()):
            out.append((float(got["le"]), value))  # float("+Inf") is inf
    return sorted(out)


def bucket_delta(
    after: Sequence[tuple[float, float]], before: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Cumulative buckets of the observations between two scrapes. A count that went down means the
    process restarted in between: then the later scrape is all there is."""
    prior = dict(before)
    out = [(le, count - prior.get(le, 0.0)) for le, count in after]
    if any(c < 0 for _, c in out):
        return list(after)
    return out


def quantile(cumulative: Sequence[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of a cumulative histogram, interpolated linearly inside its bucket (PromQL's
    histogram_quantile: the first bucket starts at 0, a rank in +Inf answers the highest finite
    bound). None without observations."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    total = cumulative[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank and count > below:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = (le if not math.isinf(le) else lower), count
    return lower


def verb_figures(after: Mapping[str, float], before: Mapping[str, float], verb: str) -> dict[str, Any]:
    """Calls, mean and p95 (ms) of one verb between two scrapes of the service's /metrics."""
    key = f'{{verb="{verb}"}}'
    calls = after.get(f"{LATENCY}_count{key}", 0.0) - before.get(f"{LATENCY}_count{key}", 0.0)
    sum_s = after.get(f"{LATENCY}_sum{key}", 0.0) - before.get(f"{LATENCY}_sum{key}", 0.0)
    delta = bucket_delta(buckets(after, LATENCY, verb=verb), buckets(before, LATENCY, verb=verb))
    p95 = quantile(delta, 0.95)
    return {
        f"{verb}_calls": int(calls),
        f"{verb}_mean_ms": round(1000 * sum_s / calls, 3) if calls > 0 else None,
        f"{verb}_p95_ms": None if p95 is None else round(1000 * p95, 3),
    }


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (bench/versus.py's), None for no values."""
    vals = sorted(values)
    if not vals:
        return None
    return vals[min(len(vals) - 1, round(q * (len(vals) - 1)))]


def median(values: Iterable[float]) -> float | None:
    vals = list(values)
    return statistics.median(vals) if vals else None


@dataclass(frozen=True)
class Limits:
    max_rss_growth: float = 0.05  # fraction of the first post-warm-up window's median
    creep_ratio: float = 2.0
    creep_floor_ms: float = 5.0


def growth(first: float | None, last: float | None) -> float | None:
    if first is None or last is None or first <= 0:
        return None
    return (last - first) / first


def crept(first_ms: float | None, last_ms: float | None, limits: Limits) -> bool:
    """True when the last p95 is both over creep_ratio x the first and over creep_floor_ms above it."""
    if first_ms is None or last_ms is None:
        return False
    return last_ms > limits.creep_ratio * first_ms and last_ms - first_ms > limits.creep_floor_ms


def verdict(windows: Sequence[Mapping[str, Any]], end: Mapping[str, Any], limits: Limits) -> list[str]:
    """Every broken check, one line each; empty when the soak held. `windows` are the per-window rows,
    `end` the figures read once the cluster settled (see the module docstring for the checks)."""
    broken: list[str] = []
    steady = [w for w in windows if not w.get("warmup")]
    if len(steady) < 2:
        broken.append(f"only {len(steady)} window(s) after warm-up: nothing to compare (run longer)")
    else:
        first, last = steady[0], steady[-1]
        g = growth(first.get("service_rss_mib"), last.get("service_rss_mib"))
        if g is None:
            broken.append("memory: no RSS sample of the service in the first or last window")
        elif g >= limits.max_rss_growth:
            broken.append(
                f"memory: service RSS grew {100 * g:.1f}% after warm-up "
                f"({first['service_rss_mib']:.1f} -> {last['service_rss_mib']:.1f} MiB; "
                f"limit {100 * limits.max_rss_growth:g}%)"
            )
        f0, f1 = first.get("filter_p95_ms"), last.get("filter_p95_ms")
        if f0 is None or f1 is None:
            broken.append("latency: no filter call in the first or last window after warm-up")
        elif crept(f0, f1, limits):
            broken.append(
                f"latency: filter p95 crept {f0:.2f} -> {f1:.2f} ms "
                f"(over {limits.creep_ratio:g}x and over +{limits.creep_floor_ms:g} ms)"
            )
    for key, what in (
        ("gangs_held", "gang(s)"),
        ("reservations_held", "reservation(s)"),
        ("pods_cached", "pod(s)"),
    ):
        held = end.get(key)
        if held is None:
            broken.append(f"leftovers: the service's {what} held at the end are unknown")
        elif held:
            names = end.get("gangs_held_names") if key == "gangs_held" else None
            shown = f": {', '.join(names[:5])}" if names else ""
            broken.append(
                f"leftovers: the service still holds {held} {what} after the cluster settled{shown}"
            )
    created, whole = end.get("gangs_created", 0), end.get("gangs_whole", 0)
    if created == 0:
        broken.append("churn: no gang was created")
    if whole != created:
        broken.append(f"gangs: {created - whole} of {created} never bound whole")
    if end.get("gangs_partial"):
        broken.append(f"gangs: {end['gangs_partial']} partly bound when deleted")
    if end.get("gangs_one_rack", whole) != whole:
        broken.append(f"gangs: {whole - end['gangs_one_rack']} bound across racks (rack required)")
    if end.get("plain_bound", 0) != end.get("plain_created", 0):
        broken.append(f"plain pods: {end['plain_created'] - end['plain_bound']} never bound")
    if end.get("internal_errors"):
        broken.append(f"service: {end['internal_errors']} internal error(s) answered")
    return broken


# ---------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    version: str
    nodes: int
    duration_s: float
    warmup_s: float
    window_s: float
    sample_s: float
    gangs: int
    gang_size: int
    plain: int
    life_s: float
    gang_timeout_s: float
    settle_s: float
    limits: Limits
    seed: int = 1
    keep_dir: bool = False


def parse(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="120 s, 30 s warm-up, 20 s windows (CI; under 4 min)"
    )
    parser.add_argument("--version", choices=VERSIONS, default=CURRENT_VERSION, help="Kubernetes version")
    parser.add_argument("--nodes", type=int, default=1000, help="fake nodes (default 1000)")
    parser.add_argument("--duration-s", type=float, default=None, help="churn time (600; quick 120)")
    parser.add_argument("--warmup-s", type=float, default=None, help="windows starting before it are warm-up")
    parser.add_argument("--window-s", type=float, default=None, help="figures per window (60; quick 20)")
    parser.add_argument("--sample-s", type=float, default=None, help="RSS sampled every (5; quick 2)")
    parser.add_argument("--gangs", type=int, default=20, help="live gangs kept (default 20)")
    parser.add_argument("--gang-size", type=int, default=8, help="pods per gang (default 8)")
    parser.add_argument("--plain", type=int, default=16, help="live plain pods kept (default 16)")
    parser.add_argument(
        "--life-s", type=float, default=None, help="a gang runs this long once bound (10; quick 5)"
    )
    parser.add_argument("--gang-timeout-s", type=float, default=90.0, help="a gang not whole by then fails")
    parser.add_argument(
        "--settle-s", type=float, default=30.0, help="wait this long for the service to forget"
    )
    parser.add_argument("--max-rss-growth", type=float, default=0.05, help="allowed RSS growth (fraction)")
    parser.add_argument("--creep-ratio", type=float, default=2.0, help="filter p95 last/first allowed")
    parser.add_argument("--creep-floor-ms", type=float, default=5.0, help="filter p95 rise always allowed")
    parser.add_argument("--seed", type=int, default=1, help="seed of the lifetime jitter")
    parser.add_argument("--keep-dir", action="store_true", help="keep the work directory (logs, configs)")
    args = parser.parse_args(argv)
    quick = args.quick
    duration_s = args.duration_s or (120.0 if quick else 600.0)
    warmup_s = args.warmup_s if args.warmup_s is not None else (30.0 if quick else 60.0)
    window_s = args.window_s or (20.0 if quick else 60.0)
    if args.nodes < RACK_NODES:
        parser.error(f"--nodes: at least {RACK_NODES} (one rack)")
    if not 1 <= args.gang_size <= RACK_NODES * 4:  # 16-cpu pods: four per 64-cpu node
        parser.error(f"--gang-size: 1..{RACK_NODES * 4} (a gang must fit one rack)")
    steady = sum(1 for i in range(int(duration_s // window_s)) if i * window_s >= warmup_s)
    if steady < 2:
        parser.error("--duration-s: leaves fewer than 2 whole windows after --warmup-s to compare")
    return Settings(
        version=args.version,
        nodes=args.nodes,
        duration_s=duration_s,
        warmup_s=warmup_s,
        window_s=window_s,
        sample_s=args.sample_s or (2.0 if quick else 5.0),
        gangs=args.gangs,
        gang_size=args.gang_size,
        plain=args.plain,
        life_s=args.life_s if args.life_s is not None else (5.0 if quick else 10.0),
        gang_timeout_s=args.gang_timeout_s,
        settle_s=args.settle_s,
        limits=Limits(args.max_rss_growth, args.creep_ratio, args.creep_floor_ms),
        seed=args.seed,
        keep_dir=args.keep_dir,
    )


# ---------------------------------------------------------------------------------- the churn


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


def proc_rss_mib(pid: int) -> float | None:
    try:
        return rss_mib(Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return None


@dataclass
class Unit:
    """A gang (or a plain pod, a unit of one) as the bench saw it; `bound` and `whole_at` are written
    by the watch thread only, the rest by the event loop."""

    name: str
    size: int
    gang: bool
    loop: asyncio.AbstractEventLoop
    created_at: float | None = None  # when the last member's create returned
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    whole_at: float | None = None
    partial_at_delete: bool = False
    whole: asyncio.Event = field(default_factory=asyncio.Event)

    def observe_bound(self, pod: str, node: str, now: float) -> None:
        if pod in self.bound:
            return
        self.bound[pod] = (now, node)
        if self.whole_at is None and len(self.bound) >= self.size:
            self.whole_at = now
            self.loop.call_soon_threadsafe(self.whole.set)


@dataclass
class Soak:
    plane: ControlPlane
    settings: Settings
    session: aiohttp.ClientSession
    bench: Bench
    service_url: str = ""
    service_pid: int = 0
    scheduler_pid: int = 0
    units: dict[str, Unit] = field(default_factory=dict)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    seq: int = 0
    rng: random.Random = field(default_factory=random.Random)

    # -- processes -------------------------------------------------------------------------------

    def start_scheduler(self) -> None:
        """The shipped file with leader election off (one scheduler, no lease to wait for) and client
        qps/burst raised (binds are the service's, but kube-scheduler's own patches and events are not
        throttled at 50/s); ControlPlane converts it for 1.20 and gives 1.20 a private metrics port."""
        shipped = yaml.safe_load((REPO / "manifests" / "base" / "scheduler-config.yaml").read_text())
        shipped["leaderElection"] = {"leaderElect": False}
        shipped.setdefault("clientConnection", {}).update(qps=5000, burst=5000)
        path = self.plane.workdir / "scheduler-soak.yaml"
        path.write_text(yaml.safe_dump(shipped))
        self.plane.start_scheduler(url_prefix=self.service_url, config=path)
        self.scheduler_pid = self.plane.procs["kube-scheduler"].pid

    def check_alive(self) -> None:
        for name in ("service", "kube-scheduler", "kube-apiserver", "etcd"):
            proc = self.plane.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.plane.log_tail(name, 5)}")

    # -- API -------------------------------------------------------------------------------------

    async def delete(self, path: str, params: dict[str, str] | None = None) -> None:
        body = orjson.dumps({"gracePeriodSeconds": 0})  # no kubelet confirms a graceful delete
        async with self.session.delete(self.plane.server + path, params=params, data=body) as resp:
            await resp.read()
            if resp.status not in (200, 202, 404):
                raise RuntimeError(f"DELETE {path} -> {resp.status}")

    async def warm_up(self) -> None:
        """One plain pod through the whole path, so informers are synced and connections open."""
        await self.bench.post(PODS, pod_object("warmup", namespace=NAMESPACE, cpu="10m", group=None, run="w"))
        await asyncio.to_thread(
            wait_until,
            lambda: self.plane.api.get(f"{PODS}/warmup")["spec"].get("nodeName"),
            timeout_s=90,
            interval_s=0.2,
            what="the warm-up pod bound",
        )
        await self.delete(f"{PODS}/warmup")

    # -- one unit's life -------------------------------------------------------------------------

    def new_unit(self, gang: bool) -> Unit:
        self.seq += 1
        name = f"{'g' if gang else 'p'}{self.seq:06d}"
        size = self.settings.gang_size if gang else 1
        unit = self.units[name] = Unit(name, size, gang, asyncio.get_running_loop())
        return unit

    async def cycle(self, gang: bool) -> None:
        """Create a gang (or a plain pod), wait until it is bound whole, let it run, delete it."""
        s = self.settings
        unit = self.new_unit(gang)
        if gang:
            await self.bench.post(PODGROUPS, pod_group_object(unit.name, namespace=NAMESPACE, size=unit.size))
            pods = [
                pod_object(
                    f"{unit.name}-{m}", namespace=NAMESPACE, cpu=GANG_CPU, group=unit.name, run=unit.name
                )
                for m in range(unit.size)
            ]
        else:
            pods = [pod_object(unit.name, namespace=NAMESPACE, cpu=PLAIN_CPU, group=None, run=unit.name)]
        await asyncio.gather(*(self.bench.post(PODS, p) for p in pods))
        unit.created_at = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(unit.whole.wait(), s.gang_timeout_s)
        if unit.whole_at is not None:
            # jittered, so the gangs created together at the start do not stay in step
            life_s = s.life_s * self.rng.uniform(0.5, 1.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), life_s)
        unit.partial_at_delete = 0 < len(unit.bound) < unit.size
        await self.delete(PODS, params={"labelSelector": f"{RUN_LABEL}={unit.name}"})
        if gang:
            await self.delete(f"{PODGROUPS}/{unit.name}")

    async def worker(self, gang: bool, delay_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), delay_s)
        while not self.stopping.is_set():
            await self.cycle(gang)

    # -- sampling --------------------------------------------------------------------------------

    async def metrics(self) -> dict[str, float]:
        return await asyncio.to_thread(scrape, self.service_url + "/metrics")

    async def churn(self) -> list[dict[str, Any]]:
        """Run the workers for the duration; sample RSS and close a window at each window edge."""
        s = self.settings
        n_windows = int(s.duration_s // s.window_s)
        t0 = time.monotonic()
        # Staggered over the first seconds so the start is a ramp, not one burst of every gang.
        spread_s = min(5.0, s.warmup_s / 2)
        workers = [
            asyncio.create_task(self.worker(True, spread_s * i / max(1, s.gangs))) for i in range(s.gangs)
        ]
        workers += [
            asyncio.create_task(self.worker(False, spread_s * i / max(1, s.plain))) for i in range(s.plain)
        ]
        windows: list[dict[str, Any]] = []
        before = await self.metrics()
        cpu_before = (pid_cpu(self.service_pid), pid_cpu(self.scheduler_pid))
        try:
            for i in range(n_windows):
                start_s, end_s = i * s.window_s, (i + 1) * s.window_s
                rss: list[tuple[float | None, float | None]] = []
                while (now := time.monotonic() - t0) < end_s:
                    rss.append((proc_rss_mib(self.service_pid), proc_rss_mib(self.scheduler_pid)))
                    self.check_alive()
                    for task in workers:
                        if task.done() and task.exception():
                            raise RuntimeError(f"a churn worker failed: {task.exception()!r}")
                    await asyncio.sleep(min(s.sample_s, max(0.0, end_s - now)))
                after = await self.metrics()
                cpu_after = (pid_cpu(self.service_pid), pid_cpu(self.scheduler_pid))
                row = self.window_row(i, start_s, end_s, t0, rss, before, after, cpu_before, cpu_after)
                windows.append(row)
                print(json.dumps(row), flush=True)
                log(
                    f"window {i + 1}/{n_windows} ({start_s:.0f}-{end_s:.0f} s"
                    f"{', warm-up' if row['warmup'] else ''}): {row['gangs_bound']} gangs bound, "
                    f"filter p95 {row['filter_p95_ms']} ms, "
                    f"service RSS {row['service_rss_mib']} MiB, holds {row['gangs_held']} gangs"
                )
                before, cpu_before = after, cpu_after
        finally:
            self.stopping.set()
            log("churn over: no new gangs; waiting for those in flight, then deleting them")
            done, pending = await asyncio.wait(workers, timeout=s.gang_timeout_s + s.life_s * 1.5 + 30)
            for task in pending:
                task.cancel()
            for task in done:
                if not task.cancelled() and task.exception():
                    log(f"a churn worker failed while draining: {task.exception()!r}")
        return windows

    def window_row(
        self,
        i: int,
        start_s: float,
        end_s: float,
        t0: float,
        rss: list[tuple[float | None, float | None]],
        before: dict[str, float],
        after: dict[str, float],
        cpu_before: tuple[float, float],
        cpu_after: tuple[float, float],
    ) -> dict[str, Any]:
        s = self.settings
        lo, hi = t0 + start_s, t0 + end_s
        gangs = [
            u
            for u in list(self.units.values())
            if u.gang and u.whole_at is not None and lo <= u.whole_at < hi
        ]
        waits = [
            u.whole_at - u.created_at for u in gangs if u.created_at is not None and u.whole_at is not None
        ]
        service_rss = median(r for r, _ in rss if r is not None)
        scheduler_rss = median(r for _, r in rss if r is not None)
        row: dict[str, Any] = {
            "bench": "soak-window",
            "window": i + 1,
            "start_s": round(start_s),
            "end_s": round(end_s),
            "warmup": start_s < s.warmup_s,
            "gangs_bound": len(gangs),
            "gang_whole_p50_s": _round(percentile(waits, 0.5)),
            "gang_whole_p95_s": _round(percentile(waits, 0.95)),
            **verb_figures(after, before, "filter"),
            **verb_figures(after, before, "bind"),
            "service_rss_mib": _round(service_rss, 1),
            "service_rss_max_mib": _round(max((r for r, _ in rss if r is not None), default=None), 1),
            "scheduler_rss_mib": _round(scheduler_rss, 1),
            "service_cores": round((cpu_after[0] - cpu_before[0]) / s.window_s, 2),
            "scheduler_cores": round((cpu_after[1] - cpu_before[1]) / s.window_s, 2),
            "gangs_held": int(after.get('gang_extender_cache_objects{cache="gangs"}', -1)),
            "reservations_held": int(after.get('gang_extender_cache_objects{cache="reservations"}', -1)),
            "rss_samples": len(rss),
        }
        return row

    # -- the end ---------------------------------------------------------------------------------

    async def settle(self) -> dict[str, Any]:
        """Delete whatever is left, wait for the pods to be gone, then for the service to forget them."""
        s = self.settings
        await self.delete(PODS)
        await self.delete(PODGROUPS)
        await asyncio.to_thread(
            wait_until,
            lambda: not self.plane.api.get(f"{PODS}?limit=1")["items"],
            timeout_s=120,
            interval_s=0.5,
            what="the soak's pods deleted",
        )
        t0 = time.monotonic()
        end: dict[str, Any] = {}
        while True:
            samples = await self.metrics()
            debug = await asyncio.to_thread(_get_json, self.service_url + "/debug/gangs")
            held = debug.get("gangs") if isinstance(debug, dict) else None
            end = {
                "gangs_held": None if held is None else len(held),
                "gangs_held_names": [str(g.get("gang")) for g in held or []],
                # what the service says of a few of them: the first clue when a gang is not forgotten
                "gangs_held_sample": [
                    {
                        "gang": g.get("gang"),
                        "phase": g.get("phase"),
                        "members": len(g.get("members") or []),
                        "plan": len(g.get("plan") or {}),
                        "failures": g.get("failures"),
                        "lastReason": g.get("lastReason"),
                    }
                    for g in (held or [])[:3]
                ],
                "reservations_held": _gauge(samples, "reservations"),
                "reservations_in_debug": sum(len(g.get("reservation") or {}) for g in held or []),
                "pods_cached": _gauge(samples, "pods"),
                "nodes_cached": _gauge(samples, "nodes"),  # the cluster the service saw: --nodes
            }
            clear = all(end[k] == 0 for k in ("gangs_held", "reservations_held", "pods_cached"))
            if clear or time.monotonic() - t0 > s.settle_s:
                break
            await asyncio.sleep(0.5)
        end["settle_s"] = round(time.monotonic() - t0, 1)
        for key, metric in (
            ("service_gangs_bound", "gang_extender_gangs_bound_total"),
            ("service_gang_timeouts", "gang_extender_gang_timeouts_total"),
            ("bind_deadline_answers", "gang_extender_bind_deadline_answers_total"),
            ("release_bind_failures", "gang_extender_release_bind_failures_total"),
        ):
            end[key] = int(samples.get(metric, 0))
        end["internal_errors"] = int(
            sum(v for k, v in samples.items() if split_key(k)[0] == "gang_extender_internal_errors_total")
        )
        return end

    def unit_figures(self) -> dict[str, Any]:
        gangs = [u for u in self.units.values() if u.gang]
        plain = [u for u in self.units.values() if not u.gang]
        whole = [u for u in gangs if u.whole_at is not None]
        return {
            "gangs_created": len(gangs),
            "gangs_whole": len(whole),
            "gangs_one_rack": sum(
                1 for u in whole if len({rack_of_node(n) for _, n in u.bound.values()}) == 1
            ),
            "gangs_partial": sum(1 for u in gangs if u.partial_at_delete),
            "plain_created": len(plain),
            "plain_bound": sum(1 for u in plain if u.whole_at is not None),
        }


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def _gauge(samples: Mapping[str, float], cache: str) -> int | None:
    value = samples.get(f'gang_extender_cache_objects{{cache="{cache}"}}')
    return None if value is None else int(value)


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------------------- report

COLUMNS = (
    ("window", "window"),
    ("span s", "span"),
    ("gangs bound", "gangs_bound"),
    ("whole p95 s", "gang_whole_p95_s"),
    ("filter calls", "filter_calls"),
    ("filter mean ms", "filter_mean_ms"),
    ("filter p95 ms", "filter_p95_ms"),
    ("bind mean ms", "bind_mean_ms"),
    ("bind p95 ms", "bind_p95_ms"),
    ("service RSS MiB", "service_rss_mib"),
    ("scheduler RSS MiB", "scheduler_rss_mib"),
    ("service cores", "service_cores"),
    ("gangs held", "gangs_held"),
    ("reservations held", "reservations_held"),
)


def markdown(windows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    lines = ["| " + " | ".join(head for head, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for w in windows:
        cells = []
        for _, key in COLUMNS:
            if key == "span":
                cells.append(f"{w['start_s']}-{w['end_s']}{' (warm-up)' if w['warmup'] else ''}")
            else:
                cells.append("-" if w.get(key) is None else str(w[key]))
        lines.append("| " + " | ".join(cells) + " |")
    g = summary.get("service_rss_growth")
    lines.append("")
    lines.append(
        f"{summary['gangs_whole']}/{summary['gangs_created']} gangs whole "
        f"({summary['gangs_one_rack']} in one rack, {summary['gangs_partial']} partial), "
        f"{summary['plain_bound']}/{summary['plain_created']} plain pods bound; "
        f"service RSS growth after warm-up {'-' if g is None else f'{100 * g:+.1f}%'}; "
        f"filter p95 {summary.get('filter_p95_first_ms')} -> {summary.get('filter_p95_last_ms')} ms; "
        f"held at the end: {summary['gangs_held']} gangs, {summary['reservations_held']} reservations, "
        f"{summary['pods_cached']} pods (settled in {summary['settle_s']} s)."
    )
    return "\n".join(lines)


def summarize(
    settings: Settings, windows: Sequence[Mapping[str, Any]], end: Mapping[str, Any], wall_s: float
) -> dict[str, Any]:
    steady = [w for w in windows if not w["warmup"]]
    first, last = (steady[0], steady[-1]) if steady else ({}, {})
    return {
        "bench": "soak-summary",
        "version": settings.version,
        "nodes": settings.nodes,
        "duration_s": settings.duration_s,
        "warmup_s": settings.warmup_s,
        "window_s": settings.window_s,
        "gangs_target": settings.gangs,
        "gang_size": settings.gang_size,
        "plain_target": settings.plain,
        "service_rss_first_mib": first.get("service_rss_mib"),
        "service_rss_last_mib": last.get("service_rss_mib"),
        "service_rss_growth": _round(growth(first.get("service_rss_mib"), last.get("service_rss_mib")), 4),
        "scheduler_rss_first_mib": first.get("scheduler_rss_mib"),
        "scheduler_rss_last_mib": last.get("scheduler_rss_mib"),
        "scheduler_rss_growth": _round(
            growth(first.get("scheduler_rss_mib"), last.get("scheduler_rss_mib")), 4
        ),
        "filter_p95_first_ms": first.get("filter_p95_ms"),
        "filter_p95_last_ms": last.get("filter_p95_ms"),
        "gangs_bound_per_window": [w["gangs_bound"] for w in windows],
        **{k: v for k, v in end.items() if k != "gangs_held_names"},
        "wall_s": round(wall_s),
    }


# ---------------------------------------------------------------------------------- entry


async def soak_all(settings: Settings, plane: ControlPlane) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    connector = aiohttp.TCPConnector(limit=2 * CREATE_CONCURRENCY + 8, ssl=False)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        bench = Bench(plane, None, plane.workdir, session=session)  # type: ignore[arg-type]
        soak = Soak(plane, settings, session, bench, rng=random.Random(settings.seed))
        await bench.post("/apis/kai.scheduler/v1alpha1/topologies", TOPOLOGY, ok=(200, 201, 409))
        plane.api.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        # The service compiles its placement kernels while the nodes are created: both take a while,
        # and it lists nodes by a watch, so the nodes it has not seen yet arrive as events.
        t0 = time.monotonic()
        service = asyncio.create_task(
            asyncio.to_thread(plane.start_service, extra_args=["--log-level", "WARNING"])
        )
        try:
            await bench.grow_nodes(settings.nodes)
        finally:
            soak.service_url = await service
        soak.service_pid = plane.procs["service"].pid
        log(f"service ready at {soak.service_url} ({time.monotonic() - t0:.0f} s after its start)")
        soak.start_scheduler()
        await soak.warm_up()

        def observe(kind: str, pod: dict[str, Any], now: float) -> None:
            meta = pod.get("metadata") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            unit = soak.units.get((meta.get("labels") or {}).get(RUN_LABEL, ""))
            if kind != "DELETED" and node and unit is not None:
                unit.observe_bound(meta.get("name", ""), node, now)

        watch = PodWatch(plane.server, PODS, observe, token=TOKEN)
        await asyncio.to_thread(watch.start)
        log(
            f"churn for {settings.duration_s:g} s: {settings.gangs} gangs of {settings.gang_size}, "
            f"{settings.plain} plain pods"
        )
        try:
            windows = await soak.churn()
        finally:
            # the settle below waits on the API, not on the watch; stop it once the churn is done
            await asyncio.to_thread(watch.stop)
        end = {**soak.unit_figures(), **await soak.settle(), "watch_restarts": watch.restarts}
        soak.check_alive()
    return windows, end


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    t0 = time.monotonic()
    try:
        plane = ControlPlane(controller_manager=False, version=settings.version)
    except PlaneUnavailable as exc:
        print(f"control plane {settings.version} unavailable: {exc}", file=sys.stderr)
        return 2
    windows: list[dict[str, Any]] = []
    end: dict[str, Any] = {}
    try:
        plane.start()
        plane.apply_crds()
        log(f"control plane {settings.version} up in {time.monotonic() - t0:.0f} s")
        windows, end = asyncio.run(soak_all(settings, plane))
    except (PlaneUnavailable, RuntimeError, AssertionError) as exc:
        print(f"bench failed: {exc}\n# logs in {plane.workdir}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        if not settings.keep_dir and windows:
            shutil.rmtree(plane.workdir, ignore_errors=True)
    wall_s = time.monotonic() - t0
    broken = verdict(windows, end, settings.limits)
    summary = summarize(settings, windows, end, wall_s) | {"ok": not broken, "broken": broken}
    print(json.dumps(summary), flush=True)
    print(markdown(windows, summary))
    for line in broken:
        print(f"FAILED: {line}")
    if not broken:
        print("soak held: memory flat, no latency creep, zero leftovers, every gang whole")
    log(f"total {wall_s:.0f} s")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
