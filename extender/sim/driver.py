"""A kube-scheduler stand-in that drives the real extender service over loopback HTTP.

It does what kube-scheduler does around an extender, and no more:
- a scheduling queue: activeQ ordered by priority then creation; a pod that fails goes to
  backoff (1 s doubling to 10 s); a pod whose nudge annotation changes goes straight back to
  activeQ, as a pod update does in kube-scheduler;
- one serial scheduling cycle at a time: the basic in-tree filters (extender/sim/intree.py) pick
  the node list, then POST /filter (nodeCacheCapable: NodeNames), POST /prioritize when more than
  one node passed, the highest total wins (ties broken by the seeded RNG);
- the pod is assumed on its node and bound by its own task (POST /bind), so binds run
  concurrently, as kube-scheduler's binding goroutines do; a failed bind forgets the assumption.

Time: backoff runs on a simulated clock that never lags real time but jumps ahead when nothing
else can happen, so a run takes seconds even when pods back off for minutes. The service itself
waits in real time (its gang barrier), so the driver only jumps after a short real pause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import heapq
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from extender.model import labels as L
from extender.model.keys import PodKey, pod_key
from extender.model.resources import QuantityError, pod_requests
from extender.sim.expand import DEFAULT_SCHEDULER, Expansion, Workload, expand
from extender.sim.intree import NodeState, filter_nodes, fit_error
from extender.sim.queues import QueueUsage

log = logging.getLogger(__name__)

KAI_SCHEDULER = "kai-scheduler"
WATCH_EVERY_S = 0.5  # how often (simulated) the watched gang is looked at
MAX_REASONS = 8  # per pod: enough to tell a story, bounded for a pod that fails for ever-changing reasons


class PodOutcome(enum.Enum):
    BOUND = "bound"
    PENDING = "pending"
    NOT_OURS = "not-ours"  # another scheduler's pod: never sent to the extender
    INVALID = "invalid"  # the pod itself is malformed (e.g. a bad quantity)
    DELETED = "deleted"
    EVICTED = "evicted"  # bound, then deleted (a preemptor's victim): its node has the room back


class StopReason(enum.Enum):
    ALL_BOUND = "all pods bound"
    NOTHING_LEFT = "no pod left to try"
    IDLE = "no progress"
    WALL_LIMIT = "wall-time limit"


@dataclasses.dataclass(frozen=True)
class DriverOptions:
    scheduler_names: tuple[str, ...] = (DEFAULT_SCHEDULER, KAI_SCHEDULER)
    """The profiles this kube-scheduler runs; the seeds written for KAI name kai-scheduler."""
    idle_timeout_s: float = 60.0
    """Stop after this much simulated time without a bind (and nothing in flight)."""
    idle_real_s: float = 0.5
    """...and at least this much real time, so the service's real-time gang backoff can end."""
    max_wall_s: float = 120.0
    """Stop regardless after this much real time."""
    http_timeout_s: float = 10.0
    """kube-scheduler's httpTimeout for every verb (the shipped configuration sets 10 s)."""
    prioritize_weight: int = 1
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 10.0
    real_pause_s: float = 0.02
    """How long the driver waits for real events before jumping the simulated clock."""


@dataclasses.dataclass
class PodRecord:
    """What happened to one pod."""

    namespace: str
    name: str
    workload: str
    scheduler_name: str
    created_s: float
    attempts: int = 0
    nudges: int = 0
    node: str | None = None
    bound_s: float | None = None
    last_message: str = ""
    outcome: PodOutcome = PodOutcome.PENDING
    reasons: list[str] = dataclasses.field(default_factory=list)
    """Every distinct reason the pod was turned away for, first seen first (a hold that ended shows here)."""

    @property
    def key(self) -> PodKey:
        return pod_key(self.namespace, self.name)

    @property
    def time_to_bind_s(self) -> float | None:
        return None if self.bound_s is None else self.bound_s - self.created_s


@dataclasses.dataclass(frozen=True)
class Arrival:
    """Objects created `at_s` into the run (a workload submitted), and, with `life_s`, deleted that long
    after its last pod is bound (the job ran and ended; no kubelet here runs it)."""

    at_s: float
    objects: tuple[dict[str, Any], ...]
    life_s: float | None = None


@dataclasses.dataclass
class SimulationResult:
    pods: list[PodRecord]
    workloads: list[Workload]
    node_labels: dict[str, dict[str, str]]
    gangs_debug: Any  # GET /debug/gangs as the service answered it, or None
    problems: list[str]
    held: list[str]  # sequenced replicatedJobs never released
    overcommit: list[str]
    wall_s: float
    sim_s: float
    stop_reason: StopReason
    requests: dict[str, int]  # verb -> calls made
    queues_debug: Any = None  # GET /debug/queues at the end, when the cluster has Queue objects
    queue_peak: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per queue and resource, the most its bound pods ever requested (counted by the driver)."""
    queue_low_after_eviction: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per queue that lost pods to an eviction, the least it held right after one."""
    queue_breaches: list[str] = dataclasses.field(default_factory=list)
    """Every moment a queue's bound pods requested more than its limit: must stay empty."""
    pod_queues: dict[str, str] = dataclasses.field(default_factory=dict)
    """Pod key -> its queue, for every pod seen whose queue exists (evicted pods included)."""
    ended: dict[str, float] = dataclasses.field(default_factory=dict)
    """Arrivals with a life: pod key -> when its job ended (deleted, once every pod of it ran life_s)."""
    watched: list[tuple[float, Any]] = dataclasses.field(default_factory=list)
    """(when, GET /debug/gangs/<watched gang>) each time what it says changed."""

    def pods_of(self, workload: str) -> list[PodRecord]:
        return [p for p in self.pods if p.workload == workload]


class SimClock:
    """Seconds since start: real elapsed time plus every jump taken while nothing could happen.

    It stands at 0 until `start`: the service's start-up (compiling its placement kernels on a cold
    cache takes seconds) is not simulated time, or the first arrivals would all come at once."""

    def __init__(self) -> None:
        self._t0: float | None = None
        self._skipped = 0.0

    def start(self) -> None:
        if self._t0 is None:
            self._t0 = time.monotonic()

    def now(self) -> float:
        return self.real() + self._skipped

    def real(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    def jump_to(self, t: float) -> None:
        ahead = t - self.now()
        if ahead > 0:
            self._skipped += ahead


class SchedulingQueue:
    """activeQ (priority, then creation order) and backoff, as kube-scheduler keeps them."""

    def __init__(self, *, initial_s: float, max_s: float) -> None:
        self._active: list[tuple[int, int, PodKey]] = []
        self._in_active: set[PodKey] = set()
        self._backoff: dict[PodKey, float] = {}
        self._failures: dict[PodKey, int] = {}
        self._order: dict[PodKey, tuple[int, int]] = {}
        self._seq = 0
        self._initial_s = initial_s
        self._max_s = max_s

    def add(self, key: PodKey, *, priority: int) -> None:
        if key not in self._order:
            self._order[key] = (-priority, self._seq)
            self._seq += 1
        self._activate(key)

    def _activate(self, key: PodKey) -> None:
        self._backoff.pop(key, None)
        if key not in self._in_active:
            neg_prio, seq = self._order[key]
            heapq.heappush(self._active, (neg_prio, seq, key))
            self._in_active.add(key)

    def activate(self, key: PodKey) -> bool:
        """Move a backing-off pod straight to activeQ (a pod update). False if it is not waiting."""
        if key in self._backoff:
            self._activate(key)
            return True
        return False

    def backoff(self, key: PodKey, *, now: float) -> float:
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        delay = min(self._initial_s * 2 ** (n - 1), self._max_s)
        self._backoff[key] = now + delay
        return delay

    def forget(self, key: PodKey) -> None:
        self._backoff.pop(key, None)
        self._in_active.discard(key)  # a stale heap entry is skipped on pop

    def pop(self, *, now: float) -> PodKey | None:
        for key, ready_at in list(self._backoff.items()):
            if ready_at <= now:
                self._activate(key)
        while self._active:
            _, _, key = heapq.heappop(self._active)
            if key in self._in_active:
                self._in_active.discard(key)
                return key
        return None

    def next_ready_at(self) -> float | None:
        return min(self._backoff.values(), default=None)

    def waiting(self) -> int:
        return len(self._in_active) + len(self._backoff)


class ExtenderClient:
    """kube-scheduler's HTTP extender client: POST JSON, 200 or an error, the verb's reply shape."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, timeout_s: float) -> None:
        self._session = session
        self._base = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.calls: dict[str, int] = {}

    async def call(self, verb: str, body: Mapping[str, Any]) -> Any:
        """The decoded reply; raises RuntimeError with kube-scheduler's wording on any failure."""
        self.calls[verb] = self.calls.get(verb, 0) + 1
        url = f"{self._base}/{verb}"
        try:
            async with self._session.post(
                url,
                data=orjson.dumps(body),
                headers={"Content-Type": "application/json"},
                timeout=self._timeout,
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    raise RuntimeError(
                        f"failed {verb} with extender at URL {url}, code {resp.status}: {text}"
                    )
                raw = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeError(
                f"failed {verb} with extender at URL {url}: {type(exc).__name__} {exc}"
            ) from None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RuntimeError(f"failed {verb} with extender at URL {url}: bad JSON reply ({exc})") from None

    async def get_json(self, path: str) -> Any:
        try:
            async with self._session.get(f"{self._base}{path}", timeout=self._timeout) as resp:
                if resp.status != 200:
                    return None
                return orjson.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
            return None


class Driver:
    """The simulated kube-scheduler around one extender service and one embedded cluster."""

    def __init__(
        self,
        *,
        cluster: Any,
        client: ExtenderClient,
        expansion: Expansion,
        options: DriverOptions,
        seed: int = 0,
        priorities: Mapping[str, int] | None = None,
        clock: SimClock | None = None,
        arrivals: tuple[Arrival, ...] = (),
        watch_gang: str = "",
    ) -> None:
        self._cluster = cluster
        self._arrivals = sorted(arrivals, key=lambda a: a.at_s)
        self._running: list[tuple[Arrival, list[PodKey]]] = []  # arrived with a life, not ended yet
        self._ending: list[tuple[float, list[PodKey], Arrival]] = []  # (when, its pods, it) once whole
        self.ended: dict[str, float] = {}
        self._watch_gang = watch_gang
        self.watched: list[tuple[float, Any]] = []
        self._watched_at = float("-inf")
        self._client = client
        self._expansion = expansion
        self._opt = options
        self._rng = random.Random(seed)
        self._priorities = dict(priorities or {})
        self.clock = clock or SimClock()
        self.queue = SchedulingQueue(initial_s=options.backoff_initial_s, max_s=options.backoff_max_s)
        self.records: dict[PodKey, PodRecord] = {}
        self.nodes: dict[str, NodeState] = {}
        self._assumed: dict[PodKey, tuple[str, dict[str, int]]] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._nudge_seen: dict[PodKey, str] = {}
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._last_activity_sim = 0.0  # a bind, a bind answered, or a nudge: anything that can unblock
        self._last_activity_real = 0.0
        self.stop_reason = StopReason.IDLE
        self.queue_usage = QueueUsage(cluster)

    # ---------------------------------------------------------------- setup
    def start(self) -> None:
        """Read nodes and pods from the cluster, queue every pending pod, start watching."""
        self.clock.start()  # simulated time begins here, whoever made the clock
        for node in self._cluster.list("", "Node"):
            state = NodeState.of(node)
            self.nodes[state.name] = state
        for pod in self._cluster.list("", "Pod"):
            self._admit(pod)
        self._cluster.add_listener(self._on_event)

    def _admit(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        key = pod_key(str(meta.get("namespace", "")), str(meta.get("name", "")))
        if key in self.records:
            return
        wl = self._expansion.workload_of.get(key)
        label = wl.label if wl else f"Pod {key}"
        group = str((meta.get("annotations") or {}).get("pod-group-name") or "")
        if group and label == f"Pod {key}":
            label = (
                f"PodGroup {meta.get('namespace', '')}/{group}"  # bare pods of one gang, reported together
            )
        rec = PodRecord(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            workload=label,
            scheduler_name=str(spec.get("schedulerName") or L.DEFAULT_SCHEDULER_NAME),
            created_s=self.clock.now(),
        )
        self.records[key] = rec
        self.queue_usage.admitted(key, pod)
        self._nudge_seen[key] = str((meta.get("annotations") or {}).get(L.NUDGE, ""))
        node = spec.get("nodeName")
        if node:
            rec.node, rec.bound_s, rec.outcome = node, rec.created_s, PodOutcome.BOUND
            rec.last_message = "already bound in the input"
            self._account(node, pod, sign=1)
            self.queue_usage.bound(key, pod)
            return
        if rec.scheduler_name not in self._opt.scheduler_names:
            rec.outcome = PodOutcome.NOT_OURS
            rec.last_message = (
                f"schedulerName {rec.scheduler_name!r} is not a profile of this scheduler "
                f"({', '.join(self._opt.scheduler_names)})"
            )
            return
        self.queue.add(key, priority=self._priority_of(pod))

    def _priority_of(self, pod: Mapping[str, Any]) -> int:
        spec = pod.get("spec") or {}
        if isinstance(spec.get("priority"), int):
            return int(spec["priority"])
        return self._priorities.get(str(spec.get("priorityClassName") or ""), 0)

    def _account(self, node: str, pod: Mapping[str, Any], *, sign: int) -> None:
        state = self.nodes.get(node)
        if state is None:
            return
        try:
            state.add(pod_requests(pod), sign)
        except QuantityError:
            pass

    # ---------------------------------------------------------------- events
    def _on_event(self, event: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") not in ("Pod", None):
            return
        if threading.get_ident() == self._loop_thread:
            self._events.append((event, obj))
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._events.append, (event, obj))
            self._loop.call_soon_threadsafe(self._wake.set)

    def _drain_events(self) -> None:
        events, self._events = self._events, []
        for event, pod in events:
            meta = pod.get("metadata") or {}
            key = pod_key(str(meta.get("namespace", "")), str(meta.get("name", "")))
            rec = self.records.get(key)
            if rec is None:
                continue
            if event == "DELETED":
                self.queue.forget(key)
                if rec.outcome is PodOutcome.PENDING:
                    rec.outcome = PodOutcome.DELETED
                elif rec.outcome is PodOutcome.BOUND and rec.node:
                    # no kubelet here: the deletion completes at once and the node has the room back
                    self._account(rec.node, pod, sign=-1)
                    self.queue_usage.evicted(key)
                    self._assumed.pop(key, None)
                    rec.outcome = PodOutcome.EVICTED
                    rec.last_message = "evicted"
                    self._touch()
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if node and rec.outcome is not PodOutcome.BOUND:
                # bound by the service (a gang binds its members together); the bind reply may follow
                if key not in self._assumed:
                    self._account(node, pod, sign=1)
                    self._assumed[key] = (node, {})
                self.queue_usage.bound(key, pod)
                self._mark_bound(rec, node)
                continue
            nudge = str((meta.get("annotations") or {}).get(L.NUDGE, ""))
            if nudge and nudge != self._nudge_seen.get(key):
                self._nudge_seen[key] = nudge
                rec.nudges += 1
                if self.queue.activate(key):
                    self._touch()

    def _mark_bound(self, rec: PodRecord, node: str) -> None:
        if rec.outcome is PodOutcome.BOUND:
            return
        rec.node, rec.bound_s, rec.outcome = node, self.clock.now(), PodOutcome.BOUND
        if self.queue_usage.queues and (pod := self._cluster.get("", "Pod", rec.namespace, rec.name)):
            self.queue_usage.bound(rec.key, pod)
        self.queue.forget(rec.key)
        self._touch()
        self._release_sequenced()

    def _touch(self) -> None:
        self._last_activity_sim = self.clock.now()
        self._last_activity_real = self.clock.real()

    def _release_sequenced(self) -> None:
        def ready(k: PodKey) -> bool:
            r = self.records.get(k)
            return r is not None and r.outcome is PodOutcome.BOUND

        for obj in self._expansion.release(ready):
            stored = self._cluster.apply(obj)
            if stored.get("kind") == "Pod":
                self._admit(stored)

    # ---------------------------------------------------------------- the loop
    # ---------------------------------------------------------------- arrivals and ends
    def _timeline(self) -> None:
        """Create the arrivals that are due; delete the jobs whose life ran out."""
        now = self.clock.now()
        while self._arrivals and self._arrivals[0].at_s <= now:
            arrival = self._arrivals.pop(0)
            keys: list[PodKey] = []
            for obj in arrival.objects:
                stored = self._cluster.apply(obj)
                if stored.get("kind") == "Pod":
                    self._admit(stored)
                    meta = stored.get("metadata") or {}
                    keys.append(pod_key(str(meta.get("namespace", "")), str(meta.get("name", ""))))
            if arrival.life_s is not None:
                self._running.append((arrival, keys))
            self._touch()
        still = []
        for arrival, keys in self._running:
            if all(self.records[k].outcome is PodOutcome.BOUND for k in keys):
                assert arrival.life_s is not None
                self._ending.append((now + arrival.life_s, keys, arrival))
            else:
                still.append((arrival, keys))
        self._running = still
        due = [e for e in self._ending if e[0] <= now]
        self._ending = [e for e in self._ending if e[0] > now]
        for _, keys, arrival in due:
            for k in keys:
                ns, name = k.split("/", 1)
                self._cluster.delete("", "Pod", ns, name)
                self.ended[k] = now
            for obj in arrival.objects:
                meta = obj.get("metadata") or {}
                api_group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
                if obj.get("kind") != "Pod" and version:
                    kind, name = str(obj.get("kind")), str(meta.get("name"))
                    self._cluster.delete(api_group, kind, meta.get("namespace"), name)
            self._touch()

    def _timeline_next(self) -> float | None:
        times = [self._arrivals[0].at_s] if self._arrivals else []
        times += [e[0] for e in self._ending]
        return min(times) if times else None

    async def _watch(self) -> None:
        """Note what the service says of the watched gang when it changes (GET /debug/gangs/...)."""
        if not self._watch_gang or self.clock.now() - self._watched_at < WATCH_EVERY_S:
            return
        self._watched_at = self.clock.now()
        doc = await self._client.get_json(f"/debug/gangs/{self._watch_gang}")
        said = None if doc is None else {k: doc.get(k) for k in ("phase", "hold", "heldFor", "lastReason")}
        if not self.watched or self.watched[-1][1] != said:
            self.watched.append((round(self.clock.now(), 2), said))

    # ---------------------------------------------------------------- the loop
    async def run(self) -> None:
        while True:
            self._drain_events()
            self._timeline()
            await self._watch()
            key = self.queue.pop(now=self.clock.now())
            if key is not None:
                await self._schedule_one(key)
                continue
            upcoming = self._timeline_next()
            if not self._inflight and self.queue.waiting() == 0 and upcoming is None and not self._running:
                all_bound = all(r.outcome is PodOutcome.BOUND for r in self.records.values())
                self.stop_reason = StopReason.ALL_BOUND if all_bound else StopReason.NOTHING_LEFT
                return
            if self.clock.real() > self._opt.max_wall_s:
                self.stop_reason = StopReason.WALL_LIMIT
                return
            idle_sim = self.clock.now() - self._last_activity_sim
            idle_real = self.clock.real() - self._last_activity_real
            if (
                not self._inflight
                and upcoming is None
                and idle_sim >= self._opt.idle_timeout_s
                and idle_real >= self._opt.idle_real_s
            ):
                self.stop_reason = StopReason.IDLE
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._opt.real_pause_s)
                continue  # something happened: look again before jumping the clock
            except TimeoutError:
                pass
            nxt = self.queue.next_ready_at()
            if upcoming is not None:
                nxt = upcoming if nxt is None else min(nxt, upcoming)
            if nxt is not None:
                self.clock.jump_to(min(nxt, self._last_activity_sim + self._opt.idle_timeout_s))
            elif not self._inflight:
                self.clock.jump_to(self._last_activity_sim + self._opt.idle_timeout_s)

    async def drain(self) -> None:
        """Wait for binds still in flight (a stopped run must not leave tasks behind)."""
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        self._drain_events()

    async def _schedule_one(self, key: PodKey) -> None:
        rec = self.records[key]
        ns, name = rec.namespace, rec.name
        pod = self._cluster.get("", "Pod", ns, name)
        if pod is None:
            rec.outcome = PodOutcome.DELETED
            return
        if (pod.get("spec") or {}).get("nodeName"):
            self._mark_bound(rec, pod["spec"]["nodeName"])
            return
        rec.attempts += 1
        try:
            requests = pod_requests(pod)
        except QuantityError as exc:
            rec.outcome = PodOutcome.INVALID
            rec.last_message = f"invalid pod: {exc}"
            return
        feasible, reasons = filter_nodes(pod, requests, self.nodes.values())
        if not feasible:
            self._reject(rec, fit_error(len(self.nodes), reasons))
            return
        wire_pod = {k: v for k, v in pod.items() if k not in ("apiVersion", "kind")}
        try:
            reply = await self._client.call("filter", {"Pod": wire_pod, "Nodes": None, "NodeNames": feasible})
            passed = self._parse_filter(reply, feasible, reasons)
        except RuntimeError as exc:
            self._reject(rec, f"SchedulerError: {exc}")
            return
        if not passed:
            self._reject(rec, fit_error(len(self.nodes), reasons))
            return
        chosen = passed[0] if len(passed) == 1 else await self._prioritize(wire_pod, passed)
        self.nodes[chosen].add(requests)
        self._assumed[key] = (chosen, requests)
        task = asyncio.create_task(self._bind(rec, pod, chosen))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    def _parse_filter(self, reply: Any, sent: list[str], reasons: Any) -> list[str]:
        if not isinstance(reply, dict):
            raise RuntimeError(f"filter reply is not a JSON object: {str(reply)[:80]}")
        if reply.get("Error"):
            raise RuntimeError(str(reply["Error"]))
        names = reply.get("NodeNames")
        if names is None:
            names = [
                n.get("metadata", {}).get("name") for n in ((reply.get("Nodes") or {}).get("items") or [])
            ]
        sent_set = set(sent)
        for n in names:
            if n not in sent_set:
                raise RuntimeError(
                    f'extender claims a filtered node "{n}" which is not found in the input node list'
                )
        failed = {**(reply.get("FailedNodes") or {}), **(reply.get("FailedAndUnresolvableNodes") or {})}
        passed = set(names)
        for n in sent:
            if n not in passed:
                # nodes dropped without a message count as unresolvable, as in kube-scheduler
                reasons[failed.get(n) or "node(s) were rejected by the extender without a reason"] += 1
        return [n for n in sent if n in passed]

    async def _prioritize(self, wire_pod: dict[str, Any], passed: list[str]) -> str:
        totals = dict.fromkeys(passed, 0)
        try:
            reply = await self._client.call(
                "prioritize", {"Pod": wire_pod, "Nodes": None, "NodeNames": passed}
            )
        except RuntimeError as exc:
            log.debug("prioritize failed (ignored, as kube-scheduler does): %s", exc)
            reply = []
        if isinstance(reply, list):
            for hp in reply:
                if isinstance(hp, dict) and hp.get("Host") in totals and isinstance(hp.get("Score"), int):
                    totals[hp["Host"]] += hp["Score"] * self._opt.prioritize_weight * 10
        best = max(totals.values())
        return self._rng.choice([n for n in passed if totals[n] == best])

    async def _bind(self, rec: PodRecord, pod: Mapping[str, Any], node: str) -> None:
        body = {
            "PodName": rec.name,
            "PodNamespace": rec.namespace,
            "PodUID": (pod.get("metadata") or {}).get("uid", ""),
            "Node": node,
        }
        error = ""
        try:
            reply = await self._client.call("bind", body)
            error = str(reply.get("Error") or "") if isinstance(reply, dict) else f"bad bind reply {reply!r}"
        except RuntimeError as exc:
            error = str(exc)
        self._drain_events()
        self._touch()
        if not error:
            self._mark_bound(rec, node)
        elif rec.outcome is not PodOutcome.BOUND:
            current = self._cluster.get("", "Pod", rec.namespace, rec.name)
            if current is not None and (current.get("spec") or {}).get("nodeName"):
                # the bind happened but the reply was an error: kube-scheduler does not re-queue it
                self._mark_bound(rec, current["spec"]["nodeName"])
            else:
                assumed = self._assumed.pop(rec.key, None)
                if assumed is not None and assumed[1]:
                    self.nodes[assumed[0]].add(assumed[1], -1)
                self._reject(rec, f"bind failed: {error}")
        self._wake.set()

    def _reject(self, rec: PodRecord, message: str) -> None:
        rec.last_message = message
        if message not in rec.reasons and len(rec.reasons) < MAX_REASONS:
            rec.reasons.append(message)
        self.queue.backoff(rec.key, now=self.clock.now())

    # ---------------------------------------------------------------- checks
    def overcommit(self) -> list[str]:
        """Nodes whose bound pods ask more than they have, recomputed from the cluster itself."""
        used: dict[str, NodeState] = {n: dataclasses.replace(s, used={}) for n, s in self.nodes.items()}
        for pod in self._cluster.list("", "Pod"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node in used:
                try:
                    used[node].add(pod_requests(pod))
                except QuantityError:
                    continue
        return [f"{n}: {', '.join(s.overcommitted())}" for n, s in used.items() if s.overcommitted()]


AppFactory = Callable[[Any], "web.Application"]


def _service_app(cluster: Any, settings: Any, clock: SimClock) -> web.Application:
    from extender.config import default_settings
    from extender.server.app import build_app

    if settings is None:
        # The service reads gang deadlines and backoff from the simulated clock, but its expiry timer
        # sleeps in real time: a short gang wait keeps a failed assembly from stalling the run.
        settings = default_settings(gang_wait_s=3.0)
    return build_app(settings, source=cluster, clock=clock.now)


async def simulate(
    objects: list[dict[str, Any]],
    *,
    settings: Any = None,
    seed: int = 0,
    options: DriverOptions | None = None,
    app_factory: AppFactory | None = None,
    ready_timeout_s: float = 60.0,
    arrivals: tuple[Arrival, ...] = (),
    watch_gang: str = "",
) -> SimulationResult:
    """Expand `objects`, load them into an embedded cluster, serve the extender on loopback and
    schedule every pending pod through it as kube-scheduler would.

    `app_factory(cluster)` replaces the real service (tests use a wire-protocol double).
    """
    from extender.state.embedded import EmbeddedCluster

    options = options or DriverOptions()
    expansion = expand(objects, seed=seed)
    problems = list(expansion.problems)
    cluster = EmbeddedCluster()
    for obj in expansion.objects:
        try:
            cluster.apply(obj)
        except (ValueError, TypeError, KeyError) as exc:
            meta = obj.get("metadata") or {}
            problems.append(f"{obj.get('kind')} {meta.get('name')}: the cluster refused it ({exc}); skipped")
    priorities = {
        str((o.get("metadata") or {}).get("name")): int(o.get("value", 0))
        for o in expansion.objects
        if o.get("kind") == "PriorityClass" and isinstance(o.get("value", 0), int)
    }
    _admit_priorities(cluster, expansion.objects)
    clock = SimClock()
    app = app_factory(cluster) if app_factory else _service_app(cluster, settings, clock)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        connector = aiohttp.TCPConnector(limit=0)  # binds may all be in flight at once
        async with aiohttp.ClientSession(connector=connector) as session:
            client = ExtenderClient(session, f"http://127.0.0.1:{port}", timeout_s=options.http_timeout_s)
            await _wait_ready(session, f"http://127.0.0.1:{port}/readyz", timeout_s=ready_timeout_s)
            driver = Driver(
                cluster=cluster,
                client=client,
                expansion=expansion,
                options=options,
                seed=seed,
                priorities=priorities,
                clock=clock,
                arrivals=arrivals,
                watch_gang=watch_gang,
            )
            driver.start()
            await driver.run()
            await driver.drain()
            gangs = await client.get_json("/debug/gangs")
            queues = await client.get_json("/debug/queues") if driver.queue_usage.queues else None
            sim_s, wall_s = driver.clock.now(), driver.clock.real()
    finally:
        await runner.cleanup()
    return SimulationResult(
        pods=list(driver.records.values()),
        workloads=list(expansion.workloads),
        node_labels={n: dict(s.labels) for n, s in driver.nodes.items()},
        gangs_debug=gangs,
        problems=problems,
        held=expansion.held(),
        overcommit=driver.overcommit(),
        wall_s=wall_s,
        sim_s=sim_s,
        stop_reason=driver.stop_reason,
        requests=dict(client.calls),
        queues_debug=queues,
        queue_peak=driver.queue_usage.peak,
        queue_low_after_eviction=driver.queue_usage.low_after_eviction,
        queue_breaches=driver.queue_usage.breaches,
        pod_queues=dict(driver.queue_usage.queue_of),
        ended=dict(driver.ended),
        watched=list(driver.watched),
    )


def _admit_priorities(cluster: Any, objects: list[dict[str, Any]]) -> None:
    """What the Priority admission plugin does on pod creation: spec.priority (and preemptionPolicy)
    from the pod's PriorityClass, which is what the service reads."""
    classes = {
        str((o.get("metadata") or {}).get("name")): o
        for o in objects
        if o.get("kind") == "PriorityClass" and isinstance(o.get("value", 0), int)
    }
    for pod in cluster.list("", "Pod"):
        spec = pod.get("spec") or {}
        pc = classes.get(str(spec.get("priorityClassName") or ""))
        if pc is None or "priority" in spec:
            continue
        spec["priority"] = int(pc.get("value", 0))
        spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy") or "PreemptLowerPriority")
        cluster.apply(pod)


async def _wait_ready(session: aiohttp.ClientSession, url: str, *, timeout_s: float) -> None:
    """Wait for /readyz (the service warms its kernels first); a service without it is taken as ready."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            async with session.get(url) as resp:
                if resp.status in (200, 404):
                    return
        except aiohttp.ClientError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the extender service did not become ready within {timeout_s:.0f}s ({url})")
        await asyncio.sleep(0.05)
