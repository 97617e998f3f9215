"""Randomized interleavings: kube-scheduler, a flaky API server, node churn and restarts at once.

A seeded driver plays kube-scheduler against the real HTTP service (built as the `make_service`
fixture builds it, over an embedded cluster whose binds can fail or be slow) and interleaves at
random: filters for pending pods, offered the nodes kube-scheduler's own filters pass (schedulable,
room for the pod beside the bound and assumed pods, its cache missing, at times, the pods bound in the
last seconds that no bind call of its own bound: a cache that lags the watch), a subset of them, or
all but the planned node; plain pods answered on their fast path, which some seeds make trust
kube-scheduler's fit everywhere but on held, cordoned and settling nodes (exact_refusals_max=0);
binds launched as concurrent tasks on a passed node (kube-scheduler's binding goroutines); the pods
the service nudged, filtered at the end of the step (a pod's update takes it out of kube-scheduler's
unschedulable queue at once); the fake
clock moving (barrier timeouts, backoffs); nodes gaining a new extended resource, cordoned, deleted
or added, and (a stream of its own) moved to another rack or given or stripped of a picky member's
label while plans stand; a filter for a pod asking for a resource no node has; pending gang members
replaced by a new pod, now or later; API failures, outages and slow binds; restarts over the same
objects. Across features, with a stream of draws of their own: KAI Queues (a parent with a limit over leaves
with quotas, limits and weights; gangs and plain pods in them) whose limits, quotas, weights and
parents are edited; priorities on gangs and plain pods (so gangs preempt, and queues reclaim); the
preempt verb called as kube-scheduler calls it for a pending pod of priority above 0 that fits
nowhere (its candidates' lowest-priority victims offered, the chosen node's victims deleted, the pod
nominated there); a pending or planned gang pod's pod-group-name annotation edited (to another gang,
or to a PodGroup that does not exist), a pending ownerless plain pod annotated into a gang; bound
pods turning Succeeded and later deleted; evicted and preempted pods that run out a grace period
(Terminating, still bound and using their node, deleted at a later step); evictions a disruption
budget refuses for now (429: asked again, or passed over, never counted as asked); a large JobSet beside the
gangs (1000 replicatedJobs with their child Jobs, or one suspended replicatedJob of 1000 replicas)
whose Jobs are relabelled and whose replicatedJobs are scaled; a KAI PodGroup's minMember (or a
subgroup's) lowered in place, or raised while none of its gang runs; one gang, at times, a 1.37
scheduling.k8s.io PodGroup's (its pods name it by spec.schedulingGroup), whose priority differs from
its pods' own and is the one that counts, and the subgroup gang at times a CompositePodGroup tree's (a
root over one child PodGroup per subgroup, ranked at the root's priority), at times with a rack
constraint on each subgroup and none on the gang; and at times the service
follows its kube-scheduler's leader-election Lease, which moves to another replica and back (while it
is away, kube-scheduler calls this sidecar no more); holds one or two gangs deep, and at times a gang
that needs a whole rack among the smaller ones (it holds the rack it fits once drained); size-class
pools on for most seeds, at times with a rack's worth of reserve (a small gang then waits for room
in its own racks, bounded by its hold); for half the seeds plans released at their first member's
bind (`--release-on-first-bind`), at times with one member asking for a host port, which only its
own cycle vouches for. Whatever
the service or kube-scheduler evicts, a controller recreates a while later, once the name is free.

After every step it checks, from the API's objects and the service's public surface only:
- a member asking for a host port is bound only after kube-scheduler called bind for it;
- a pod is bound only to a node its nodeSelector admits (a gang member may select nodes its siblings
  do not: planned beside them, a release would bind it where kube-scheduler never would), judged
  under the node's labels as the binding landed (a relabel later leaves it legitimately there);
- a replica whose kube-scheduler does not hold the Lease writes nothing on its own (no PodGroup,
  status, event, nudge, condition or eviction reaches the API while it follows);
- no node is over-committed (the requests of the pods bound to it fit its allocatable, and the
  store's free capacity of every live node is >= 0), a rack gang's bound members share a rack (so do
  each subgroup's, where the subgroup gang gives each its own rack constraint and itself none: each
  binding lands in the rack its bound siblings share, unless a relabel split them already), and
  an apart gang's (required anti-affinity to each other on the hostname) never share a node;
- no reservation is left behind (each one is a pod in the store, planned in GET /debug/gangs or
  with a bind in flight);
- no gang is partially bound (each subgroup all-or-nothing too), except while its API binds are in
  flight, or after the API refused part of its release (it binds pods one at a time);
- no bind call outlives kube-scheduler's httpTimeout, counted on the service's clock;
- no queue, nor any ancestor, is above its cpu limit: the requests of its bound, unfinished pods
  (the API's objects) and of the unbound pods GET /debug/gangs shows holding a reservation, per the
  queue each pod's PodGroup or label names; a queue whose limit was lowered (or moved under another
  parent) below its use may stay above it, never grow there;
- a pod the service evicts for a preempting gang ranks strictly below that gang's priority (a pod in
  a 1.37 PodGroup at its PodGroup's priority);
- no gang is partly evicted: a gang that lost a member to an eviction or a preemption (the
  service's or kube-scheduler's) has, once the service's effects have run, all its bound members
  gone or its quorum (each subgroup's too) still bound (a Terminating member counts as gone, a
  Terminating pod is nobody's victim, and it uses its node until it is deleted);
- no member is evicted by the service as its gang's disruption once the Job that owns it is being
  deleted in the foreground or is gone: the garbage collector deletes it (a deletion that orphans the
  pods leaves them a gang like any other, judged as one);
- no pod is asked to be evicted twice by the service, whichever features asked (a reclaim's victim is
  not also evicted as its gang's disruption);
- a hold is for a waiting gang (none with a plan), never more of a node than it has, counted toward
  its queue's limit with the rest; the head's hold (or any hold no hold ranked before it shares a
  node with: a size class's head), once every held node has its amount free, starts its gang within
  HOLD_READY_STEPS steps (nobody else takes the room: it does not starve);
- the event loop never stalls: a watchdog task on the loop samples its lag in real time (the
  driver's clock is fake), and a lag over STALL_S while the loop's thread itself was busy (its CPU
  time, so that a machine busy with other work is no stall) fails the step it fell in, except while
  a process starts (its initial list, applied before it is ready, answers no call);
- no verb answers HTTP 500, HTTP 400 to a well-formed call, or an internal error, the cache takes
  every watch event, and a filter that passes no node says why;
- a plain pod's filter passes only nodes where it fits as the API stands, whatever kube-scheduler's
  lagging cache offered.
Then faults and churn stop and the driver schedules every pending pod until two rounds change
nothing: no gang is partially bound, except one the API left short whose domain has no room left
for its missing members (it could not heal); every gang whose quorum fits (around the holds ranked
before it) is bound; every member or pod that fits around the holds is bound; no reservation is
left; every pod left pending was last told why.

Slow API writes land at progress points the driver chooses (deterministic, unlike real sleeps),
never later than the next clock move, so a seed replays the same way.
Replay one seed with its step log: INTERLEAVING_SEED=17 pytest tests/scheduling/test_interleavings.py
(INTERLEAVING_SEEDS=N runs seeds 0..N-1, =A-B seeds A..B-1, INTERLEAVING_STEPS the steps per seed,
INTERLEAVING_LOG_LINES the lines of log shown, INTERLEAVING_LOG_FILE a file the whole step log is
written to, pass or fail, and INTERLEAVING_SKIP=gain-resource,unknown-resource
leaves those kinds of step out: the newer ones are queues (no Queue objects at all), queue-edit,
priorities (every pod at priority 0), native (no 1.37 PodGroup), composite (no CompositePodGroup
tree), preempt, regroup, annex, succeed,
delete-finished, holds (no holds, no whole-rack gang), apart (no gang whose members must be alone),
stall-watch, grace (evictions delete at once), jobsets (no large JobSet), lease (the only replica),
picky (no member with a nodeSelector of its own), relabel (no node relabelled), evict-lag (an
accepted eviction reaches the watch at once, not up to EVICTION_SEEN_S later), owners (no gang
owned by a Job that is deleted) and quorum (no PodGroup's minMember edited in place)).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import datetime
import gc
import logging
import os
import random
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from extender.config import default_settings
from extender.scheduling.lagging import RETRY_TEXT
from extender.server.app import READY, build_app
from extender.sim.cluster import topology
from extender.state.embedded import EmbeddedCluster
from extender.state.source import BindError
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod, rack_cluster
from tests.grouping.workloads import expand
from tests.scheduling.conftest import FakeClock, Service

GANG_WAIT_S = 5.0
BIND_FENCE_S = 5.0  # each process's start-up bind fence (a live source's default)
HTTP_TIMEOUT_S = 10.0
RACK_LABEL = "topology.kubernetes.io/rack"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}
UNKNOWN = "example.com/foo"
QUEUE_LABEL = "kai.scheduler/queue"
APART_LABEL = "apart-of"  # an apart gang's pods carry their gang's name here, and shun each other by it
PICKY_LABEL = "picky.example.com/admits"  # on some nodes: a picky member's nodeSelector asks for it
GROUP_ANNOTATION = "pod-group-name"
NATIVE_API = "scheduling.k8s.io/v1beta1"
PREEMPTED_BY = re.compile(r"preempted by gang (\S+) \(priority (-?\d+)\)")
# a gang held back by fair share for a waiter of a queue below its share: "pod default/NAME" or a gang key
FAIR_SHARE_WAITER = re.compile(r"while (pod )?default/(\S+) of queue \S+, below its fair share, waits")
ROOT_QUEUE = "org"
LEAF_QUEUES = ("default-queue", "team-a", "team-b")
MISSING_GROUP = "no-such-group"  # a pod-group-name that names no PodGroup: the pod waits for it
STALL_S = 0.1
EVICTION_SEEN_S = 2.0
"""How long after the API accepted an eviction its watch event may come (the service's clock): well under
the disruption module's retry of an eviction it does not see (RETRY_S), as a busy API server's watch."""
TERMINAL = ("Succeeded", "Failed")
HOLD_READY_STEPS = 20
"""How many steps the head's hold may stay ready (every held node has its amount free) before its gang
must have started: its members are nudged at once, and no one else may take the room."""
NO_ROOM = "(kube-scheduler's own filters passed no node; the extender was not asked)"

_only = os.environ.get("INTERLEAVING_SEED")
_span = os.environ.get("INTERLEAVING_SEEDS", "40").partition("-")  # "N" or "FROM-TO"
SEEDS = (
    [int(_only)]
    if _only
    else list(range(int(_span[0])) if not _span[1] else range(int(_span[0]), int(_span[2])))
)
STEPS = int(os.environ.get("INTERLEAVING_STEPS", "60"))
SETTLE_ROUNDS = 12
SKIP = set(filter(None, os.environ.get("INTERLEAVING_SKIP", "").split(",")))
REFUSED_GRACE_S = 45.0
"""How long a pod whose eviction a disruption budget refused may run on in a gang evicted in part:
the service asks again every RETRY_S (10 s), at its next tick after that."""


class _ErrorsLogged(logging.Handler):
    """The service's records at ERROR and above (an exception it caught and logged): each fails the
    check after the step it happened in."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        self.records.append(record)


ERRORS_LOGGED = _ErrorsLogged()
logging.getLogger("extender").addHandler(ERRORS_LOGGED)


class Violation(AssertionError):
    pass


async def wait_ready(client: TestClient) -> None:
    """Until /readyz: the kernels warm up in a thread, and a failure reported meanwhile can trip
    CPython 3.11's AST state, shared across threads, inside pytest's traceback formatting."""
    for _ in range(1200):
        if (await client.get("/readyz")).status == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the service never became ready")


# ---------------------------------------------------------------------------- quantities (ours)
def _units(resource: str, value: Any) -> int:
    """The few quantity forms these tests write: millicores for cpu, else base units."""
    s = str(value)
    for suffix, mult in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30)):
        if s.endswith(suffix):
            return int(s[: -len(suffix)]) * mult
    if s.endswith("m"):
        milli = int(s[:-1])
        return milli if resource == "cpu" else -(-milli // 1000)
    return int(float(s) * 1000) if resource == "cpu" else int(s)


def pod_requests(pod: dict) -> dict[str, int]:
    out: dict[str, int] = {"pods": 1}
    for c in pod["spec"].get("containers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            out[k] = out.get(k, 0) + _units(k, v)
    return out


def allocatable(node: dict) -> dict[str, int]:
    return {k: _units(k, v) for k, v in node["status"]["allocatable"].items()}


def finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL


def selects(pod: dict, node: dict | None) -> bool:
    """Whether the pod's nodeSelector admits `node` (a node that is gone: only a pod selecting none) and
    the pod tolerates its NoSchedule taints (no pod here tolerates any)."""
    selector = pod["spec"].get("nodeSelector") or {}
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items()) and not tainted(node)


def tainted(node: dict | None) -> bool:
    return any(t.get("effect") == "NoSchedule" for t in ((node or {}).get("spec") or {}).get("taints") or ())


def leaving(pod: dict) -> bool:
    """Evicted and running out its grace period: still bound and running, on its way out."""
    return bool(pod["metadata"].get("deletionTimestamp"))


def priority(pod: dict) -> int:
    return int(pod["spec"].get("priority") or 0)


# ---------------------------------------------------------------------------- the API server
class ApiBinds:
    """Every bind call the API server is serving, and what each gang's overlapping calls came to.

    Calls for one gang that overlap in time form a window (a release binds its members
    concurrently). A window in which some calls failed and others succeeded leaves the gang short
    until the refused members are placed again: such a gang is excused from the per-step
    partial-gang check (never from the final one). A window where every call failed binds nothing.
    """

    def __init__(self, gang_of: Callable[[str], str | None], log: Callable[[str], None]) -> None:
        self.gang_of = gang_of
        self.log = log
        self.inflight: collections.Counter[str] = collections.Counter()
        self.gang_inflight: collections.Counter[str] = collections.Counter()
        self.windows: dict[str, list[tuple[str, str]]] = {}
        self.excused: dict[str, str] = {}
        self.tick = 0  # the API server's progress, moved on by the driver at chosen points
        self.parked: list[tuple[int, asyncio.Future[None]]] = []
        self.orphan_rng = random.Random(0)  # reseeded per driver
        self.orphans: set[asyncio.Future[None]] = set()  # parked writes of dead processes

    def park(self, ticks: int) -> asyncio.Future[None]:
        """A slow write: it lands `ticks` progress points later (deterministic, unlike real time)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.parked.append((self.tick + ticks, fut))
        return fut

    def orphan_lands(self) -> bool:
        """Whether a dead process's parked binding lands (else the API server never committed it)."""
        return self.orphan_rng.random() < 0.7

    def land(self, futs: set[asyncio.Future[None]]) -> None:
        """These parked writes land now (a dead process's, before the next one's fence ends)."""
        for fut in futs:
            if not fut.done():
                fut.set_result(None)
        self.parked = [(due, fut) for due, fut in self.parked if fut not in futs]

    def progress(self, *, flush: bool = False) -> None:
        self.tick += 1
        keep = []
        for due, fut in self.parked:
            if flush or due <= self.tick:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((due, fut))
        self.parked = keep

    def start(self, name: str) -> None:
        self.inflight[name] += 1
        gang = self.gang_of(name)
        if gang is not None:
            self.gang_inflight[gang] += 1
            self.windows.setdefault(gang, [])

    def finish(self, name: str, error: str) -> None:
        self.inflight[name] -= 1
        if not self.inflight[name]:
            del self.inflight[name]
        self.log(f"      api bind {name}: {error or 'ok'}")
        gang = self.gang_of(name)
        if gang is None:
            return
        self.windows[gang].append((name, error))
        self.gang_inflight[gang] -= 1
        if self.gang_inflight[gang]:
            return
        del self.gang_inflight[gang]
        window = self.windows.pop(gang)
        failed = [n for n, e in window if e]
        if failed and len(failed) < len(window) and gang not in self.excused:
            self.excused[gang] = f"the API refused {failed} while binding {[n for n, e in window if not e]}"
            self.log(f"      excused {gang} until the settle phase: {self.excused[gang]}")


@dataclasses.dataclass
class Faults:
    rng: random.Random
    fail_p: float
    slow_p: float
    enabled: bool = True
    outage_until: int = -1  # the step an API outage ends (every bind fails until then)
    outage: bool = False
    slow_ticks: tuple[int, ...] = (1, 1, 2, 4)  # how many progress points a slow write takes
    fence_s: float = BIND_FENCE_S  # each process's start-up bind fence

    def draw(self) -> tuple[bool, int]:
        """Whether the next bind fails, and after how many of the API server's progress points."""
        if not self.enabled:
            return False, 0
        fail = self.rng.random() < self.fail_p or self.outage
        delay = self.rng.choice(self.slow_ticks) if self.rng.random() < self.slow_p else 0
        return fail, delay


# The service's own writes, which only a replica whose kube-scheduler leads may make (binds are
# kube-scheduler's calls, made through whichever replica it calls).
_OWN_WRITES = (
    "nudge_pod",
    "set_pod_condition",
    "emit_event",
    "patch_group_status",
    "create_object",
    "patch_object",
    "delete_object",
    "evict_pod",
)
LEASE_REF = "kube-system/gang-scheduler"
LEASE_OURS, LEASE_THEIRS = "replica-a_1f0c", "replica-b_7e21"


def lease_object(holder: str) -> dict[str, Any]:
    """kube-scheduler's Lease, renewed now (the service reads it against the wall clock) for an hour."""
    renewed = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gang-scheduler", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, "renewTime": renewed},
    }


class FlakyCluster(EmbeddedCluster):
    """The embedded API server, whose binds fail or take a while as a busy or failing one's do.

    One instance per extender process (each keeps its own objects, fed to its own cache). When the
    process dies (`dead`), a bind it had parked at the API server is the API server's, not the
    process's: it lands in the cluster the next process lists (`successor`), or is lost, at a
    progress point of the driver's choosing, within the next process's bind fence (the API server
    gives a binding up after it; the driver lands every orphan before the clock moves)."""

    def __init__(
        self, objects, *, faults: Faults, api: ApiBinds, bound_at: dict[str, float], clock: FakeClock
    ) -> None:
        super().__init__(objects)
        self.faults = faults
        self.api = api
        self.dead = False  # the process that used it is gone
        self.successor: FlakyCluster | None = None  # the cluster as the next process lists it
        self.bound_at = bound_at  # pod -> when the API wrote its binding (the driver's clock)
        self.clock = clock
        self.parked: set[asyncio.Future[None]] = set()  # this process's writes waiting at the API
        self.bind_fence_s = faults.fence_s
        self.on_evict: Callable[[dict, str, str], None] | None = None  # the driver hears of each eviction
        self.on_evict_request: Callable[[str, str, str], None] = lambda name, uid, why: None  # each one asked
        self.graceful: Callable[[dict], bool] | None = None  # the driver: runs out a grace period?
        self.lagging: Callable[[dict], bool] | None = None  # the driver: is the eviction seen later?
        self.refusing: Callable[[dict], bool] | None = None  # the driver: does a budget refuse it now?
        self.nudged: set[str] = set()  # pods the service nudged: kube-scheduler requeues them at once
        self.on_write: Callable[[str], None] = lambda what: None  # the driver hears of each own write
        for method in _OWN_WRITES:
            setattr(self, method, self._heard(method, getattr(self, method)))

    def _heard(self, method: str, write: Callable[..., Any]) -> Callable[..., Any]:
        async def heard(**call: Any) -> Any:
            if self.dead:
                return None  # a killed process's coroutines never run on: only its parked binds land
            self.on_write(f"{method} {call.get('namespace', '')}/{call.get('name', '')}")
            return await write(**call)

        return heard

    async def nudge_pod(self, *, namespace: str, name: str, value: str) -> None:
        self.nudged.add(name)
        await super().nudge_pod(namespace=namespace, name=name, value=value)

    async def evict_pod(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        pod = self.get("", "Pod", namespace, name)
        if (
            pod is not None
            and not self.dead
            and self.refusing is not None
            and (not uid or pod["metadata"].get("uid") == uid)
            and self.refusing(pod)
        ):
            return False  # 429: the API evicted nothing, so it is no ask the pod went by
        self.on_evict_request(name, uid, reason)
        if (
            pod is not None
            and not self.dead
            and self.on_evict
            and (not uid or pod["metadata"].get("uid") == uid)
        ):
            self.on_evict(copy.deepcopy(pod), "the service", reason)
            if not leaving(pod) and self.lagging is not None and self.lagging(pod):
                return True  # accepted; the watch shows it a moment later (the driver's advance)
            if not leaving(pod) and self.graceful is not None and self.graceful(pod):
                return True  # Terminating: the kubelet deletes it when its grace period ends
        return await super().evict_pod(namespace=namespace, name=name, uid=uid, reason=reason)

    def live(self) -> FlakyCluster | None:
        """The cluster of the process alive now, which a write of this (dead) one lands in."""
        c = self.successor
        while c is not None and c.dead:
            c = c.successor
        return c

    async def bind_pod(
        self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0
    ) -> None:
        # The API server's side of the call: the caller's process dying (its tasks cancelled) does
        # not stop a write that has reached the API server
        served = asyncio.ensure_future(self._serve_bind(namespace, name, uid, node))
        # its outcome is the caller's, while there is one; an orphan's is only logged (api.finish)
        served.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(served)

    async def _serve_bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.api.start(name)
        error, wrote = "cancelled", False
        try:
            fail, delay = self.faults.draw()
            await asyncio.sleep(0)  # a release's concurrent binds overlap, as over a network
            if delay:
                fut = self.api.park(delay)
                self.parked.add(fut)
                try:
                    await fut
                finally:
                    self.parked.discard(fut)
            if self.dead:
                live = self.live()
                if live is None or not self.api.orphan_lands():
                    raise BindError("connection reset: the extender process is gone")
                self.api.log(f"      a dead process's binding lands: {name} -> {node}")
                self.bound_at[name] = self.clock.now
                await EmbeddedCluster.bind_pod(live, namespace=namespace, name=name, uid=uid, node=node)
                error = ""
                return
            if fail:
                raise BindError("injected: the API server refused the binding (etcd unavailable)")
            wrote = True
            self.bound_at[name] = self.clock.now
            await super().bind_pod(namespace=namespace, name=name, uid=uid, node=node)
            error = ""
        except BaseException as exc:
            error = str(exc) if isinstance(exc, BindError) else f"{exc!r} raised by the store"
            raise
        finally:
            # what counts is whether the write landed: the store fed by it may raise after it did
            pod = self.get("", "Pod", namespace, name) if wrote and error else None
            if pod is not None and pod["metadata"].get("uid") == uid and pod["spec"].get("nodeName") == node:
                error = ""
            self.api.finish(name, error)


# ---------------------------------------------------------------------------- workloads
@dataclasses.dataclass
class Gang:
    name: str
    cpu: str
    size: int
    min_member: int | None = None
    rack: bool = False
    subgroups: dict[str, int] | None = None  # name -> minMember
    sub_sizes: dict[str, int] | None = None
    min_subgroup: int | None = None
    queue: str = "default-queue"
    priority: int = 0
    native: bool = False  # a scheduling.k8s.io/v1beta1 PodGroup (1.37): its priority is its members'
    tree: bool = False  # a 1.37 CompositePodGroup (its name) over one PodGroup per subgroup (theirs)
    pod_priority: int = 0  # a native gang's pods' own priority, which its PodGroup's overrides
    apart: bool = False  # its members must be alone on their nodes (required anti-affinity to each other)
    sub_rack: bool = False  # each subgroup in one rack of its own choosing, the gang itself unconstrained
    owner: dict | None = None  # the ownerReference of the Job its pods are made by, if one makes them

    def objects(self) -> list[dict]:
        """Its group objects: one PodGroup, or a CompositePodGroup and its children."""
        if not self.tree:
            return [self.podgroup()]
        assert self.subgroups is not None
        count = self.min_subgroup or len(self.subgroups)
        ref = {"workloadName": self.name, "templateName": self.name}
        root = {
            "apiVersion": "scheduling.k8s.io/v1alpha3",
            "kind": "CompositePodGroup",
            "metadata": {"name": self.name, "namespace": "default", "uid": f"{self.name}-cpg-uid"},
            "spec": {
                "workloadRef": ref,
                "schedulingPolicy": {"gang": {"minGroupCount": count}},
                "priority": self.priority,
            },
        }
        children = [
            {
                "apiVersion": NATIVE_API,
                "kind": "PodGroup",
                "metadata": {"name": sub, "namespace": "default", "uid": f"{self.name}-{sub}-pg-uid"},
                "spec": {
                    "parentCompositePodGroupName": self.name,
                    "workloadRef": {"workloadName": self.name, "templateName": sub},
                    "schedulingPolicy": {"gang": {"minCount": need}},
                },
            }
            for sub, need in self.subgroups.items()
        ]
        if self.sub_rack:
            for child in children:
                child["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK_LABEL}]}
        return [root, *children]

    def podgroup(self) -> dict:
        if self.native:
            spec: dict[str, Any] = {
                "schedulingPolicy": {"gang": {"minCount": self.min_member or self.size}},
                "priority": self.priority,
            }
            if self.rack:
                spec["schedulingConstraints"] = {"topology": [{"key": RACK_LABEL}]}
            meta = {"name": self.name, "namespace": "default", "uid": f"{self.name}-pg-uid"}
            return {"apiVersion": NATIVE_API, "kind": "PodGroup", "metadata": meta, "spec": spec}
        subs = [{"name": s, "minMember": m} for s, m in (self.subgroups or {}).items()]
        if self.sub_rack:
            for sub in subs:
                sub["topologyConstraint"] = RACK
        pg = make_kai_podgroup(
            self.name,
            min_member=self.min_member,
            subgroups=subs or None,
            topology=RACK if self.rack else None,
            queue=self.queue,
        )
        if self.min_subgroup is not None:
            pg["spec"]["minSubGroup"] = self.min_subgroup
        return pg

    def slots(self) -> list[tuple[str, str | None]]:
        """(pod name, subgroup) of its initial pods."""
        if not self.subgroups:
            return [(f"{self.name}-{i}", None) for i in range(self.size)]
        assert self.sub_sizes is not None
        return [(f"{self.name}-{s}{i}", s) for s, n in self.sub_sizes.items() for i in range(n)]

    def pod(self, name: str, subgroup: str | None, uid: str | None = None) -> dict:
        if self.native or self.tree:
            pod = make_pod(name, cpu=self.cpu, labels={QUEUE_LABEL: self.queue}, uid=uid)
            pod["spec"]["schedulingGroup"] = {"podGroupName": subgroup if self.tree else self.name}
            if self.pod_priority:
                pod["spec"]["priority"] = self.pod_priority
        else:
            labels = {SUBGROUP_LABEL: subgroup} if subgroup else None
            pod = gang_pod(name, self.name, cpu=self.cpu, labels=labels, uid=uid)
            if self.priority:
                pod["spec"]["priority"] = self.priority
        if self.owner is not None:
            pod["metadata"]["ownerReferences"] = [dict(self.owner)]
        if self.apart:
            pod["metadata"]["labels"][APART_LABEL] = self.name
            term = {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {APART_LABEL: self.name}},
            }
            pod["spec"]["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        return pod

    def nativize(self, rng: random.Random, *, tree: bool = False) -> None:
        """Make this gang a 1.37 PodGroup's (or, `tree`, a CompositePodGroup tree's, one child PodGroup
        per subgroup), its pods' own priority set apart from the group's."""
        self.native, self.tree = not tree, tree
        self.pod_priority = rng.choice((0, 2000)) if self.priority else rng.choice((1000, 2000))


def kai_queue(name: str, parent: str | None, *, quota: int, limit: int, weight: int = 1) -> dict:
    """A Queue with a cpu quota and limit in millicores (KAI's unit), memory and gpu left unbounded."""
    spec: dict[str, Any] = {"resources": {"cpu": {"quota": quota, "limit": limit, "overQuotaWeight": weight}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def queue_limit(obj: dict) -> int | None:
    """A Queue's cpu limit in millicores, as KAI reads it (-1: none; 0 or unset: the quota)."""
    cpu = ((obj.get("spec") or {}).get("resources") or {}).get("cpu")
    if cpu is None:
        return None
    quota, limit = int(cpu.get("quota", 0)), int(cpu.get("limit", 0))
    if limit == -1 or (limit == 0 and quota == -1):
        return None
    return quota if limit == 0 else limit


def add_features(rng: random.Random, objects: list[dict], gangs: list[Gang], plain: list[str]) -> list[dict]:
    """Queues and priorities over make_world's workloads, from a stream of draws of their own (so
    each seed's other draws stay as they were); the Queue objects, which the caller adds."""
    queues: list[dict] = []
    if "queues" not in SKIP and rng.random() < 0.6:
        queues.append(kai_queue(ROOT_QUEUE, None, quota=-1, limit=rng.choice((24_000, 32_000, 40_000, -1))))
        for name in LEAF_QUEUES:
            quota = rng.choice((0, 4_000, 8_000))
            limit = rng.choice((quota + 8_000, quota + 16_000, -1))
            queues.append(kai_queue(name, ROOT_QUEUE, quota=quota, limit=limit, weight=rng.choice((1, 2, 3))))
        for g in gangs:
            g.queue = rng.choice(LEAF_QUEUES)
    if "priorities" not in SKIP:
        for g in gangs:
            g.priority = rng.choice((0, 0, 100, 1000))
        if rng.random() < 0.6:
            # low-priority fillers, half the cluster's cpu: the gangs above them preempt (and queues
            # reclaim) to get room
            nodes = sum(1 for o in objects if o["kind"] == "Node")
            for i in range(nodes):
                objects.append(make_pod(f"filler-{i}", cpu="4"))
                plain.append(f"filler-{i}")
    by_name = {g.name: g for g in gangs}
    native = by_name.get("wide")
    if native is not None and "native" not in SKIP and rng.random() < 0.5:
        native.nativize(rng)
        objects[:] = [
            native.podgroup() if o["kind"] == "PodGroup" and o["metadata"]["name"] == "wide" else o
            for o in objects
        ]
        for i, obj in enumerate(objects):
            if (
                obj["kind"] == "Pod"
                and (obj["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION) == "wide"
            ):
                objects[i] = native.pod(obj["metadata"]["name"], None)
    composite = by_name.get("subs")
    if composite is not None and "composite" not in SKIP and rng.random() < 0.4:
        composite.nativize(rng, tree=True)
        objects[:] = [
            o for o in objects if not (o["kind"] == "PodGroup" and o["metadata"]["name"] == "subs")
        ] + composite.objects()
        for i, obj in enumerate(objects):
            if (
                obj["kind"] == "Pod"
                and (obj["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION) == "subs"
            ):
                sub = (obj["metadata"].get("labels") or {}).get(SUBGROUP_LABEL)
                objects[i] = composite.pod(obj["metadata"]["name"], sub)
    wide = by_name.get("wide")
    if wide is not None and "apart" not in SKIP and rng.random() < 0.4:
        wide.apart = True  # one member per node: it holds a node for each when it fits nowhere
        wide_pods = {f"wide-{i}" for i in range(wide.size)}
        objects[:] = [
            wide.pod(o["metadata"]["name"], None)
            if o["kind"] == "Pod" and o["metadata"]["name"] in wide_pods
            else o
            for o in objects
        ]
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["apiVersion"].startswith("scheduling.k8s.io/"):
            continue
        if obj["kind"] == "PodGroup":
            obj["spec"]["queue"] = by_name[name].queue
        elif obj["kind"] == "Pod":
            gang = by_name.get((obj["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION, ""))
            if obj["spec"].get("schedulingGroup"):
                continue  # made by Gang.pod for a 1.37 group: its queue label and its own priority are set
            if gang is not None and gang.priority:
                obj["spec"]["priority"] = gang.priority
            elif gang is None and name in plain:
                if queues and rng.random() < 0.7:
                    obj["metadata"]["labels"][QUEUE_LABEL] = rng.choice(LEAF_QUEUES)
                if "priorities" not in SKIP and rng.random() < 0.3:
                    obj["spec"]["priority"] = 500
    return queues


LARGE_REPLICAS = 1000


def large_jobset(rng: random.Random) -> list[dict]:
    """An ordinary large training job beside the gangs, no pod of it created yet: a JobSet of 1000
    replicatedJobs with their child Jobs (as its controller makes them), or one replicatedJob of
    1000 replicas, suspended. It must cost no verb work in proportion to its size."""
    template = {"spec": {"schedulerName": "gang-scheduler", "containers": [{"name": "m"}]}}
    suspended = rng.random() < 0.5
    rjs = [("workers", LARGE_REPLICAS)] if suspended else [(f"rj{i}", 1) for i in range(LARGE_REPLICAS)]
    big = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": "default", "uid": "big-uid"},
        "spec": {
            "suspend": suspended,
            "replicatedJobs": [
                {"name": rj, "replicas": n, "template": {"spec": {"parallelism": 1, "template": template}}}
                for rj, n in rjs
            ],
        },
    }
    if suspended:
        return [big]
    jobs, _pods = expand(big)  # the pods are not created yet
    return [big, *jobs]


def make_world(rng: random.Random) -> tuple[list[dict], list[Gang], list[str]]:
    racks = rng.choice((2, 3))
    objects = [*rack_cluster(racks=racks, nodes_per_rack=3, cpu="8"), topology("dc")]
    gangs = [
        Gang("rackgang", cpu=rng.choice(("2", "3", "4")), size=4, min_member=4, rack=True),
        Gang("elastic", cpu="2", size=rng.choice((4, 5)), min_member=3, rack=rng.random() < 0.5),
        Gang(
            "subs",
            cpu=rng.choice(("1", "2")),
            size=5,
            subgroups={"a": 2, "b": 2},
            sub_sizes={"a": 2, "b": 3},
            min_subgroup=1,
            # a subgroup's own topology under an unconstrained gang, drawn beside the world's stream
            # (not from it): every other draw of a seed stays what it was before this was added
            sub_rack=random.Random(str(rng.getstate()[1][:8])).random() < 0.5,
        ),
    ]
    if rng.random() < 0.5:
        gangs.append(Gang("wide", cpu="4", size=3, min_member=3, rack=rng.random() < 0.3))
    plain = [f"plain-{i}" for i in range(rng.choice((2, 3)))]
    for g in gangs:
        objects += g.objects()
        objects += [g.pod(name, sub) for name, sub in g.slots()]
    objects += [make_pod(p, cpu=str(rng.choice((1, 2, 3)))) for p in plain]
    foo = make_pod("wants-foo", cpu="1")
    foo["spec"]["containers"][0]["resources"]["requests"][UNKNOWN] = "1"
    objects.append(foo)
    return objects, gangs, [*plain, "wants-foo"]


# ---------------------------------------------------------------------------- the driver
@dataclasses.dataclass
class BindCall:
    pod: str
    node: str
    started: float  # on the service's clock
    task: asyncio.Task


class Driver:
    """kube-scheduler, seen from the extender: filter a pod, then bind it on a passed node."""

    def __init__(
        self,
        seed: int,
        clients: list[TestClient],
        *,
        kills: bool = False,
        fence_s: float = BIND_FENCE_S,
        features: bool = True,
    ) -> None:
        ERRORS_LOGGED.records.clear()  # a run before this one's are its own
        self.seed = seed
        self.rng = random.Random(seed)
        self.clients = clients
        self.kills = kills  # restarts often, with slow binds at the API: many of them left in flight
        self.lines: list[str] = []
        self.step = 0
        objects, self.gangs, self.plain = make_world(self.rng)
        self.pod_gang: dict[str, str] = {}
        self.pod_sub: dict[str, str | None] = {}
        self.base: dict[str, str] = {}  # a replacement's first name
        self.deferred: list[dict] = []  # replacements their controller has not created yet
        for g in self.gangs:
            for name, sub in g.slots():
                self.pod_gang[name], self.pod_sub[name], self.base[name] = g.name, sub, name
        self.faults = Faults(
            random.Random(seed * 7919 + 1),
            fail_p=self.rng.choice((0.0, 0.1, 0.25)),
            slow_p=self.rng.choice((0.0, 0.3, 0.6)),
        )
        self.faults.fence_s = fence_s
        if kills:
            self.faults.slow_p = 0.8
        self.api = ApiBinds(self.pod_gang.get, self.log)
        self.api.orphan_rng.seed(seed * 31337 + 5)
        self.clock = FakeClock()
        self.clock.moved_by_hand = True  # the service's ticker runs when a step kicks it, never on real time
        self.objects = objects
        self.svc: Service
        self.binds: list[BindCall] = []
        self.last_filter: dict[str, str] = {}  # pod -> what its last filter answered
        self.last_bind: dict[str, str] = {}
        self.debug: list[dict] = []
        self.counter = 0
        # its own stream, so that the seeds' other draws stay as they were
        self.lag_rng = random.Random(seed * 104729 + 3)
        self.trust_fit = self.lag_rng.random() < 0.5  # plain pods: refusals outside held/settling rows
        self.bound_at: dict[str, float] = {}
        self.decided: collections.Counter[str] = collections.Counter()  # bind calls the service took
        # (pod, uid) its bind call bound: kube-scheduler assumed it there and keeps it in its cache
        # until its watch confirms it, so no lag hides it (a pod the service bound once the call was
        # answered, or a dead process's landing, it learns of from the watch alone)
        self.assumed: set[tuple[str, str]] = set()
        self.lag_s = 0.0  # how far behind the watch kube-scheduler's cache is, this schedule step
        for i in range(self.lag_rng.choice((0, 2, 4))):  # more plain pods among the gangs' releases
            self.objects.append(make_pod(f"small-{i}", cpu="1"))
            self.plain.append(f"small-{i}")
        # queues, priorities and the moves across features draw from a stream of their own
        self.feat = random.Random(seed * 15485863 + 7)
        if features:
            self.objects += add_features(self.feat, self.objects, self.gangs, self.plain)
        self.loose: set[str] = set()  # gang pods whose pod-group-name names no PodGroup
        self.gone_done: dict[str, str] = {}  # finished gang pods since deleted -> their gang
        # finished gang pods a record outlives (a KAI PodGroup's status.succeeded): what the service,
        # rebuilt from the API server, can still count toward its gang's quorum once they are deleted
        self.done_recorded: set[str] = set()
        self.evicted: list[tuple[str, str | None, str]] = []  # (pod, its gang, by whom) since the last check
        self.binding_when_hit: set[str] = set()  # gangs with a binding on its way as a member was evicted
        self.filtered_at: dict[str, int] = {}  # pod -> the step kube-scheduler last filtered it
        # gangs that lost a member while some of their binds were in flight: judged once those landed
        self.hit_in_flight: dict[str, list[tuple[str, str | None, str]]] = {}
        self.evictions_seen = 0  # every eviction of the run: settling waits for a round without one
        self.evict_asked: dict[str, list[str]] = {}  # pod uid -> why the service asked to evict it, each time
        self.evicted_twice: list[str] = []  # see note_evict_request
        self.broken_reclaims: list[str] = []  # see check_reclaim
        self.reclaims = 0  # victims of reclaims judged, for the sweep's report
        self.over_limit: dict[str, int] = {}  # queue -> the use it was left at above a lowered limit
        self.stalls: list[str] = []
        self.starting = False  # a process is being started (its initial list): see watchdog
        self.was_whole: dict[str, bool] = {}  # gang -> bound whole at the last check
        # grace periods and large JobSets draw from a stream of their own, too
        self.grace_rng = random.Random(seed * 982451653 + 11)
        self.grace_p = 0.0 if "grace" in SKIP else self.grace_rng.choice((0.0, 0.5, 1.0))
        self.terminating: dict[str, str] = {}  # evicted pod -> its uid, while its grace period runs
        # an eviction the API accepted that the watch shows up to EVICTION_SEEN_S later (its own stream):
        # meanwhile the service's cache still has the pod running, as a busy API server's watch does
        self.evict_lag_p = 0.0 if "evict-lag" in SKIP else self.grace_rng.choice((0.0, 0.5))
        self.unseen_evictions: list[tuple[str, str]] = []  # (pod, uid), accepted, not yet in the watch
        if "jobsets" not in SKIP and self.grace_rng.random() < 0.4:
            self.objects += large_jobset(self.grace_rng)
        # leader-aware writes, a stream of their own: at times the service follows its kube-scheduler's
        # Lease, which moves to another replica and back (its kube-scheduler then calls it no more)
        self.lease_rng = random.Random(seed * 15485863 + 5)
        self.leased = "lease" not in SKIP and self.lease_rng.random() < 0.35
        # holds (their own stream): the head only, or two gangs deep; and at times a gang that needs a
        # whole rack, which a stream of smaller gangs would starve without its hold
        self.hold_rng = random.Random(seed * 7368787 + 13)
        self.hold_depth = self.hold_rng.choice((1, 1, 2))
        self.hold_ready_since: dict[str, int] = {}  # holder -> the step its hold was first seen ready
        # size-class pools (their own stream): on for most seeds (the service's default), at times
        # with a reserve that keeps small gangs waiting for room in their own racks
        self.pool_rng = random.Random(seed * 2654435761 + 17)
        self.pools = features and "pools" not in SKIP and self.pool_rng.random() < 0.75
        self.pool_reserve = self.pool_rng.choice((0.0, 0.0, 1.0))
        # plans released at their first member's bind (their own stream): the members kube-scheduler
        # has not cycled yet are bound by the release, and come to filter and bind already bound or
        # in flight, if at all. At times one member asks for a host port: only its own cycle vouches
        # for it, so the release waits for it to reach bind
        self.early_rng = random.Random(seed * 1000003 + 19)
        self.release_early = features and "early" not in SKIP and self.early_rng.random() < 0.5
        self.own_cycle: set[str] = set()
        if self.release_early and self.early_rng.random() < 0.5:
            picked = self.early_rng.choice([n for n, g in self.pod_gang.items() if g != "wide"])
            for obj in self.objects:
                if obj.get("kind") == "Pod" and obj["metadata"]["name"] == picked:
                    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
                    self.own_cycle.add(picked)
        self.bind_called: set[str] = set()  # pods kube-scheduler called bind for, ever
        # a gang member with a nodeSelector of its own (its own stream), admitted by some nodes only:
        # kube-scheduler offers it those alone, and nothing may bind it elsewhere
        self.picky_rng = random.Random(seed * 1000003 + 29)
        # an operator relabelling nodes (its own stream): bindings are judged where they landed
        self.relabel_rng = random.Random(seed * 1000003 + 31)
        self.judged: set[tuple[str, str]] = set()  # (pod, uid) of the bindings judged
        self.unjudged: set[tuple[str, str]] = set()  # (pod, uid) bindings written across a relabel
        self.relabels = features and "relabel" not in SKIP and self.relabel_rng.random() < 0.5
        # an operator editing a KAI PodGroup's quorum in place (its own stream): lowered at any time,
        # raised only while none of the gang runs or is being bound (a quorum raised over a running
        # gang asks nothing of the scheduler: it is judged by the quorum it was bound under)
        self.quorum_rng = random.Random(seed * 1000003 + 41)
        self.quorum_edits = features and "quorum" not in SKIP and self.quorum_rng.random() < 0.4
        # a kubelet lowering a node's allocatable (more reserved, a device gone unhealthy) and raising
        # it again, or re-registering its Node under the same name (its own stream): never below what
        # is bound there or decided to bind there, so an over-commit is the service's
        self.node_rng = random.Random(seed * 1000003 + 43)
        self.node_edits = features and "node-edit" not in SKIP and self.node_rng.random() < 0.4
        # a PodDisruptionBudget refusing an eviction for now (429; its own stream): the service asks
        # again (a preemption's victim, a disrupted gang's member) or passes over it
        self.refuse_rng = random.Random(seed * 2750159 + 7)
        self.refuse_p = 0.0 if not features or "budget" in SKIP else self.refuse_rng.choice((0.0, 0.3))
        self.refused_at: dict[str, tuple[str, float]] = {}  # pod -> (uid, when) its last eviction was refused
        self.shrunk: dict[str, dict] = {}  # node -> its allocatable before it was lowered
        self.picky: set[str] = set()
        if features and "picky" not in SKIP and self.picky_rng.random() < 0.4:
            node_objs = [o for o in self.objects if o.get("kind") == "Node"]
            for node_obj in self.picky_rng.sample(node_objs, max(1, len(node_objs) // 2)):
                node_obj["metadata"].setdefault("labels", {})[PICKY_LABEL] = "yes"
            picked = self.picky_rng.choice(sorted(self.pod_gang))
            for obj in self.objects:
                if obj.get("kind") == "Pod" and obj["metadata"]["name"] == picked:
                    obj["spec"]["nodeSelector"] = {PICKY_LABEL: "yes"}
                    self.picky.add(picked)
        if features and "holds" not in SKIP and self.hold_rng.random() < 0.5:
            whole = Gang("whole", cpu="8", size=3, min_member=3, rack=True)
            whole.priority = self.hold_rng.choice((0, 0, 100)) if "priorities" not in SKIP else 0
            self.gangs.append(whole)
            for name, sub in whole.slots():
                self.pod_gang[name], self.pod_sub[name], self.base[name] = whole.name, sub, name
            self.objects += whole.objects()
            for name, sub in whole.slots():
                pod = whole.pod(name, sub)
                if whole.priority:
                    pod["spec"]["priority"] = whole.priority
                self.objects.append(pod)
        self.following = False
        self.follower_writes: list[str] = []
        if self.leased:
            self.objects.append(lease_object(LEASE_OURS))
        # a gang whose pods a Job owns (its own stream), and the Job deleted at some step: in the
        # foreground, in the background, or orphaning them; the garbage collector then deletes the
        # pods (or strips their owner) over the steps that follow
        self.owner_rng = random.Random(seed * 1000003 + 37)
        self.owned: Gang | None = None
        self.owner_uid = ""
        self.owner_fate: str | None = None  # "foreground", "background", "orphan" once deleted
        self.owner_done = False  # its pods collected (or orphaned) and the Job gone
        self.owner_evictions: list[str] = []  # see note_evict_request
        if features and "owners" not in SKIP and self.owner_rng.random() < 0.4:
            kai_gangs = [g for g in self.gangs if not (g.native or g.tree)]
            if kai_gangs:
                self.own(self.owner_rng.choice(kai_gangs))

    # ------------------------------------------------------------------ service
    async def start(self, cluster: FlakyCluster) -> None:
        self.starting = True
        try:
            await self._start(cluster)
        finally:
            self.starting = False

    async def _start(self, cluster: FlakyCluster) -> None:
        leader = (
            {"cluster_leader_lease": LEASE_REF, "cluster_leader_identity": "replica-a"} if self.leased else {}
        )
        settings = default_settings(
            gang_wait_s=GANG_WAIT_S,
            cluster_http_timeout_s=HTTP_TIMEOUT_S,
            gang_holds="holds" not in SKIP,
            gang_hold_depth=self.hold_depth,
            gang_pools=self.pools,
            gang_pool_reserve=self.pool_reserve,
            gang_release_on_first_bind=self.release_early,
            **leader,
        )
        app = build_app(settings, source=cluster, clock=self.clock)
        self.fence_until = self.clock.now + cluster.bind_fence_s  # no bind of this process before it
        cluster.on_write = self.note_write
        client = TestClient(TestServer(app))
        await client.start_server()
        self.clients.append(client)
        await wait_ready(client)
        # what the new process listed is out of the collector's passes, as a live source's heap is
        # once its initial list is applied (extender.state.heap.settle, without its collection's
        # pause): a large JobSet's thousand Jobs, listed again at each restart, are no step's stall
        gc.freeze()
        self.svc = Service(client, cluster, self.clock)
        cluster.on_evict = self.note_eviction
        cluster.on_evict_request = self.note_evict_request
        cluster.graceful = self.graceful
        cluster.lagging = self.lagging
        cluster.refusing = self.refusing
        if self.trust_fit:
            self.svc.scheduler.filtering.exact_refusals_max = 0
        decide = self.svc.scheduler.bind

        def bind(**call: str) -> Any:
            self.decided[call["name"]] += 1
            return decide(**call)

        self.svc.scheduler.bind = bind  # type: ignore[method-assign]

    async def reach_service(self, name: str, seen: int) -> None:
        """Until the service has decided on the bind call just launched for `name` (at most 2 s of
        real time): kube-scheduler's bind goroutine starts before its next cycle has run its own
        filters, so the call is the service's to know before the next filter's."""
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.0
        while self.decided[name] == seen and loop.time() < until:
            await asyncio.sleep(0)

    def note_evict_request(self, name: str, uid: str, reason: str) -> None:
        """Every eviction the service asks for (each lands: evictions are not faulted here), so a pod is
        asked to go once, whichever of its features asked: a reclaim and a whole-gang disruption, say."""
        if not uid:
            return
        pod = self.pods().get(name)
        if (
            pod is not None
            and self.collecting()
            and self.owned_by_job(pod)
            and not PREEMPTED_BY.search(reason)
            and "reclaimed for gang" not in reason
        ):
            self.owner_evictions.append(
                f"{name} evicted ({reason}) though its Job is deleted ({self.owner_fate}): the garbage "
                "collector deletes it"
            )
        asked = self.evict_asked.setdefault(uid, [])
        asked.append(reason)
        if len(asked) > 1:  # raised at the next check: this runs inside the service's eviction
            self.evicted_twice.append(f"{name} (uid {uid}) asked to be evicted {len(asked)} times: {asked}")

    def note_eviction(self, pod: dict, by: str, reason: str = "") -> None:
        """An evicted pod: remembered for the partial-eviction check, and recreated by its controller
        a while later (a new pod of the same name, pending). A reclaim's victim is judged as it goes
        (`check_reclaim`)."""
        name = pod["metadata"]["name"]
        if "reclaimed for gang" in reason:
            self.reclaims += 1
            self.check_reclaim(pod, reason)
        preempted = PREEMPTED_BY.search(reason)
        if preempted and self.rank(pod) >= int(preempted[2]):
            self.fail(
                f"{name} (ranking at priority {self.rank(pod)}) evicted for gang {preempted[1]} "
                f"of priority {preempted[2]}: a victim must rank strictly lower"
            )
        self.evicted.append((name, self.pod_gang.get(name), by))
        if self.pod_gang.get(name) in self.binding_gangs():
            self.binding_when_hit.add(self.pod_gang[name])
        self.evictions_seen += 1
        self.lines.append(f"      {by} evicts {name}")
        again = copy.deepcopy(pod)
        self.counter += 1
        again["metadata"]["uid"] = f"{name}-uid-e{self.counter}"
        again["metadata"].pop("resourceVersion", None)
        again["spec"].pop("nodeName", None)
        again["status"] = {"phase": "Pending"}
        if self.made_again(again):
            self.deferred.append(again)

    def rank(self, pod: dict) -> int:
        """The priority a pod ranks at in preemption: its 1.37 PodGroup's when it is in one (named by
        spec.schedulingGroup, and no pod-group-name annotation, which comes first), else its own."""
        named = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        if named and GROUP_ANNOTATION not in (pod["metadata"].get("annotations") or {}):
            group = self.cluster.get("scheduling.k8s.io", "PodGroup", "default", named)
            parent = (group or {}).get("spec", {}).get("parentCompositePodGroupName")
            if parent:  # a tree ranks at its root's priority
                group = self.cluster.get("scheduling.k8s.io", "CompositePodGroup", "default", parent)
            if group is not None:
                return int(group["spec"].get("priority") or 0)
        return priority(pod)

    async def watchdog(self) -> None:
        """Samples the loop's lag in real time: a lag over STALL_S while the loop's own thread was
        busy (its CPU time; a machine busy elsewhere delays the loop without stalling it) is a stall.
        A thread beside it notes where the loop's thread is while a sample is late, and the cyclic
        collector's time is counted, so that a stall says what stalled."""
        loop = asyncio.get_running_loop()
        period = 0.01
        beat = [time.monotonic()]
        seen: list[str] = []  # where the loop's thread was, while the current sample is late
        collecting = [0.0, 0.0]  # the cyclic collector's time so far, and when its pass began
        loop_thread, done = threading.get_ident(), threading.Event()

        def timed(phase: str, info: dict) -> None:
            if threading.get_ident() != loop_thread:
                return
            if phase == "start":
                collecting[1] = time.perf_counter()
            else:
                collecting[0] += time.perf_counter() - collecting[1]

        def look() -> None:
            while not done.wait(0.03):
                if time.monotonic() - beat[0] > 0.06:
                    frame = sys._current_frames().get(loop_thread)
                    stack = traceback.extract_stack(frame) if frame is not None else []
                    ours = [f for f in stack if "/extender/" in f.filename or "/tests/" in f.filename]
                    where = ours[-1] if ours else (stack[-1] if stack else None)
                    if where is not None:
                        seen.append(f"{where.filename.rsplit('/', 2)[-2:]}:{where.lineno} {where.name}")

        gc.callbacks.append(timed)
        looker = threading.Thread(target=look, daemon=True)
        looker.start()
        try:
            while True:
                began, cpu, gc_s = loop.time(), time.thread_time(), collecting[0]
                starting = self.starting
                seen.clear()
                beat[0] = time.monotonic()
                await asyncio.sleep(period)
                lag, busy = loop.time() - began - period, time.thread_time() - cpu
                if starting or self.starting:
                    continue  # a process applying its initial list answers no call until it is ready
                if lag > STALL_S and busy > STALL_S:
                    where = collections.Counter(seen).most_common(2)
                    self.stalls.append(
                        f"{lag * 1000:.0f} ms ({busy * 1000:.0f} ms of it busy, "
                        f"{(collecting[0] - gc_s) * 1000:.0f} ms in the cyclic collector; at {where}) "
                        f"in step {self.step}"
                    )
        finally:
            done.set()
            gc.callbacks.remove(timed)

    async def drain(self) -> None:
        """Until the service's effects (evictions, nudges, status writes) have run, within bounds."""
        tasks = self.svc.app[READY].get("tasks") or set()
        for _ in range(200):
            if not any(not t.done() for t in tasks):
                return
            await asyncio.sleep(0)

    def log(self, line: str) -> None:
        self.lines.append(f"{self.step:03d} t=+{self.clock.now - 1000:.1f}s {line}")

    def replay_env(self) -> str:
        knobs = {k: os.environ[k] for k in ("INTERLEAVING_STEPS", "INTERLEAVING_SKIP") if os.environ.get(k)}
        return "".join(f"{k}={v} " for k, v in {"INTERLEAVING_SEED": self.seed, **knobs}.items())

    def fail(self, what: str) -> None:
        keep = int(os.environ.get("INTERLEAVING_LOG_LINES", "150"))
        tail = "\n".join(self.lines[-keep:] if keep else [])
        raise Violation(
            f"seed {self.seed}, step {self.step}: {what}\n"
            f"replay: {self.replay_env()}.venv/bin/pytest tests/scheduling/test_interleavings.py -k random\n"
            f"faults: fail_p={self.faults.fail_p} slow_p={self.faults.slow_p}\n"
            f"--- step log (last {keep} lines; INTERLEAVING_LOG_LINES=N for more) ---\n{tail}"
        )

    # ------------------------------------------------------------------ what the API holds
    @property
    def cluster(self) -> FlakyCluster:
        return self.svc.cluster  # type: ignore[return-value]

    def pods(self) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.cluster.list("", "Pod")}

    def nodes(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in self.cluster.list("", "Node")}

    def schedulable(self) -> list[str]:
        """The nodes kube-scheduler may place a pod on: neither cordoned nor tainted (no pod here
        tolerates a taint)."""
        return sorted(
            n for n, obj in self.nodes().items() if not obj["spec"].get("unschedulable") and not tainted(obj)
        )

    def with_room(self, name: str, *, in_flight: bool = True) -> list[str]:
        """Schedulable nodes with room for the pod as kube-scheduler counts it (NodeResourcesFit):
        the pods bound there and (`in_flight`) those it assumed there while their binds are in
        flight."""
        pods, nodes = self.pods(), self.nodes()
        used: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        busy = self.in_flight()
        recent = self.clock.now - self.lag_s
        for n, p in pods.items():
            if p["spec"].get("nodeName") and not finished(p):  # a finished pod holds nothing
                lagging = (n, p["metadata"].get("uid")) not in self.assumed  # it keeps what it bound itself
                if self.lag_s and lagging and n not in busy and self.bound_at.get(n, -1.0) > recent:
                    continue  # kube-scheduler's cache has not seen this binding yet
                used[p["spec"]["nodeName"]].update(pod_requests(p))
        for b in self.binds if in_flight else ():
            if not b.task.done() and b.pod in pods and not pods[b.pod]["spec"].get("nodeName"):
                used[b.node].update(pod_requests(pods[b.pod]))
        req = pod_requests(pods[name])
        shunned = self.shunned(name, in_flight=in_flight)
        return [
            n
            for n in self.admitting(name)
            if n not in shunned
            and all(allocatable(nodes[n]).get(k, 0) - used[n][k] >= v for k, v in req.items() if v)
        ]

    def admitting(self, name: str) -> list[str]:
        """The schedulable nodes the pod's nodeSelector admits (NodeAffinity)."""
        pod, nodes = self.pods()[name], self.nodes()
        return [n for n in self.schedulable() if selects(pod, nodes.get(n))]

    def shunned(self, name: str, *, in_flight: bool = True) -> set[str]:
        """The nodes the pod's required anti-affinity keeps it off (InterPodAntiAffinity): those where
        a pod of its apart gang is bound or (`in_flight`) being bound."""
        pods = self.pods()
        apart = (pods[name]["metadata"].get("labels") or {}).get(APART_LABEL)
        if not apart:
            return set()
        out = {
            p["spec"]["nodeName"]
            for n, p in pods.items()
            if n != name
            and p["spec"].get("nodeName")
            and not finished(p)
            and (p["metadata"].get("labels") or {}).get(APART_LABEL) == apart
        }
        for b in self.binds if in_flight else ():
            if (
                not b.task.done()
                and b.pod != name
                and b.pod in pods
                and not pods[b.pod]["spec"].get("nodeName")
            ):
                if (pods[b.pod]["metadata"].get("labels") or {}).get(APART_LABEL) == apart:
                    out.add(b.node)
        return out

    def in_flight(self) -> set[str]:
        return {b.pod for b in self.binds if not b.task.done()}

    def pending(self) -> list[str]:
        """Pods kube-scheduler would pick from its queue: unbound, no bind goroutine running."""
        busy = self.in_flight()
        return sorted(n for n, p in self.pods().items() if not p["spec"].get("nodeName") and n not in busy)

    # ------------------------------------------------------------------ verbs
    async def filter(self, name: str, offered: list[str]) -> list[str]:
        pod = self.pods()[name]
        self.filtered_at[name] = self.step
        doc = {"Pod": pod, "Nodes": None, "NodeNames": offered}
        resp = await self.svc.client.post("/filter", data=orjson.dumps(doc))
        text = await resp.text()
        if resp.status != 200:
            self.fail(f"filter {name} answered HTTP {resp.status}: {text.strip()}")
        out = orjson.loads(text)
        passed = out.get("NodeNames") or []
        reasons = {**(out.get("FailedNodes") or {}), **(out.get("FailedAndUnresolvableNodes") or {})}
        reason = next((r for r in reasons.values() if r), "")
        if out.get("Error") and RETRY_TEXT in out["Error"] and not passed:
            # a refusal where this harness's kube-scheduler saw room the service's watch had not yet
            # shown: kube-scheduler retries it after a backoff, as it does any pod it did not place
            reason = out["Error"]
            named = re.search(r"found room on node (\S+) that", reason)
            if named is None or named.group(1) not in offered:
                self.fail(f"filter {name} answered a retry naming no node it was offered: {reason}")
        elif out.get("Error"):
            self.fail(f"filter {name} answered an error: {out['Error']}")
        if not passed and not reason:
            self.fail(f"filter {name} passed no node and gave no reason: {out}")
        if set(passed) - set(offered):
            self.fail(f"filter {name} passed nodes it was not offered: {sorted(set(passed) - set(offered))}")
        if passed and name in self.plain and name != "wants-foo":
            # whatever kube-scheduler's cache missed, a plain pod is passed only where it fits as the
            # API stands: the bound pods and the binds in flight (its fast path keeps held and
            # settling nodes checked)
            # Beside binds in flight, a node may have room only if they never land: a gang member
            # whose plan was dropped waits for its error answer, and the room it had is no one's. If
            # one lands after all, the over-commit check of the API's objects says so
            lag_s, self.lag_s = self.lag_s, 0.0
            no_room = sorted(set(passed) - set(self.with_room(name, in_flight=False)))
            self.lag_s = lag_s
            if no_room:
                self.fail(f"filter {name} passed nodes without room for it: {no_room}")
        self.last_filter[name] = f"passed {passed}" if passed else reason
        self.log(f"filter {name} offered {len(offered)} -> {passed if passed else reason}")
        return passed

    def launch_bind(self, name: str, node: str) -> None:
        pod = self.pods()[name]
        doc = {"PodName": name, "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": node}
        svc = self.svc

        async def call() -> str:
            resp = await svc.client.post("/bind", data=orjson.dumps(doc))
            text = await resp.text()
            if resp.status != 200:
                return f"HTTP {resp.status}: {text.strip()}"
            return orjson.loads(text)["Error"]

        self.bind_called.add(name)
        task = asyncio.get_running_loop().create_task(call())
        call_ = BindCall(name, node, self.clock.now, task)
        self.binds.append(call_)
        self.log(f"bind {name} -> {node} (task)")

        def done(t: asyncio.Task) -> None:
            if t.cancelled():
                result = "cancelled: kube-scheduler lost the connection"
            elif t.exception() is not None:
                result = f"client error {t.exception()!r}"
            else:
                result = t.result()
            self.last_bind[name] = result
            if result == "":
                self.assumed.add((name, doc["PodUID"]))
            self.lines.append(f"      bind {name} -> {node} answered: {result or 'bound'}")

        task.add_done_callback(done)

    async def schedule(self, names: list[str], mode: str) -> None:
        """kube-scheduler's loop over a few queued pods: filter, then a bind goroutine on a passed node."""
        plans = self.plans()
        for name in names:
            if (
                name not in self.pods()
                or name in self.in_flight()
                or self.pods()[name]["spec"].get("nodeName")
            ):
                continue
            if name == "wants-foo" and mode != "unknown":
                continue  # no node offers example.com/foo: kube-scheduler's own filter stops it
            # kube-scheduler asks the extender only about nodes its own filters passed; the
            # unknown-resource step sends every schedulable node anyway (the issue's reproduction:
            # one such call must break nothing)
            offered = self.admitting(name) if mode == "unknown" else self.with_room(name)
            if mode == "subset" and len(offered) > 1:
                offered = sorted(self.rng.sample(offered, self.rng.randint(1, len(offered) - 1)))
            elif mode == "not-planned" and plans.get(name) in offered and len(offered) > 1:
                offered = [n for n in offered if n != plans[name]]
            if not offered:
                self.last_filter[name] = NO_ROOM
                self.log(f"{name}: {NO_ROOM}")
                self.mark_unschedulable(name)
                self.renominate(name)
                continue
            if self.rng.random() < 0.3:
                self.api.progress()  # slow writes land between two of kube-scheduler's filters
            passed = await self.filter(name, offered)
            if not passed:
                self.mark_unschedulable(name)
            if passed:
                seen = self.decided[name]
                self.launch_bind(name, passed[0] if len(passed) == 1 else self.rng.choice(passed))
                await self.reach_service(name, seen)

    async def schedule_planned(self) -> None:
        """The pending pods the service has planned or nudged: kube-scheduler filters them now (a
        pod's update moves it out of its unschedulable queue)."""
        resp = await self.svc.client.get("/debug/gangs")
        self.debug = (await resp.json())["gangs"]
        nudged, self.cluster.nudged = self.cluster.nudged, set()
        planned = sorted((set(self.plans()) | nudged) & set(self.pending()))
        if planned:
            self.log(f"schedule the planned and nudged pods {planned}")
            await self.schedule(planned, "all")
            await self.spin()

    async def schedule_nudged(self) -> None:
        """The pending pods the service nudged since the last step: kube-scheduler takes each from its
        queue at once (a pod's update moves it out of its unschedulable queue), in the random steps as
        in the settle phase. The service's nudge is what brings back a gang whose hold is ready (after
        a restart too): a harness that only picks pods at random leaves it waiting on chance."""
        nudged, self.cluster.nudged = self.cluster.nudged, set()
        picked = sorted(nudged & set(self.pending()))
        if picked:
            self.log(f"schedule the nudged pods {picked}")
            await self.schedule(picked, "all")
            await self.spin()

    def plans(self) -> dict[str, str]:
        return {pk.split("/", 1)[1]: node for g in self.debug for pk, node in (g.get("plan") or {}).items()}

    async def advance(self, seconds: float) -> None:
        # the API server gives a binding up within the bind fence: a dead process's writes land (or
        # are lost) before the clock moves, so never after the fence of the process alive now
        await self.land_orphans()
        self.log(f"clock +{seconds}s")
        first = min(seconds, EVICTION_SEEN_S) if self.unseen_evictions else seconds
        await self.svc.expire(first)
        if self.unseen_evictions:
            self.land_evictions()
            await self.spin()
            if seconds > first:
                await self.svc.expire(seconds - first)
        # slow API writes are slow, never httpTimeout slow: every parked one lands now
        self.api.progress(flush=True)
        await self.spin()
        await self.check_deadlines()

    async def land_orphans(self) -> None:
        if self.api.orphans:
            self.log(f"a dead process's {len(self.api.orphans)} parked binding(s) land or are lost")
            self.api.land(self.api.orphans)
            self.api.orphans.clear()
            await self.spin()

    async def spin(self, n: int = 20) -> None:
        """Let the loop run: responses travel, released binds land, callbacks fire."""
        for _ in range(n):
            await asyncio.sleep(0)

    async def check_deadlines(self) -> None:
        now = self.clock.now
        overdue = [b for b in self.binds if not b.task.done() and b.started + HTTP_TIMEOUT_S <= now]
        if not overdue:
            return
        # more loop iterations, in real time (every injected slow write has landed already); a
        # generous cap, spent only when something is wrong
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.0
        while any(not b.task.done() for b in overdue) and loop.time() < until:
            await asyncio.sleep(0.005)
        late = [
            f"{b.pod}->{b.node} (started t=+{b.started - 1000:.1f}s)" for b in overdue if not b.task.done()
        ]
        if late:
            self.fail(f"bind calls unanswered {HTTP_TIMEOUT_S:g}s after they started: {late}")

    def mark_unschedulable(self, name: str) -> None:
        """kube-scheduler's failed attempt: it writes PodScheduled=False on the pod (once; the service
        reads it to know who sits in the unschedulable queue, after a restart too)."""
        pod = self.pods().get(name)
        if pod is None or pod["spec"].get("nodeName"):
            return
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            return
        pod = copy.deepcopy(pod)
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        pod.setdefault("status", {})["conditions"] = [
            c for c in conditions if c.get("type") != "PodScheduled"
        ] + [cond]
        self.apply(pod)

    # ------------------------------------------------------------------ churn
    def apply(self, obj: dict) -> None:
        try:
            self.cluster.apply(obj)
        except Exception as exc:  # the embedded API feeds the service's cache as it writes
            self.fail(f"the service's cache raised on the watch event for {obj['metadata']['name']}: {exc!r}")

    def delete(self, kind: str, namespace: str | None, name: str, *, group: str = "") -> None:
        try:
            self.cluster.delete(group, kind, namespace, name)
        except Exception as exc:
            self.fail(f"the service's cache raised on the watch event deleting {name}: {exc!r}")

    def node_gains_resource(self) -> None:
        name = self.rng.choice(sorted(self.nodes()))
        node = copy.deepcopy(self.nodes()[name])
        self.counter += 1
        res = f"example.com/dev-{self.counter}"
        node["status"]["allocatable"][res] = "4"
        node["status"]["capacity"][res] = "4"
        self.log(f"node {name} gains {res} (a device plugin registers)")
        self.apply(node)

    def cordon_toggle(self) -> None:
        nodes = self.nodes()
        cordoned = sorted(n for n, o in nodes.items() if o["spec"].get("unschedulable"))
        if cordoned and self.rng.random() < 0.4:
            name, value = self.rng.choice(cordoned), False
        else:
            name, value = self.rng.choice(sorted(nodes)), True
        node = copy.deepcopy(nodes[name])
        node["spec"]["unschedulable"] = value
        self.log(f"node {name} {'cordoned' if value else 'uncordoned'}")
        self.apply(node)

    def delete_node(self) -> None:
        used = {p["spec"].get("nodeName") for p in self.pods().values()}
        free = sorted(n for n in self.nodes() if n not in used)
        if len(self.nodes()) <= 3 or not free:
            return
        name = self.rng.choice(free)
        self.log(f"node {name} deleted")
        self.delete("Node", None, name)

    @staticmethod
    def rack_names(nodes: dict[str, dict]) -> list[str]:
        """The racks the nodes name, sorted."""
        return sorted({o["metadata"]["labels"].get(RACK_LABEL, "") for o in nodes.values()} - {""})

    def add_node(self) -> None:
        self.counter += 1
        racks = self.rack_names(self.nodes())
        rack = self.rng.choice(racks) if racks and self.rng.random() < 0.7 else f"rx{self.counter}"
        name = f"x{self.counter}"
        self.log(f"node {name} added in rack {rack}")
        self.apply(make_node(name, cpu="8", rack=rack, block="b0"))

    # ------------------------------------------------------------------ a gang's owner deleted
    def own(self, gang: Gang) -> None:
        """A Job makes `gang`'s pods (skip-podgrouper on it: they keep the PodGroup they name)."""
        name = f"{gang.name}-job"
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"{name}-uid",
                "annotations": {"kai.scheduler/skip-podgrouper": "true"},
            },
            "spec": {"parallelism": gang.size},
        }
        gang.owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": name,
            "uid": f"{name}-uid",
            "controller": True,
        }
        self.owned, self.owner_uid = gang, f"{name}-uid"
        self.objects.append(job)
        mine = {n for n, g in self.pod_gang.items() if g == gang.name}
        for obj in self.objects:
            if obj.get("kind") == "Pod" and obj["metadata"]["name"] in mine:
                obj["metadata"]["ownerReferences"] = [dict(gang.owner)]

    def owned_by_job(self, pod: dict) -> bool:
        """Whether `pod` names the owned gang's Job as an owner."""
        refs = pod["metadata"].get("ownerReferences") or ()
        return bool(self.owner_uid) and any(r.get("uid") == self.owner_uid for r in refs)

    def collecting(self) -> bool:
        """Whether the garbage collector deletes the owned gang's pods (its Job deleted, not orphaning)."""
        return self.owner_fate in ("foreground", "background")

    def owner_move(self, *, finish: bool = False) -> None:
        """The owned gang's Job deleted (rarely), then the garbage collector's work, a few pods a step."""
        if self.owned is None or self.owner_done:
            return
        job_name = f"{self.owned.name}-job"
        if self.owner_fate is None:
            if finish or self.owner_rng.random() >= 0.04:
                return
            self.owner_fate = self.owner_rng.choice(("foreground", "background", "orphan"))
            self.owned.owner = None  # no pod is made under it any more
            job = self.cluster.get("batch", "Job", "default", job_name)
            if self.owner_fate == "background":
                self.log(f"job {job_name} deleted (background): the garbage collector deletes its pods")
                self.delete("Job", "default", job_name, group="batch")
            else:
                job = copy.deepcopy(job)
                finalizer = "foregroundDeletion" if self.owner_fate == "foreground" else "orphan"
                job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                job["metadata"]["finalizers"] = [finalizer]
                self.log(f"job {job_name} being deleted ({self.owner_fate})")
                self.apply(job)
            return
        if not finish and self.owner_rng.random() < 0.5:
            return
        pods = self.pods()
        owned = sorted(n for n, p in pods.items() if self.owned_by_job(p))
        if self.owner_fate == "orphan":
            for name in owned:
                pod = copy.deepcopy(pods[name])
                pod["metadata"].pop("ownerReferences", None)
                self.apply(pod)
            self.log(f"the garbage collector orphans {owned}; job {job_name} goes")
        else:
            picked = (
                owned
                if finish
                else self.owner_rng.sample(owned, min(len(owned), self.owner_rng.randint(1, 2)))
            )
            for name in picked:
                if name in self.terminating:
                    continue  # its grace period runs already
                if pods[name]["spec"].get("nodeName") and self.owner_rng.random() < 0.5:
                    going = copy.deepcopy(pods[name])
                    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                    self.terminating[name] = going["metadata"]["uid"]
                    self.log(f"the garbage collector deletes {name} (Terminating: its grace period runs)")
                    self.apply(going)
                else:
                    self.log(f"the garbage collector deletes {name}")
                    self.delete("Pod", "default", name)
            if len(picked) < len(owned):
                return
            if self.owner_fate == "foreground":
                self.log(f"job {job_name}'s dependents are gone: the job goes")
        if self.cluster.get("batch", "Job", "default", job_name) is not None:
            self.delete("Job", "default", job_name, group="batch")
        self.owner_done = True

    def made_again(self, pod: dict) -> bool:
        """Whether a controller makes `pod` again: not once its Job is deleted."""
        return not (self.owner_fate is not None and self.owned_by_job(pod))

    def replace_member(self) -> None:
        """A pending member is deleted; its controller creates a replacement now or a while later."""
        pods = self.pods()
        candidates = sorted(n for n in pods if n in self.pod_gang and not pods[n]["spec"].get("nodeName"))
        if not candidates:
            return
        old = self.rng.choice(candidates)
        if not self.made_again(pods[old]):
            return  # its Job is deleted: nothing makes a replacement
        gang = next(g for g in self.gangs if g.name == self.pod_gang[old])
        self.counter += 1
        new = old if self.rng.random() < 0.5 else f"{self.base[old]}-r{self.counter}"
        self.base[new] = self.base[old]
        self.pod_gang[new], self.pod_sub[new] = gang.name, self.pod_sub[old]
        replacement = gang.pod(new, self.pod_sub[old], uid=f"{new}-uid-r{self.counter}")
        if old in self.picky:  # and for the nodes its selector names
            replacement["spec"]["nodeSelector"] = dict(pods[old]["spec"]["nodeSelector"])
            self.picky.add(new)
        if old in self.own_cycle:  # its controller's template asks for the host port too
            replacement["spec"]["containers"][0]["ports"] = pods[old]["spec"]["containers"][0]["ports"]
            self.own_cycle.add(new)
        self.delete("Pod", "default", old)
        if self.rng.random() < 0.4:
            self.log(f"pod {old} deleted; its replacement {new} comes later")
            self.deferred.append(replacement)
        else:
            self.log(f"pod {old} deleted; replacement {new} created")
            self.apply(replacement)

    def recreate(self) -> None:
        later = []
        for pod in self.deferred:
            if not self.made_again(pod):
                self.log(f"pod {pod['metadata']['name']} is not created again: its Job is deleted")
                continue
            if pod["metadata"]["name"] in self.terminating:
                later.append(pod)  # a name is free only once the pod that had it is gone
                continue
            self.log(f"pod {pod['metadata']['name']} created (a replacement)")
            self.bind_called.discard(pod["metadata"]["name"])  # kube-scheduler has not seen this one
            self.apply(pod)
        self.deferred = later

    def lagging(self, pod: dict) -> bool:
        """Whether the eviction of a bound pod, accepted by the API, reaches the watch only later."""
        if not pod["spec"].get("nodeName") or self.grace_rng.random() >= self.evict_lag_p:
            return False
        self.unseen_evictions.append((pod["metadata"]["name"], pod["metadata"]["uid"]))
        self.lines.append(f"      {pod['metadata']['name']}'s eviction is accepted; the watch shows it later")
        return True

    def refusing(self, pod: dict) -> bool:
        """Whether a disruption budget refuses the eviction of a bound, running pod for now (429)."""
        if not pod["spec"].get("nodeName") or leaving(pod) or self.refuse_rng.random() >= self.refuse_p:
            return False
        self.lines.append(
            f"      {pod['metadata']['name']}'s eviction is refused by its disruption budget (429)"
        )
        self.refused_at[pod["metadata"]["name"]] = (pod["metadata"]["uid"], self.clock.now)
        return True

    def evictions_unseen(self) -> set[str]:
        """Pods evicted as the API's store has it already, whose watch event has not come yet."""
        return {name for name, _ in self.unseen_evictions}

    def land_evictions(self) -> None:
        """The accepted evictions reach the watch: each pod goes, or turns Terminating."""
        pods = self.pods()
        for name, uid in self.unseen_evictions:
            pod = pods.get(name)
            if pod is None or pod["metadata"].get("uid") != uid or leaving(pod):
                continue
            self.log(f"{name}'s eviction reaches the watch")
            if not self.graceful(pod):
                self.delete("Pod", "default", name)
        self.unseen_evictions.clear()

    def graceful(self, pod: dict) -> bool:
        """Whether an evicted (or preempted) bound pod runs out a grace period: it turns Terminating,
        still bound and using its node, and goes at a later "grace-ends" step."""
        if not pod["spec"].get("nodeName") or self.grace_rng.random() >= self.grace_p:
            return False
        name = pod["metadata"]["name"]
        going = copy.deepcopy(self.pods()[name])
        going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.terminating[name] = going["metadata"]["uid"]
        self.lines.append(f"      {name} is Terminating (its grace period runs)")
        self.apply(going)
        return True

    def end_graces(self, *, every: bool = False) -> None:
        """Terminating pods whose grace period ended are deleted (the kubelet's part)."""
        pods = self.pods()
        for name, uid in sorted(self.terminating.items()):
            if not every and self.grace_rng.random() < 0.4:
                continue
            del self.terminating[name]
            if name in pods and pods[name]["metadata"].get("uid") == uid:
                if finished(pods[name]) and name in self.pod_gang:
                    self.gone_done[name] = self.pod_gang[name]  # it ran to completion, then went
                self.log(f"{name}'s grace period ended: deleted")
                self.delete("Pod", "default", name)

    def jobset_edit(self) -> None:
        """The large JobSet's controller at work: one of its Jobs relabelled, a replicatedJob scaled
        by one, or the JobSet annotated. None of it may cost a verb work in proportion to its size."""
        js = next((j for j in self.cluster.list("jobset.x-k8s.io", "JobSet")), None)
        if js is None:
            return
        js = copy.deepcopy(js)
        jobs = self.cluster.list("batch", "Job")
        what = self.grace_rng.choice(("job", "scale", "annotate"))
        if what == "job" and jobs:
            job = copy.deepcopy(self.grace_rng.choice(jobs))
            job["metadata"].setdefault("labels", {})["touched"] = str(self.step)
            self.log(f"job {job['metadata']['name']} of jobset {js['metadata']['name']} relabelled")
            self.apply(job)
            return
        if what == "scale":
            rj = self.grace_rng.choice(js["spec"]["replicatedJobs"])
            rj["replicas"] = rj["replicas"] + (1 if rj["replicas"] < LARGE_REPLICAS else -1)
            self.log(f"jobset {js['metadata']['name']}: {rj['name']} scaled to {rj['replicas']}")
        else:
            js["metadata"].setdefault("annotations", {})["touched"] = str(self.step)
            self.log(f"jobset {js['metadata']['name']} annotated")
        self.apply(js)

    def outage(self) -> None:
        if not self.faults.outage:
            self.faults.outage, self.faults.outage_until = True, self.step + self.rng.randint(1, 6)
            self.log(f"API outage: every bind fails until step {self.faults.outage_until}")

    # ------------------------------------------------------------------ moves across features
    def movable(self) -> set[str]:
        """Pods whose membership may change now: not bound, no bind in flight, no replacement due; not an
        apart gang's (its anti-affinity, immutable, would follow it into another gang, which the final
        fit does not model), nor a Job's (its garbage collection is judged per owned gang)."""
        pods, busy = self.pods(), self.in_flight() | set(self.api.inflight)
        due = {d["metadata"]["name"] for d in self.deferred}
        return {
            n
            for n, p in pods.items()
            if not p["spec"].get("nodeName")
            and n not in busy | due
            and not (p["metadata"].get("labels") or {}).get(APART_LABEL)
            and not self.owned_by_job(p)
        }

    def targets(self) -> list[str]:
        """The gangs a pod may be moved into: not the owned one (its members are its Job's)."""
        return [g.name for g in self.gangs if g is not self.owned]

    def join(self, pod: dict, target: str) -> None:
        """Point `pod` at the PodGroup `target` (a leaf of it, if it has subgroups), in our books too."""
        name = pod["metadata"]["name"]
        gang = next((g for g in self.gangs if g.name == target), None)
        annotations = pod["metadata"].setdefault("annotations", {})
        labels = pod["metadata"].setdefault("labels", {})
        self.pod_gang.pop(name, None)
        self.pod_sub.pop(name, None)
        self.loose.discard(name)
        labels.pop(SUBGROUP_LABEL, None)
        sub = self.feat.choice(sorted(gang.subgroups)) if gang is not None and gang.subgroups else None
        if gang is not None and (gang.native or gang.tree):
            annotations.pop(GROUP_ANNOTATION, None)
            pod["spec"]["schedulingGroup"] = {"podGroupName": sub if gang.tree else target}
            labels[QUEUE_LABEL] = gang.queue
        else:
            annotations[GROUP_ANNOTATION] = target  # an ownerless pod's annotation comes first
        if gang is None:
            self.loose.add(name)
            return
        if sub and not gang.tree:
            labels[SUBGROUP_LABEL] = sub
        self.pod_gang[name], self.pod_sub[name] = gang.name, sub
        self.base.setdefault(name, name)

    def regroup(self) -> None:
        """A pending or planned gang pod's pod-group-name edited: another gang's, or one that is missing."""
        pods = self.pods()
        candidates = sorted(n for n in self.movable() if n in self.pod_gang or n in self.loose)
        if not candidates:
            return
        name = self.feat.choice(candidates)
        target = self.feat.choice([*self.targets(), MISSING_GROUP])
        pod = copy.deepcopy(pods[name])
        was = self.pod_gang.get(name, MISSING_GROUP)
        self.join(pod, target)
        self.log(f"pod {name}: pod-group-name {was} -> {target} (sub {self.pod_sub.get(name)})")
        self.apply(pod)

    def annex(self) -> None:
        """A pending ownerless plain pod is annotated into a gang."""
        pods = self.pods()
        candidates = sorted(
            n
            for n in self.movable()
            if n in self.plain and n != "wants-foo" and not pods[n]["metadata"].get("ownerReferences")
        )
        if not candidates:
            return
        name = self.feat.choice(candidates)
        target = self.feat.choice(self.targets())
        pod = copy.deepcopy(pods[name])
        self.join(pod, target)
        self.plain.remove(name)
        self.log(f"plain pod {name} annotated into gang {target} (sub {self.pod_sub.get(name)})")
        self.apply(pod)

    def succeed(self) -> None:
        pods = self.pods()
        candidates = sorted(n for n, p in pods.items() if p["spec"].get("nodeName") and not finished(p))
        if not candidates:
            return
        name = self.feat.choice(candidates)
        pod = copy.deepcopy(pods[name])
        pod["status"]["phase"] = "Succeeded"
        self.log(f"pod {name} Succeeded on {pod['spec']['nodeName']}")
        self.apply(pod)
        gang = self.pod_gang.get(name)
        group = self.cluster.get("scheduling.run.ai", "PodGroup", "default", gang) if gang else None
        if group is not None and not group["spec"].get("subGroups"):
            # KAI's scheduler counts a PodGroup's Succeeded pods in its status: what tells the quorum
            # of a gang no Job owns about a member the pod garbage collector deletes later
            group = copy.deepcopy(group)
            status = group.setdefault("status", {})
            status["succeeded"] = int(status.get("succeeded") or 0) + 1
            self.apply(group)
            self.done_recorded.add(name)

    def delete_finished(self) -> None:
        candidates = sorted(n for n, p in self.pods().items() if finished(p))
        if not candidates:
            return
        name = self.feat.choice(candidates)
        if name in self.pod_gang:
            self.gone_done[name] = self.pod_gang[name]
        self.log(f"finished pod {name} deleted")
        self.delete("Pod", "default", name)

    async def queue_edit(self) -> None:
        """A Queue's cpu limit, quota or weight edited, or a leaf moved to the top level and back."""
        queues = self.queue_objects()
        if not queues:
            return
        name = self.feat.choice(sorted(queues))
        obj = copy.deepcopy(queues[name])
        cpu = obj["spec"]["resources"]["cpu"]
        what = self.feat.choice(("limit", "limit", "quota", "weight", "parent"))
        if what == "parent" and name != ROOT_QUEUE:
            if obj["spec"].get("parentQueue"):
                obj["spec"].pop("parentQueue")
            else:
                obj["spec"]["parentQueue"] = ROOT_QUEUE
        elif what == "weight":
            cpu["overQuotaWeight"] = self.feat.choice((0, 1, 2, 5))
        elif what == "quota" and name != ROOT_QUEUE:
            cpu["quota"] = self.feat.choice((0, 2_000, 4_000, 8_000))
        else:
            cpu["limit"] = self.feat.choice((-1, 4_000, 8_000, 16_000, 24_000, 40_000))
        if cpu["limit"] != -1 and cpu["quota"] != -1 and cpu["limit"] < cpu["quota"]:
            cpu["limit"] = cpu["quota"] or -1  # never below the quota (the Queue would be malformed)
        self.log(f"queue {name}: parent {obj['spec'].get('parentQueue')}, cpu {cpu}")
        self.apply(obj)
        # a queue left above its new limit may stay there, never grow: note the use it has now
        resp = await self.svc.client.get("/debug/gangs")
        self.debug = (await resp.json())["gangs"]
        totals = self.queue_totals(self.pods(), in_flight=True)
        for q, o in self.queue_objects().items():
            limit = queue_limit(o)
            if limit is not None and totals.get(q, 0) > limit:
                self.over_limit[q] = max(self.over_limit.get(q, 0), totals[q])
                self.log(f"      queue {q} is left at {totals[q]}m, above its limit {limit}m")

    async def preempt(self) -> None:
        """kube-scheduler's DefaultPreemption for a pending pod of priority above 0 that fits nowhere:
        on each node where evicting lower-priority pods makes room, the fewest of them (the highest
        priorities reprieved first), offered to the preempt verb; the chosen node's victims deleted
        and the pod nominated there."""
        pods = self.pods()
        # kube-scheduler preempts for a pod its filters (the extender's included) passed nowhere
        refused = {n for n, said in self.last_filter.items() if not said.startswith("passed")}
        candidates = sorted(
            n
            for n in self.pending()
            if n != "wants-foo" and priority(pods[n]) > 0 and (n in refused or not self.with_room(n))
        )
        if not candidates:
            return
        name = self.feat.choice(candidates)
        pod, nodes = pods[name], self.nodes()
        prio, req = priority(pod), pod_requests(pod)
        assumed: dict[str, list[dict]] = collections.defaultdict(list)
        for b in self.binds:
            if not b.task.done() and b.pod in pods and not pods[b.pod]["spec"].get("nodeName"):
                assumed[b.node].append(pods[b.pod])
        offered: dict[str, list[dict]] = {}
        shunned = self.shunned(name)
        for node in self.admitting(name):
            if node in shunned:
                continue  # InterPodAntiAffinity: its own gang's members there are no lower-priority victims
            alloc = allocatable(nodes[node])

            def fits(keep: list[dict], alloc: dict[str, int] = alloc, node: str = node) -> bool:
                used: collections.Counter[str] = collections.Counter()
                for p in keep + assumed[node]:
                    used.update(pod_requests(p))
                return all(alloc.get(k, 0) - used[k] >= v for k, v in req.items() if v)

            on = [p for p in pods.values() if p["spec"].get("nodeName") == node and not finished(p)]
            # a Terminating pod goes already: it holds its room until then, and is nobody's victim
            keep = [p for p in on if priority(p) >= prio or leaving(p)]
            lower = sorted(
                (p for p in on if priority(p) < prio and not leaving(p)), key=lambda p: -priority(p)
            )
            if not lower or not fits(keep):
                continue
            victims = []
            for v in lower:
                if fits([*keep, v]):
                    keep.append(v)
                else:
                    victims.append(v)
            if victims:
                offered[node] = victims
        if not offered:
            self.log(f"preempt {name}: no node where lower-priority victims make room")
            return
        doc = {
            "Pod": pod,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                n: {"Pods": [{"UID": v["metadata"]["uid"]} for v in vs], "NumPDBViolations": 0}
                for n, vs in offered.items()
            },
        }
        resp = await self.svc.client.post("/preempt", data=orjson.dumps(doc))
        text = await resp.text()
        if resp.status != 200:
            self.fail(f"preempt {name} answered HTTP {resp.status}: {text.strip()}")
        kept = orjson.loads(text).get("NodeNameToMetaVictims") or {}
        for n, meta in kept.items():
            uids = {v["UID"] for v in meta.get("Pods") or ()}
            if n not in offered or not uids or uids - {v["metadata"]["uid"] for v in offered[n]}:
                self.fail(f"preempt {name} answered {n}: {meta}, not one of the candidates offered")
        self.log(f"preempt {name} (priority {prio}) offered {sorted(offered)} -> {sorted(kept)}")
        await self.drain()  # a gang preempts whole by its own plan: its effects
        if not kept:
            return
        by_uid = {v["metadata"]["uid"]: v for vs in offered.values() for v in vs}

        def cost(n: str) -> tuple:
            victims = [by_uid[v["UID"]] for v in kept[n]["Pods"]]
            return max(priority(v) for v in victims), len(victims), n

        node = min(kept, key=cost)
        for v in kept[node]["Pods"]:
            victim = by_uid[v["UID"]]
            # kube-scheduler chose it on that node from its own cache: no lag there hides its binding
            self.bound_at.pop(victim["metadata"]["name"], None)
            self.note_eviction(copy.deepcopy(victim), "kube-scheduler")
            if not self.graceful(victim):
                self.delete("Pod", "default", victim["metadata"]["name"])
        nominated = copy.deepcopy(self.pods()[name])
        nominated["status"]["nominatedNodeName"] = node
        self.apply(nominated)
        await self.svc.expire(0)  # the ticker sees the gangs the deletions broke
        await self.drain()

    def renominate(self, name: str) -> None:
        """kube-scheduler's PostFilter after a failed cycle: a nominated pod waits for its victims while
        one of them still terminates on its node (PodEligibleToPreemptOthers); otherwise its preemption
        runs again and, finding no candidate, clears the nomination (the preempt move stands for the
        runs that find one)."""
        pods = self.pods()
        pod = pods[name]
        node = (pod.get("status") or {}).get("nominatedNodeName")
        if not node:
            return
        if any(p["spec"].get("nodeName") == node and leaving(p) for p in pods.values()):
            return
        cleared = copy.deepcopy(pod)
        del cleared["status"]["nominatedNodeName"]
        self.log(f"{name}: its nomination to {node} is cleared (nothing terminates there for it)")
        self.apply(cleared)

    async def restart(self) -> None:
        """The extender's process is killed and a new one lists the cluster: kube-scheduler's calls
        drop; the old process's writes parked at the API server land later, or never."""
        old = self.svc
        self.land_evictions()  # accepted evictions are in the API's store, which the new process lists
        orphans = set(old.cluster.parked)  # type: ignore[attr-defined]
        self.log(f"restart: connections drop, {len(orphans)} binding(s) stay in flight at the API server")
        for b in self.binds:
            b.task.cancel()
        await asyncio.gather(*(b.task for b in self.binds), return_exceptions=True)
        self.binds.clear()
        new = FlakyCluster(
            old.cluster.all_objects(),
            faults=self.faults,
            api=self.api,
            bound_at=self.bound_at,
            clock=self.clock,
        )
        old.cluster.successor = new  # type: ignore[attr-defined]
        old.cluster.dead = True  # type: ignore[attr-defined]
        # they land at an "orphans-land" step or before the clock next moves, not with progress
        self.api.orphans |= orphans
        self.api.parked = [(due, fut) for due, fut in self.api.parked if fut not in orphans]
        await old.client.close()
        await self.start(new)

    # ------------------------------------------------------------------ invariants
    def judge_landings(self) -> None:
        """Each binding judged once, under the labels of its node as it landed (an operator may relabel
        the node later, and a pod bound before stays legitimately): its nodeSelector admits the node,
        and a rack gang's member (each subgroup's, where each has a rack) sits in the rack the gang's
        other bound members share, unless a relabel split them already (then no rack is right)."""
        nodes, pods, bound = self.nodes(), self.pods(), self.bound()
        landed = {(n, str(pods[n]["metadata"].get("uid", ""))) for n in bound}
        fresh = {n for n, _ in landed - self.judged - self.unjudged}
        self.judged = landed
        # an exemption lasts while the bind decided before the relabel does: a later one is judged
        flying = set(self.unlanded())
        self.unjudged = {(n, uid) for n, uid in self.unjudged if n in flying and n not in bound}
        for name in sorted(fresh):
            if not finished(pods[name]) and not selects(pods[name], nodes.get(bound[name])):
                selector = pods[name]["spec"].get("nodeSelector")
                self.fail(
                    f"pod {name} is bound to {bound[name]}, which its nodeSelector {selector} does not admit"
                )

        def rack(n: str) -> str | None:
            return ((nodes.get(bound[n]) or {}).get("metadata", {}).get("labels") or {}).get(RACK_LABEL)

        for g in self.gangs:
            if not (g.rack or g.sub_rack):
                continue
            members = [
                n
                for n in bound
                if self.pod_gang.get(n) == g.name and not finished(pods[n]) and not leaving(pods[n])
            ]
            if fresh.isdisjoint(members):
                continue
            units: dict[str | None, list[str]] = {}
            for n in members:
                units.setdefault(self.pod_sub.get(n) if g.sub_rack else None, []).append(n)
            for unit, names in units.items():
                before = {rack(n) for n in names if n not in fresh}
                racks = {rack(n) for n in names}
                # split by a relabel already: a landing may join either part, never a third rack
                if not racks <= before if len(before) > 1 else len(racks) > 1:
                    what = f"gang {g.name}" + (f"'s subgroup {unit}" if g.sub_rack else "")
                    self.fail(
                        f"{what} must sit in one rack; its bound members are in {sorted(map(str, racks))}"
                    )

    def node_edit(self) -> None:
        """A node's allocatable cpu lowered to what is bound or decided to bind there (or restored),
        or the node deleted and registered again under its name with nothing bound there."""
        nodes, pods, decided = self.nodes(), self.pods(), self.unlanded()
        name = self.node_rng.choice(sorted(nodes))
        node = copy.deepcopy(nodes[name])
        draw = self.node_rng.random()
        if name in self.shrunk and draw < 0.5:
            node["status"]["allocatable"] = self.shrunk.pop(name)
            self.log(f"node {name}'s allocatable restored to {node['status']['allocatable']['cpu']} cpu")
            self.apply(node)
            return
        there = [n for n, p in pods.items() if p["spec"].get("nodeName") == name and not finished(p)]
        there += [n for n, to in decided.items() if to == name and n in pods]
        if draw < 0.8:
            if None in decided.values():
                return  # a write whose node is unknown here may land anywhere
            used = sum(pod_requests(pods[n]).get("cpu", 0) for n in set(there))
            cpu = allocatable(node).get("cpu", 0)
            lowered = max(used, cpu - self.node_rng.choice((2000, 4000, 8000)))
            if lowered >= cpu:
                return
            self.shrunk.setdefault(name, copy.deepcopy(node["status"]["allocatable"]))
            node["status"]["allocatable"]["cpu"] = f"{lowered}m"
            self.log(f"node {name}'s allocatable lowered to {lowered}m cpu ({used}m bound or binding there)")
            self.apply(node)
        elif not there and None not in decided.values():
            self.log(f"node {name} deleted and registered again under its name")
            self.delete("Node", None, name)
            self.apply(node)

    def unlanded(self) -> dict[str, str | None]:
        """The pods whose binding is decided and not landed, each with the node it goes to (None: not
        known here, a dead process's write): written by the API server, released by the service, or
        asked by kube-scheduler on its own filter's word (in no plan: a member waiting at the barrier
        is decided at the release). The ledger's plans as they stand, not the last check's."""
        ledger = self.svc.scheduler.ledger
        out: dict[str, str | None] = {}
        waiting: set[str] = set()
        for e in ledger.gangs.values():
            for pk, p in e.plan.items():
                if pk in e.releasing:
                    out[pk.split("/", 1)[1]] = p.node
                else:
                    waiting.add(pk.split("/", 1)[1])
        for b in self.binds:
            if not b.task.done() and b.pod not in waiting:
                out.setdefault(b.pod, b.node)
        for n in self.api.inflight:
            out.setdefault(n, None)
        return out

    def relabel(self) -> None:
        """An operator moves a node to another rack, gives or takes the label a picky member's
        nodeSelector asks for, or taints a node NoSchedule or untaints it. The bindings so far are
        judged first, under the labels they landed under. The bindings decided before it and not
        landed yet are not judged while that bind lasts, when the relabel bears on them: those to the
        node, and for a rack move those of gangs with a member on it or going there."""
        nodes = self.nodes()
        name = self.relabel_rng.choice(sorted(nodes))
        node = copy.deepcopy(nodes[name])
        labels = node["metadata"].setdefault("labels", {})
        draw = self.relabel_rng.random()
        rack_move = False
        if draw < 0.25:
            taints = node["spec"].setdefault("taints", [])
            if taints:
                taints.clear()
            else:
                taints.append({"key": "dedicated", "value": "other-team", "effect": "NoSchedule"})
            what = f"node {name} {'tainted NoSchedule' if taints else 'untainted'}"
        elif self.picky and draw < 0.5:
            if labels.pop(PICKY_LABEL, None) is None:
                labels[PICKY_LABEL] = "yes"
            what = f"node {name} {'gains' if PICKY_LABEL in labels else 'loses'} label {PICKY_LABEL}"
        else:
            racks = [r for r in self.rack_names(nodes) if r != labels.get(RACK_LABEL)]
            self.counter += 1
            rack = (
                self.relabel_rng.choice(racks)
                if racks and self.relabel_rng.random() < 0.8
                else f"rx{self.counter}"
            )
            what = f"node {name} relabelled from rack {labels.get(RACK_LABEL)} to {rack}"
            labels[RACK_LABEL] = rack
            rack_move = True
        self.judge_landings()
        pods, decided = self.pods(), self.unlanded()
        there = {n for n, p in pods.items() if p["spec"].get("nodeName") == name}
        there |= {n for n, to in decided.items() if to == name}
        gangs = {self.pod_gang[n] for n in there if n in self.pod_gang} if rack_move else set()
        exempt = {n for n, to in decided.items() if to in (name, None) or self.pod_gang.get(n) in gangs}
        self.unjudged |= {(n, str(pods[n]["metadata"].get("uid", ""))) for n in exempt if n in pods}
        self.log(what)
        self.apply(node)

    def quorum_edit(self) -> None:
        """An operator lowers or raises a KAI PodGroup's minMember (or one subgroup's) by one, in place.
        A raise waits for a moment none of the gang is bound, finishing, Terminating or being bound:
        from then on the gang is judged by the new quorum, plans held under the old one included."""
        pods = self.pods()
        editable = [g for g in self.gangs if not (g.native or g.tree) and (g.subgroups or g.min_member)]
        if not editable:
            return
        gang = self.quorum_rng.choice(editable)
        sub = self.quorum_rng.choice(sorted(gang.subgroups)) if gang.subgroups else None
        old = gang.subgroups[sub] if gang.subgroups and sub else gang.min_member or 1
        members = [n for n, g in self.pod_gang.items() if g == gang.name]
        quiet = gang.name not in self.binding_gangs() and not any(
            n in pods and (pods[n]["spec"].get("nodeName") or leaving(pods[n])) for n in members
        )
        if sub is not None:
            room = sum(1 for n in members if self.pod_sub.get(n) == sub)
        else:
            room = gang.size
        raise_ = quiet and old < max(room, 1) and self.quorum_rng.random() < 0.5
        new = old + 1 if raise_ else old - 1
        if new < 1:
            return
        found = [
            o
            for o in self.cluster.list("scheduling.run.ai", "PodGroup")
            if o["metadata"]["name"] == gang.name and o["metadata"].get("namespace") == "default"
        ]
        if not found:
            return
        pg = copy.deepcopy(found[0])
        if sub is not None:
            assert gang.subgroups is not None
            for entry in pg["spec"].get("subGroups") or ():
                if entry.get("name") == sub:
                    entry["minMember"] = new
            gang.subgroups[sub] = new
        else:
            pg["spec"]["minMember"] = new
            gang.min_member = new
        self.log(f"podgroup {gang.name}{f' subgroup {sub}' if sub else ''}: minMember {old} -> {new}")
        self.apply(pg)

    def bound(self) -> dict[str, str]:
        return {n: p["spec"]["nodeName"] for n, p in self.pods().items() if p["spec"].get("nodeName")}

    def gang_state(self, gang: Gang, bound: dict[str, str], *, recorded: bool = False) -> str | None:
        """Why `gang` is partially bound, or None. `recorded`: of its finished members since deleted,
        count only those a record outlives (what the service, deciding on an eviction, can count)."""
        done = {
            n
            for n, g in self.gone_done.items()
            if g == gang.name and (not recorded or n in self.done_recorded)
        }  # finished, then deleted
        # a member that ran to completion in its grace period (evicted, then Succeeded) counts too
        done |= {
            n
            for n, p in self.pods().items()
            if self.pod_gang.get(n) == gang.name
            and leaving(p)
            and (p.get("status") or {}).get("phase") == "Succeeded"
        }
        going = self.evictions_unseen()
        live = {
            n: p for n, p in self.pods().items() if not leaving(p) and n not in going
        }  # Terminating: going
        pods = [n for n in live if self.pod_gang.get(n) == gang.name] + sorted(done)
        on = [n for n in pods if n in bound or n in done]
        if not any(n in bound and n in live and not finished(live[n]) for n in on):
            return None  # none of it runs: finished, or evicted whole
        if not gang.subgroups:
            need = gang.min_member or 1
            return None if len(on) >= need else f"{len(on)} of {need} bound ({sorted(on)})"
        per = collections.Counter(self.pod_sub[n] for n in on)
        runs = collections.Counter(self.pod_sub[n] for n in on if n in live and not finished(live[n]))
        for sub, need in gang.subgroups.items():
            # a subgroup none of which runs any more is not part bound: it finished, or went whole
            if runs[sub] and 0 < per[sub] < need:
                return f"subgroup {sub}: {per[sub]} of {need} bound ({sorted(on)})"
        ready = sum(per[s] >= m for s, m in gang.subgroups.items())
        if ready < (gang.min_subgroup or len(gang.subgroups)):
            return f"{ready} subgroups ready ({sorted(on)})"
        return None

    def partly_evicted(
        self,
        hit: set[str],
        binding: set[str],
        collected: str | None,
        bound: dict[str, str],
        pods: dict[str, dict],
    ) -> list[str]:
        """What is wrong with each gang a disruption hit since the last check that still runs short. A
        member whose eviction a budget refused within REFUSED_GRACE_S runs on for now: the service
        asks again every RETRY_S (one refused longer ago than that was not asked again)."""
        refused = self.refused_recently(pods)
        going = self.evictions_unseen() | refused
        # a gang (or a subgroup of it) left short while a budget refuses a member's eviction: asked
        # again within REFUSED_GRACE_S, it runs short meanwhile
        refusing = {self.pod_gang.get(n) for n in refused if n in bound}
        wrong = []
        for g in self.gangs:
            if g.name in refusing:
                continue
            running = [
                n
                for n in bound
                if self.pod_gang.get(n) == g.name
                and not finished(pods[n])
                and not leaving(pods[n])
                and n not in going
            ]
            # a follower's evictions stop with the Lease: the leading replica finishes them
            if (
                g.name in hit
                and running
                and g.name not in binding
                and not self.following
                and g.name != collected
            ):
                # a member that finished and was deleted with no record left is gone for the service
                # too: a subgroup it kept at quorum is broken by the eviction, and goes whole
                why = self.gang_state(g, bound, recorded=True)
                if why:
                    by = sorted({f"{n} by {who}" for n, gang, who in self.evicted if gang == g.name})
                    wrong.append(f"gang {g.name} is partly evicted ({by}): {why}")
        return wrong

    def refused_recently(self, pods: dict[str, dict]) -> set[str]:
        """Pods whose eviction a budget refused within REFUSED_GRACE_S: asked again before it ends."""
        return {
            n
            for n, (uid, at) in self.refused_at.items()
            if n in pods and pods[n]["metadata"].get("uid") == uid and self.clock.now - at < REFUSED_GRACE_S
        }

    def binding_gangs(self) -> set[str]:
        """Gangs with a member's binding on its way: at the API server, or a bind call kube-scheduler
        made that is not answered yet (its POST may not have reached the API server)."""
        calls = {self.pod_gang.get(b.pod) for b in self.binds if not b.task.done()}
        return set(self.api.gang_inflight) | {g for g in calls if g is not None}

    async def check(self, *, final: bool = False) -> None:
        svc, store = self.svc, self.svc.store
        if ERRORS_LOGGED.records:
            # a bug the service caught and logged (a store listener's, a tick's) is a bug all the same
            first = ERRORS_LOGGED.records[0]
            ERRORS_LOGGED.records.clear()
            self.fail(f"the service logged an error: {first.getMessage()}\n{first.exc_text or ''}")
        binding = self.binding_gangs()
        for item in self.evicted:
            if item[1] is not None and item[1] in binding:
                self.hit_in_flight.setdefault(item[1], []).append(item)
        landed = [g for g in self.hit_in_flight if g not in binding]
        # a gang hit while its binds were on their way, which all landed within the step (seed 2963)
        landed += sorted(g for g in self.binding_when_hit if g not in binding and g not in landed)
        self.binding_when_hit.clear()
        if landed:
            # its last binds landed since: the service's ticker sees their watch events (as it does
            # within a second) before the gang is judged as one a disruption hit
            await svc.expire(0)
            await self.drain()
            for g in landed:
                self.evicted.extend(self.hit_in_flight.pop(g, []))
        # a follower writes nothing on its own: no PodGroup, status, event, nudge, condition or eviction
        if self.follower_writes:
            self.fail(f"the service wrote while its kube-scheduler did not lead: {self.follower_writes[:5]}")
        nodes, pods, bound = self.nodes(), self.pods(), self.bound()
        if self.broken_reclaims:
            self.fail(self.broken_reclaims[0])
        if self.evicted_twice:
            self.fail(self.evicted_twice[0])
        if self.owner_evictions:
            self.fail(self.owner_evictions[0])
        # over-commit, from the API's objects
        used: dict[str, collections.Counter[str]] = {}
        for name, node in bound.items():
            if node not in nodes and not finished(pods[name]):
                self.fail(f"pod {name} is bound to {node}, which does not exist")
            if not finished(pods[name]):
                used.setdefault(node, collections.Counter()).update(pod_requests(pods[name]))
        for node, acc in used.items():
            alloc = allocatable(nodes[node])
            over = {k: (v, alloc.get(k, 0)) for k, v in acc.items() if v > alloc.get(k, 0)}
            if over:
                self.fail(f"node {node} is over-committed (requested, allocatable): {over}")
        free = store.arrays.free
        for node, row in store.node_rows.items():
            if (free[row] < 0).any():
                held = {k: r.requests for k, r in store.reservations.items() if r.node == node}
                on = sorted(k for k, rec in store.pods.items() if rec.node_name == node and rec.live)
                self.fail(
                    f"the store's free capacity of {node} is negative: {free[row].tolist()}; "
                    f"held there: {held}; live pods bound there: {on}"
                )
        # where a pod landed: its nodeSelector admits the node, a rack gang's members share a rack
        self.judge_landings()
        # a member only its own cycle vouches for (a host port) is bound only after it reached bind
        for name in sorted(self.own_cycle & set(bound)):
            if name not in self.bind_called:
                self.fail(
                    f"{name} asks for a host port and was bound before kube-scheduler called bind for it"
                )
        # anti-affinity: an apart gang's bound members each alone on their nodes
        on_node: dict[tuple[str, str], list[str]] = {}
        for n, node in bound.items():
            apart = (pods[n]["metadata"].get("labels") or {}).get(APART_LABEL)
            if apart and not finished(pods[n]) and not leaving(pods[n]):
                on_node.setdefault((apart, node), []).append(n)
        for (apart, node), names in on_node.items():
            if len(names) > 1:
                self.fail(
                    f"gang {apart}'s members must be alone on their nodes; {sorted(names)} share {node}"
                )
        # partial gangs: not while a gang's API binds are in flight (they land one at a time), nor
        # one the API left short (the final report asks that it healed wherever its members fit)
        # partial evictions: a gang whole at the last check that lost members since has no member
        # running, or its quorum (finished members counted), once the service's effects ran (excused
        # or not: an excuse is for a release, not an eviction)
        hit = {
            gang
            for _, gang, _ in self.evicted
            if gang is not None
            and (self.was_whole.get(gang) or (gang in landed and gang not in self.api.excused))
        }
        # the garbage collector deletes a gang whose Job is deleted a few pods at a time: partial meanwhile
        collected = self.owned.name if self.owned is not None and self.collecting() else None
        # a gang evicted in part while a budget refuses a member: asked again within REFUSED_GRACE_S
        refusing = {self.pod_gang.get(n) for n in self.refused_recently(pods) if n in bound}
        for g in self.gangs:
            if (
                g.name in hit
                or g.name in refusing
                or g.name in self.api.excused
                or (not final and g.name in self.api.gang_inflight)
                or g.name == collected
            ):
                continue
            why = self.gang_state(g, bound)
            if why:
                self.fail(f"gang {g.name} is partially bound: {why}")
        partly = self.partly_evicted(hit, binding, collected, bound, pods)
        if partly:
            # a member's bind that landed within this step, after its gang was evicted, is evicted by
            # the service's next tick (within a second): judge the gang once that tick ran, and any
            # gang whole at the last check that the tick's own evictions hit, likewise
            seen = len(self.evicted)
            await svc.expire(0)
            await self.drain()
            pods, bound = self.pods(), self.bound()
            hit |= {g for _, g, _ in self.evicted[seen:] if g is not None and self.was_whole.get(g)}
            partly = self.partly_evicted(hit, binding, collected, bound, pods)
        if partly:
            self.fail(partly[0])
        going = self.evictions_unseen()
        self.evicted.clear()
        self.was_whole = {
            g.name: self.gang_state(g, bound) is None
            and any(self.pod_gang.get(n) == g.name and not leaving(pods[n]) and n not in going for n in bound)
            for g in self.gangs
        }
        # reservations: each one planned or held for a bind in flight. The service's ticker may plan
        # while the answer is on its way: only a hold that stood unchanged across the call is judged
        before = dict(store.reservations)
        resp = await svc.client.get("/debug/gangs")
        if resp.status != 200:
            self.fail(f"GET /debug/gangs answered HTTP {resp.status}")
        self.debug = (await resp.json())["gangs"]
        planned = {pk for g in self.debug for pk in (g.get("plan") or {})}
        busy = {f"default/{n}" for n in self.in_flight() | set(self.api.inflight)}
        busy |= set(svc.scheduler.ledger.unconfirmed)  # its binding unanswered: it may yet land
        # a preemptor's victims' room, held for it as each goes, and the free room its plan counts on
        held = {
            f"{v['pod']}#held-for:{g['gang']}"  # the ledger's key for a victim's room, held for its gang
            for g in self.debug
            for v in ((g.get("preemption") or {}).get("victims") or ())
        } | {
            f"{node}#claimed-for:{g['gang']}"  # the ledger's key for the free room its plan claims
            for g in self.debug
            for node in ((g.get("preemption") or {}).get("claimed") or ())
        }
        for pk, res in list(store.reservations.items()):
            if pk in held or before.get(pk) is not res:
                continue
            if pk not in store.pods:
                self.fail(f"reservation for {pk}, a pod the store does not hold")
            if pk not in busy and (final or pk not in planned):
                where = "planned, but nothing is left to bind it" if pk in planned else "not planned"
                self.fail(f"reservation for {pk} left behind ({where}, no bind in flight)")
        self.check_holds()
        for b in self.binds:
            if b.task.done() and not b.task.cancelled():
                result = b.task.result() if b.task.exception() is None else repr(b.task.exception())
                if result.startswith(("HTTP", "client error")) or "internal error" in result:
                    self.fail(f"bind {b.pod} -> {b.node} answered: {result}")
        await self.check_queues(pods)
        if self.stalls:
            self.fail(f"the event loop stalled over {STALL_S * 1000:.0f} ms: {self.stalls}")

    def check_holds(self) -> None:
        """A hold is for a gang that waits: none has a plan (its plan replaces it at once); the rows
        held for one gang fit it drained (never more than a node's allocatable); and a hold, once
        every held node has its amount free, starts its gang within HOLD_READY_STEPS steps (no one
        else can take that room: it does not starve) when it is the head, or when no hold ranked
        before it shares a node with it (a size class's head behind the other class's: the pools)."""
        nodes = self.nodes()
        before: dict[str, set[str]] = {}  # gang -> the nodes of the holds ranked before its own
        seen: set[str] = set()
        for gang, hold in self.ranked_holds():
            before[gang] = set(seen)
            seen |= set(hold["nodes"])
        for g in self.debug:
            hold = g.get("hold") or {}
            if "amounts" not in hold:
                continue
            gang = g["gang"]
            if g.get("plan"):
                self.fail(f"gang {gang} has a plan and still holds {hold['nodes']}")
            for node, amounts in hold["amounts"].items():
                if node not in nodes:
                    continue  # deleted since the last pass: the next one chooses again
                alloc = allocatable(nodes[node])
                over = {r: v for r, v in amounts.items() if r in ("cpu",) and v > alloc.get(r, 0)}
                if over:
                    self.fail(f"gang {gang} holds more of {node} than it has: {over} (allocatable {alloc})")
            alone = hold["rank"] == 1 or not before.get(gang, set()) & set(hold["nodes"])
            ready = hold["drainedNodes"] == hold["heldNodes"] and alone
            # within the start-up fence no gang can start: its wait counts from the fence's end
            if not ready or self.following or self.clock.now < self.fence_until:
                self.hold_ready_since.pop(gang, None)
                continue
            since = self.hold_ready_since.setdefault(gang, self.step)
            if self.step - since > HOLD_READY_STEPS and self.untried_waiter(g.get("lastReason") or "", since):
                # held back by fair share for a pod kube-scheduler has not tried since the hold was
                # ready (this driver picks pods at random; kube-scheduler tries its active queue within
                # a cycle): the wait is the fair share's, not a starved hold's
                self.hold_ready_since[gang] = self.step
            elif self.step - since > HOLD_READY_STEPS:
                self.fail(
                    f"gang {gang}'s hold on {hold['nodes']} has been ready since step {since} and the gang "
                    f"has not started: {g.get('lastReason')!r}"
                )
        holding = {g["gang"] for g in self.debug if "amounts" in (g.get("hold") or {})}
        for gang in [g for g in self.hold_ready_since if g not in holding]:
            del self.hold_ready_since[gang]

    def untried_waiter(self, reason: str, since: int) -> bool:
        """Whether `reason` holds a gang back by fair share for a waiter (a pod, or a gang's members)
        that is pending and that kube-scheduler has not filtered since step `since`."""
        found = FAIR_SHARE_WAITER.search(reason)
        if found is None:
            return False
        pending = set(self.pending())
        names = [found[2]] if found[1] else [n for n, g in self.pod_gang.items() if g == found[2]]
        waiting = [n for n in names if n in pending]
        return bool(waiting) and all(self.filtered_at.get(n, -1) < since for n in waiting)

    def ranked_holds(self) -> list[tuple[str, dict]]:
        """(gang, its hold as /debug shows it) for every gang that holds, in rank order."""
        return sorted(
            ((g["gang"], g["hold"]) for g in self.debug if "amounts" in (g.get("hold") or {})),
            key=lambda gh: gh[1]["rank"],
        )

    def held_rooms(self, gang: str | None, prio: int) -> list[dict[str, dict[str, int]]]:
        """The per-node amounts of the holds a plan for `gang` (of priority `prio`) goes around: those
        ranked before its own when it holds; when it does not (None: a plain pod), every hold of a
        gang of at least its priority."""
        holds = self.ranked_holds()
        holding = gang is not None and any(holder == f"default/{gang}" for holder, _ in holds)
        out = []
        for holder, hold in holds:
            if gang is not None and holder == f"default/{gang}":
                break
            if holding or hold["priority"] >= prio:
                out.append(hold["amounts"])
        return out

    # ------------------------------------------------------------------ queues, from the API
    def queue_objects(self) -> dict[str, dict]:
        return {q["metadata"]["name"]: q for q in self.cluster.list("scheduling.run.ai", "Queue")}

    def queue_of(self, pod: dict, groups: dict[str, dict]) -> str:
        """The queue a pod counts in: its KAI PodGroup's spec.queue, else its label, else the default."""
        group = groups.get((pod["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION, ""))
        if group is not None:
            return group["spec"].get("queue") or "default-queue"
        return (pod["metadata"].get("labels") or {}).get(QUEUE_LABEL) or "default-queue"

    def queue_totals(
        self,
        pods: dict[str, dict],
        *,
        in_flight: bool = False,
        leaving_out: bool = False,
        held: bool = False,
    ) -> dict[str, int]:
        """queue -> cpu (millicores) of its bound unfinished pods and of the unbound pods /debug/gangs
        shows a reservation for, its descendants' included; with `in_flight`, the pods whose bind
        is in flight too (admitted already, not yet bound); with `held`, the room held for its
        waiting gangs (a hold is charged to its queue as the plan it becomes)."""
        queues = self.queue_objects()
        groups = {g["metadata"]["name"]: g for g in self.cluster.list("scheduling.run.ai", "PodGroup")}
        reserved = {pk.split("/", 1)[1] for g in self.debug for pk in (g.get("reservation") or {})}
        flying = self.in_flight() | set(self.api.inflight) if in_flight else set()
        own: collections.Counter[str] = collections.Counter()
        for n, p in pods.items():
            bound = p["spec"].get("nodeName")
            if leaving_out and leaving(p):
                continue  # evicted: what a reclaim may take counts it out as it starts to go
            if (bound and not finished(p)) or (not bound and (n in reserved or n in flying)):
                own[self.queue_of(p, groups)] += pod_requests(p).get("cpu", 0)
        for g in self.debug if held else ():
            hold = g.get("hold") or {}
            if hold.get("queue"):
                own[hold["queue"]] += int((hold.get("room") or {}).get("cpu", 0))
        totals: collections.Counter[str] = collections.Counter()
        for q, cpu in own.items():
            for ancestor in self.queue_chain(q, queues):
                totals[ancestor] += cpu
        return dict(totals)

    def check_reclaim(self, victim: dict, reason: str) -> None:
        """A reclaim never takes a queue, or any ancestor the reclaimer does not share, below its cpu
        quota (a quota of -1 is never reclaimed from). Use is counted as generously as the service
        may: bound, reserved and in flight; the victims already gone, or terminating (leaving, which a
        reclaim counts out of what it may take), are out of it."""
        queues = self.queue_objects()
        groups = {g["metadata"]["name"]: g for g in self.cluster.list("scheduling.run.ai", "PodGroup")}
        taker = re.search(r"of queue (\S+), below its fair share", reason)
        shared = set(self.queue_chain(taker.group(1), queues)) if taker else set()
        totals = self.queue_totals(self.pods(), in_flight=True, leaving_out=True)
        # what its going gives back: nothing, for a pod that neither runs nor holds room (a pending
        # member of a gang evicted whole)
        cpu = max(self.queue_totals({victim["metadata"]["name"]: victim}, in_flight=True).values(), default=0)
        for q in self.queue_chain(self.queue_of(victim, groups), queues):
            if q in shared:
                continue  # it gets back what the reclaimer takes
            res = ((queues[q].get("spec") or {}).get("resources") or {}).get("cpu") or {}
            quota = int(res.get("quota", 0))
            if quota == -1 or totals.get(q, 0) - cpu < quota:
                # raised at the next check: this runs inside the service's eviction, which logs faults
                self.broken_reclaims.append(
                    f"reclaim of {victim['metadata']['name']} ({cpu}m) takes queue {q} below its cpu quota "
                    f"{quota}m (in use {totals.get(q, 0)}m): {reason}"
                )

    @staticmethod
    def queue_chain(queue: str, queues: dict[str, dict]) -> list[str]:
        out: list[str] = []
        while queue in queues and queue not in out:
            out.append(queue)
            queue = queues[queue]["spec"].get("parentQueue") or ""
        return out

    def queue_use_detail(self, pods: dict[str, dict], queue: str) -> list[str]:
        """The pods counted in `queue` or below it, and how (bound, or reserved by which gang's plan)."""
        queues = self.queue_objects()
        groups = {g["metadata"]["name"]: g for g in self.cluster.list("scheduling.run.ai", "PodGroup")}
        holder = {pk.split("/", 1)[1]: g["gang"] for g in self.debug for pk in (g.get("reservation") or {})}
        out = []
        for n, p in sorted(pods.items()):
            q, seen = self.queue_of(p, groups), set()
            while q in queues and q != queue and q not in seen:
                seen.add(q)
                q = queues[q]["spec"].get("parentQueue") or ""
            if q != queue:
                continue
            if p["spec"].get("nodeName") and not finished(p):
                out.append(f"{n} bound")
            elif not p["spec"].get("nodeName") and n in holder:
                out.append(f"{n} reserved under {holder[n]}")
        return out

    async def check_queues(self, pods: dict[str, dict]) -> None:
        queues = self.queue_objects()
        if not queues:
            return
        totals = self.queue_totals(pods)
        flying = self.queue_totals(pods, in_flight=True, held=True)
        for name, obj in sorted(queues.items()):
            limit, total = queue_limit(obj), totals.get(name, 0)
            # within its limit, binds admitted already included: any allowance is spent
            if limit is None or flying.get(name, total) <= limit:
                self.over_limit.pop(name, None)
                continue
            if total <= limit:
                continue  # binds admitted already may take it over: judged when they land
            allowed = self.over_limit.get(name)
            if allowed is None or total > allowed:
                self.log(f"      {name}'s use: {self.queue_use_detail(pods, name)}")
                since = "" if allowed is None else f", {allowed}m when its limit was lowered"
                self.fail(
                    f"queue {name} (descendants included) uses {total}m cpu, above its limit {limit}m{since}"
                )
            # what it may reach from here: binds admitted already land later
            self.over_limit[name] = flying.get(name, total)

    # ------------------------------------------------------------------ the run
    async def run(self) -> None:
        await self.start(
            FlakyCluster(
                self.objects, faults=self.faults, api=self.api, bound_at=self.bound_at, clock=self.clock
            )
        )
        self.log(
            f"world: nodes {sorted(self.nodes())}; gangs "
            + "; ".join(
                f"{g.name} cpu={g.cpu} pods={g.size} min={g.min_member or g.subgroups} "
                f"rack={g.rack}" + (f" minSubGroup={g.min_subgroup}" if g.min_subgroup else "")
                for g in self.gangs
            )
            + f"; plain {self.plain}"
            + (
                f"; released at the first bind (own cycle: {sorted(self.own_cycle)})"
                if self.release_early
                else ""
            )
            + (f"; picky {sorted(self.picky)}" if self.picky else "")
        )
        await self.check()
        steps = [
            ("schedule", 34),
            ("clock", 16),
            ("let-run", 8),
            ("gain-resource", 5),
            ("cordon", 4),
            ("delete-node", 3),
            ("add-node", 3),
            ("unknown-resource", 3),
            ("replace", 5),
            ("recreate", 3),
            ("outage", 2),
            ("restart", 12 if self.kills else 2),
            ("orphans-land", 4),
            ("queue-edit", 3),
            ("preempt", 4),
            ("regroup", 3),
            ("annex", 2),
            ("succeed", 3),
            ("delete-finished", 2),
            ("grace-ends", 3),
            ("jobset-edit", 2),
            ("lease-moves", 3 if self.leased else 0),
        ]
        steps = [(k, w) for k, w in steps if k not in SKIP and w]
        kinds, weights = zip(*steps, strict=True)
        for self.step in range(1, STEPS + 1):
            kind = self.rng.choices(kinds, weights)[0]
            if self.following and kind in ("schedule", "unknown-resource", "preempt"):
                kind = "clock"  # the other replica's kube-scheduler leads: ours calls its sidecar no more
            if kind == "lease-moves":
                await self.move_lease()
            elif kind == "schedule":
                pending = self.pending()
                if pending:
                    picked = self.rng.sample(pending, min(len(pending), self.rng.randint(1, 5)))
                    mode = self.rng.choices(("all", "subset", "not-planned"), (6, 2, 2))[0]
                    # below the service's settle time (5 s): how long kube-scheduler may lag the watch
                    self.lag_s = self.lag_rng.choice((0.0, 0.0, 1.0, 3.0, 4.5))
                    self.log(f"schedule {picked} offering {mode}, kube-scheduler {self.lag_s}s behind")
                    await self.schedule(picked, mode)
                    self.lag_s = 0.0
            elif kind == "clock":
                await self.advance(self.rng.choice((0.5, 1.0, 2.0, 3.0, 5.5, 11.0)))
            elif kind == "let-run":
                self.log("the API server makes progress")
                self.api.progress()
            elif kind == "gain-resource":
                self.node_gains_resource()
            elif kind == "cordon":
                self.cordon_toggle()
            elif kind == "delete-node":
                self.delete_node()
            elif kind == "add-node":
                self.add_node()
            elif kind == "unknown-resource":
                self.log("schedule wants-foo (asks example.com/foo, which no node offers)")
                await self.schedule(["wants-foo"], "unknown")
            elif kind == "replace":
                self.replace_member()
            elif kind == "recreate":
                self.recreate()
            elif kind == "outage":
                self.outage()
            elif kind == "restart":
                await self.restart()
            elif kind == "orphans-land":
                await self.land_orphans()
            elif kind == "queue-edit":
                await self.queue_edit()
            elif kind == "preempt":
                await self.preempt()
            elif kind == "regroup":
                self.regroup()
            elif kind == "annex":
                self.annex()
            elif kind == "succeed":
                self.succeed()
            elif kind == "delete-finished":
                self.delete_finished()
            elif kind == "grace-ends":
                self.end_graces()
            elif kind == "jobset-edit":
                self.jobset_edit()
            if self.relabels and self.relabel_rng.random() < 0.06:
                self.relabel()
            if self.quorum_edits and self.quorum_rng.random() < 0.05:
                self.quorum_edit()
            if self.node_edits and self.node_rng.random() < 0.05:
                self.node_edit()
            self.owner_move()
            if self.faults.outage and self.step >= self.faults.outage_until:
                self.faults.outage = False
                self.log("API outage over")
            if self.rng.random() < 0.5:
                self.api.progress()
            await self.spin()
            await self.drain()
            if not self.following:
                await self.schedule_nudged()
                await self.drain()
            await self.check()
        if self.following:
            await self.move_lease()  # ours leads again for the end: every pending pod is scheduled
            await self.check()
        await self.settle()

    async def move_lease(self) -> None:
        """The Lease moves: to the other replica's kube-scheduler, or back to ours."""
        self.following = not self.following
        holder = LEASE_THEIRS if self.following else LEASE_OURS
        self.log(f"the Lease moves to {holder}")
        self.apply(lease_object(holder))
        await self.svc.expire(0)

    def note_write(self, what: str) -> None:
        """The embedded API server heard a write of the service's own (not a bind: kube-scheduler's)."""
        if self.following:
            self.follower_writes.append(f"step {self.step}: {what}")

    async def run_kill_mid_release(self) -> None:
        """The process is killed with every release's and plain pod's binding waiting at a slow API
        server; the next one lists the cluster and kube-scheduler retries the pods in another order
        while those bindings land one by one (or are lost) before the clock passes its fence."""
        await self.start(
            FlakyCluster(
                self.objects, faults=self.faults, api=self.api, bound_at=self.bound_at, clock=self.clock
            )
        )
        self.faults.fail_p = 0.0
        await self.advance(self.faults.fence_s + 0.5)  # past the first process's own fence
        self.faults.slow_p, self.faults.slow_ticks = 1.0, (10_000,)  # nothing lands before the kill
        for round_ in range(2):
            self.step += 1
            pending = self.pending()
            self.rng.shuffle(pending)
            self.log(f"before the kill, round {round_}: schedule {pending}")
            await self.schedule(pending, "all")
            await self.spin()
        self.step += 1
        await self.restart()
        self.faults.slow_p, self.faults.slow_ticks = 0.3, (1, 2)
        await self.check()
        kinds = ("schedule", "orphans-land", "let-run", "clock")
        for _ in range(20):
            self.step += 1
            kind = self.rng.choices(kinds, (6, 1, 2, 1))[0]
            if kind == "schedule":
                pending = self.pending()
                picked = self.rng.sample(pending, min(len(pending), self.rng.randint(1, 4)))
                self.log(f"schedule {picked}")
                await self.schedule(picked, self.rng.choice(("all", "subset")))
            elif kind == "orphans-land":
                # one at a time: the first may drop a plan before the next lands
                if self.api.orphans:
                    one = self.rng.choice(sorted(self.api.orphans, key=id))
                    self.log("one of the dead process's bindings reaches the API server")
                    self.api.land({one})
                    self.api.orphans.discard(one)
            elif kind == "let-run":
                self.api.progress()
            else:
                await self.advance(self.rng.choice((0.5, 1.0)))
            await self.spin()
            await self.check()
        await self.settle()

    async def settle(self) -> None:
        """No more faults or churn: schedule every pending pod until nothing changes."""
        self.faults.enabled = False
        self.faults.outage = False
        self.step += 1
        self.log("settle: faults and churn stop")
        self.api.progress(flush=True)
        await self.spin()
        self.land_evictions()
        self.owner_move(finish=True)  # a Job being deleted: the garbage collector finishes
        self.end_graces(every=True)
        self.recreate()
        stable, quiet = False, 0
        loop = asyncio.get_running_loop()
        for _ in range(SETTLE_ROUNDS):
            self.step += 1
            evictions = self.evictions_seen
            self.end_graces(every=True)  # what was evicted meanwhile goes
            self.recreate()  # and its controller creates it again
            await self.advance(GANG_WAIT_S + 0.5)  # barriers left waiting time out, backoffs start
            # past every backoff, and past every earlier bind's deadline; in steps, as a plan the
            # service makes meanwhile (a reclaim's, a preemption's) nudges its members, and
            # kube-scheduler takes a nudged pod from its queue at once
            for _ in range(6):
                await self.advance(10.2)
                await self.schedule_planned()
            until = loop.time() + 0.5
            while self.api.inflight and loop.time() < until:
                await asyncio.sleep(0.005)
            await self.check()
            before = dict(self.bound())
            pending = self.pending()
            self.rng.shuffle(pending)
            self.last_filter = {n: r for n, r in self.last_filter.items() if n == "wants-foo"}
            launched = len(self.binds)
            await self.schedule(pending, "all")
            started = len(self.binds) > launched
            until = loop.time() + 0.5
            while self.in_flight() and loop.time() < until:
                await asyncio.sleep(0.005)
            await self.check()
            # settled: two rounds in a row where no filter passed, nothing got bound, nothing was
            # evicted and no preemption or reclaim is under way (one is not enough: a barrier re-armed
            # during the round's clock moves can still be backing off; a reclaim that began in the
            # round's clock moves has victims still to go, and gangs of its queue's rivals held for it)
            busy = self.evictions_seen != evictions or bool(self.svc.scheduler.ledger.preemptions_now())
            quiet = quiet + 1 if not started and self.bound() == before and not busy else 0
            if quiet == 2:
                stable = True
                break
        await self.check(final=True)
        self.final_report(stable)

    def final_report(self, stable: bool) -> None:
        pods, nodes, bound = self.pods(), self.nodes(), self.bound()
        if not stable:
            churn = {n: (self.last_filter.get(n), self.last_bind.get(n)) for n in self.pending()}
            self.fail(f"not settled after {SETTLE_ROUNDS} rounds; pending pods (filter, bind): {churn}")
        if self.svc.store.reservations:
            self.fail(f"reservations left after settling: {sorted(self.svc.store.reservations)}")
        for name in self.pending():
            if (name == "wants-foo" and name not in self.last_filter) or self.last_filter.get(
                name
            ) == NO_ROOM:
                continue  # kube-scheduler's own filters stopped it: the extender was never asked
            if not self.last_filter.get(name) or self.last_filter[name].startswith("passed"):
                self.fail(f"pending pod {name} was not told why: last filter {self.last_filter.get(name)!r}")
        # what still fits, by our own arithmetic over the API's objects
        free: dict[str, collections.Counter[str]] = {}
        for n in self.schedulable():
            free[n] = collections.Counter(allocatable(nodes[n]))
        for name, node in bound.items():
            if node in free and not finished(pods[name]):
                free[node].subtract(pod_requests(pods[name]))

        def around(gang: str | None, prio: int) -> dict[str, collections.Counter[str]]:
            """`free` less the holds a plan for `gang` goes around (never below 0)."""
            seen = {n: collections.Counter(c) for n, c in free.items()}
            for amounts in self.held_rooms(gang, prio):
                for n, want in amounts.items():
                    for k, v in want.items():
                        if n in seen:
                            seen[n][k] = max(0, seen[n][k] - v)
            return seen

        def slots(req: dict[str, int], where: list[str], gang: str | None = None, prio: int = 0) -> int:
            seen = around(gang, prio)
            if gang is not None and gang in apart:  # one member per node, none beside a pod it shuns
                taken = {
                    node
                    for n, node in bound.items()
                    if (pods[n]["metadata"].get("labels") or {}).get(APART_LABEL) == gang
                    and not finished(pods[n])
                }
                return sum(
                    min(1, *(seen[n][k] // v for k, v in req.items() if v)) for n in where if n not in taken
                )
            return sum(min(seen[n][k] // v for k, v in req.items() if v) for n in where)

        apart = {g.name for g in self.gangs if g.apart}

        racks: dict[str, list[str]] = {}
        for n in free:
            racks.setdefault(nodes[n]["metadata"]["labels"].get(RACK_LABEL, ""), []).append(n)
        explain = {g["gang"]: g.get("lastReason") for g in self.debug}
        # a small gang fitting only in a large gang's rack (or the reverse) waits for its hold in its
        # own size class's racks: those drain only as their pods end, which none does once settled
        pooled_holders = {
            holder for holder, _ in self.ranked_holds() if "(size-class pools)" in (explain.get(holder) or "")
        }
        totals = self.queue_totals(pods, held=True)  # a hold is charged to its queue
        own_hold = {
            g["gang"]: int((g["hold"].get("room") or {}).get("cpu", 0))
            for g in self.debug
            if "amounts" in (g.get("hold") or {})
        }
        queues = self.queue_objects()
        groups = {o["metadata"]["name"]: o for o in self.cluster.list("scheduling.run.ai", "PodGroup")}

        def queue_room(queue: str, cpu: int, credit: int = 0) -> bool:
            """Whether `cpu` more millicores fit in the queue and every ancestor's limit (`credit`: the
            room held for the gang itself, charged already)."""
            seen: set[str] = set()
            while queue in queues and queue not in seen:
                seen.add(queue)
                limit = queue_limit(queues[queue])
                if limit is not None and totals.get(queue, 0) - credit + cpu > limit:
                    return False
                queue = queues[queue]["spec"].get("parentQueue") or ""
            return True

        for g in self.gangs:
            live = sorted(n for n in pods if self.pod_gang.get(n) == g.name)
            if not live:
                continue
            # a finished member counts toward its gang's quorum, deleted or not, where a record of it
            # outlives the pod; a deleted one nothing records is gone (its gang below quorum is stale)
            done = sorted(
                n for n, gang in self.gone_done.items() if gang == g.name and n in self.done_recorded
            )
            members = live + done
            if any(pods[n]["spec"].get("nodeSelector") for n in live):
                continue  # a picky member: the room counted below is not all the room it may use
            # the priority its pending members plan at (a 1.37 PodGroup's, else each pod's own: a pod
            # annexed into the gang keeps its own), the lowest: the holds that bind the most of them
            g_prio = min(self.rank(pods[n]) for n in live)
            # the largest member's request: a gang joined by other pods is not uniform
            req = {
                k: max(pod_requests(pods[n]).get(k, 0) for n in live)
                for n in live
                for k in pod_requests(pods[n])
            }
            in_queue = (
                g.queue if g.name not in groups else groups[g.name]["spec"].get("queue") or "default-queue"
            )
            bound_or_done = set(bound) | set(done)
            on = [n for n in members if n in bound_or_done]
            domains = list(free) if not g.rack else None
            if g.rack:
                running = [n for n in on if n in bound and not finished(pods[n])]
                pinned = {nodes[bound[n]]["metadata"]["labels"].get(RACK_LABEL) for n in running}
                # running members a relabel put in two racks: no rack can take the rest
                domains = (
                    (racks.get(next(iter(pinned)) or "", []) if len(pinned) == 1 else []) if pinned else None
                )
            # unit -> how many of its pods bind together (the quorum, or each subgroup's minMember)
            units: dict[str | None, int] = dict(g.subgroups) if g.subgroups else {None: g.min_member or 1}
            said = [self.last_filter.get(n) for n in members if n not in bound][:2]
            why = f"(filter said {said}; /debug/gangs says {explain.get('default/' + g.name)!r})"

            def where(
                unit: str | None,
                g: Gang = g,
                domains: list[str] | None = domains,
                members: list[str] = members,
            ) -> list[list[str]]:
                """The nodes a unit's next pods may go to: its own rack where each subgroup has one
                (the rack its running members pinned, or any one rack), else the gang's domain."""
                if not g.sub_rack or unit is None:
                    return [domains] if domains is not None else []
                pinned = {
                    nodes[bound[n]]["metadata"]["labels"].get(RACK_LABEL)
                    for n in members
                    if self.pod_sub.get(n) == unit and n in bound and not finished(pods[n])
                }
                if len(pinned) > 1:  # a relabel split its running members: no rack can take the rest
                    return [[]]
                return [racks.get(next(iter(pinned)) or "", [])] if pinned else list(racks.values())

            if not on:
                need = sum(units.values())
                if len(live) < need:
                    continue  # members moved to other gangs: it waits for pods, and says so
                # where each subgroup has its own rack, one rack that holds them all surely does
                options = [domains] if domains is not None and not g.sub_rack else list(racks.values())
                if not queue_room(in_queue, need * req.get("cpu", 0), own_hold.get(f"default/{g.name}", 0)):
                    continue  # its queue (or an ancestor) has no room for it under its limit
                if any(slots(req, d, g.name, g_prio) >= need for d in options):
                    if f"default/{g.name}" in pooled_holders:
                        continue  # its pool keeps it waiting, bounded by its hold (check_holds judges it)
                    if pooled_holders and "(size-class pools)" in (explain.get(f"default/{g.name}") or ""):
                        continue  # its pool keeps it waiting behind a pooled holder (kill seed 4576)
                    self.fail(f"gang {g.name}: its quorum of {need} fits but it is not bound {why}")
                continue
            if domains is None:
                continue  # a rack gang none of whose members runs: no rack to judge it in
            # while the gang's own quorum is short (a release the API half-refused), the ready
            # subgroups still short of their minMember bind together as one unit, never one by one
            short = {}
            for unit, need in units.items():
                unit_members = [n for n in members if unit is None or self.pod_sub[n] == unit]
                unit_on = [n for n in unit_members if n in bound_or_done]
                if len(unit_on) < need and len(unit_members) >= need:
                    short[unit] = need - len(unit_on)
            complete = sum(
                1
                for unit, need in units.items()
                if sum(1 for n in members if (unit is None or self.pod_sub[n] == unit) and n in bound_or_done)
                >= need
            )
            root_short = bool(g.subgroups) and complete < (g.min_subgroup or len(units))
            if root_short:
                want = sum(short.values())
                # the short units together: in a rack each of them may still take
                common: set[tuple[str, ...]] | None = None
                for unit in short:
                    opts = {tuple(d) for d in where(unit)}
                    common = opts if common is None else common & opts
                if (
                    short
                    and any(slots(req, list(d), g.name, g_prio) >= want for d in common or ())
                    and queue_room(in_queue, want * req.get("cpu", 0))
                ):
                    self.fail(
                        f"gang {g.name}: subgroups {sorted(map(str, short))} need {want} more pod(s) "
                        f"together, which fit beside its {len(on)} bound members, but are not bound {why}"
                    )
                units = {}
            for unit, need in units.items():
                unit_members = [n for n in members if unit is None or self.pod_sub[n] == unit]
                unit_on = [n for n in unit_members if n in bound_or_done]
                left = len(unit_members) - len(unit_on)
                # a unit short of its quorum needs the rest together; one at quorum, any one more
                want = need - len(unit_on) if len(unit_on) < need else 1
                if (
                    left >= want
                    and any(slots(req, d, g.name, g_prio) >= want for d in where(unit))
                    and queue_room(in_queue, want * req.get("cpu", 0))
                ):
                    self.fail(
                        f"gang {g.name}{'' if unit is None else ' subgroup ' + unit}: {want} more pod(s) fit "
                        f"beside its {len(unit_on)} bound members but are not bound {why}"
                    )
            partial = self.gang_state(g, bound)
            if partial:  # excused (else check() failed already), and its domain has no room left
                self.log(f"gang {g.name} stays partial, no room left in its domain: {partial}")
        for name in self.plain:
            if name in pods and name not in bound and name != "wants-foo":
                cpu = pod_requests(pods[name]).get("cpu", 0)
                if slots(pod_requests(pods[name]), list(free), None, priority(pods[name])) > 0 and queue_room(
                    self.queue_of(pods[name], groups), cpu
                ):
                    self.fail(
                        f"pod {name} fits but is not bound (filter said {self.last_filter.get(name)!r})"
                    )


@pytest.fixture
async def clients():
    made: list[TestClient] = []
    yield made
    for c in made:
        await c.close()


# Open defects the harness found that are not fixed yet (issue 21's follow-up), kept visible here
# rather than left out of the moves: each is expected to fail until its fix lands.
KNOWN_OPEN: dict[int, str] = {}


def _seed_param(seed: int) -> Any:
    reason = KNOWN_OPEN.get(seed)
    marks = [pytest.mark.xfail(reason=f"open defect: {reason}", strict=False)] if reason else []
    return pytest.param(seed, id=f"seed-{seed}", marks=marks)


@pytest.mark.parametrize("seed", [_seed_param(s) for s in SEEDS])
async def test_random_interleavings_keep_the_gang_invariants(seed, clients):
    await run_driver(Driver(seed, clients))


KILL_SEEDS = SEEDS[: max(1, len(SEEDS) // 2)]


@pytest.mark.parametrize("seed", KILL_SEEDS, ids=[f"seed-{s}" for s in KILL_SEEDS])
async def test_random_kills_with_bindings_in_flight_keep_the_gang_invariants(seed, clients):
    """The process killed often while most binds wait at a slow API server: its bindings land after
    the next process has listed the cluster (or are lost), while that process plans and binds."""
    await run_driver(Driver(seed, clients, kills=True))


# With queues, priorities and membership moves on, a kill mid-release still breaks a promise in about
# one seed of 80 (a gang split over racks, a fair-share hold that does not end): open defects of
# issue 21's follow-up; and a whole-rack gang preempting in the rack where a dead process's bindings land
# left the store's free capacity of a node negative at seed 53 of a 200-seed sweep (issue 24's session,
# with the holds' whole-rack gang then added to this test too; it is a feature, now off here).
# The default run keeps the fence's own promises (nodes, racks, partial gangs);
# INTERLEAVING_KILL_FEATURES=1 turns every feature on for the sweep that hunts the rest.
KILL_FEATURES = os.environ.get("INTERLEAVING_KILL_FEATURES") == "1"


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
async def test_killed_mid_release_its_bindings_land_after_the_restart(seed, clients):
    driver = Driver(seed, clients, features=KILL_FEATURES)
    await run_driver(driver, driver.run_kill_mid_release)


async def test_without_the_fence_the_same_kills_break_the_promise(clients):
    """What the fence is for, and that the test above can fail: with no fence, 17 of its first 40
    seeds over-commit a node or split a gang over racks. The order of concurrent HTTP calls makes a
    seed replay only nearly the same way, so this counts over 16 seeds (all pass: p < 0.0002)."""
    broken = []
    for seed in range(16):
        driver = Driver(seed, clients, fence_s=0.0, features=False)  # what the fence alone is for
        try:
            await run_driver(driver, driver.run_kill_mid_release)
        except Violation as exc:
            broken.append(str(exc).splitlines()[0])
    assert broken, "no seed broke the promise without the fence: the kill test has lost its teeth"
    # a node over-committed is seen on the API's binds, or a step sooner as the store's free capacity
    # gone negative (a landed orphan binding beside a bind the service has assumed but not yet landed)
    overcommit = ("over-committed", "free capacity", "must sit in one rack")
    assert all(any(o in b for o in overcommit) for b in broken), broken


async def run_driver(driver: Driver, run: Callable[[], Any] | None = None) -> None:
    watchdog = (
        asyncio.get_running_loop().create_task(driver.watchdog()) if "stall-watch" not in SKIP else None
    )
    # what the process held before this seed (pytest's, earlier seeds' garbage) is out of the cyclic
    # collector's passes, as the service's own heap is after its initial list (heap.settle): a pass
    # then scans what this seed made, and a stall it causes is this seed's
    gc.freeze()
    try:
        await (run or driver.run)()
    finally:
        if os.environ.get("INTERLEAVING_LOG_FILE"):
            with open(os.environ["INTERLEAVING_LOG_FILE"], "w") as f:
                f.write("\n".join(driver.lines))
        if watchdog is not None:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
        gc.unfreeze()
        for b in driver.binds:
            b.task.cancel()
        await asyncio.gather(*(b.task for b in driver.binds), return_exceptions=True)
        if hasattr(driver, "svc"):
            driver.cluster.dead = True  # the release's background binds end at once
        driver.api.land(driver.api.orphans)
        driver.api.progress(flush=True)


# ---------------------------------------------------------------------------- distilled from seeds
# Short, deterministic cases of what the seeds above found, where the issue's own scenario does not
# already say it: a new resource name breaks every path that gives a held reservation back (not
# only the barrier's expiry), and a member the API refused loses its place to another pod.


def _gang3(*, cpu: str = "2", rack: bool = False) -> list[dict]:
    pg = make_kai_podgroup("g", min_member=3, topology=RACK if rack else None)
    return [pg, *(gang_pod(f"g-{i}", "g", cpu=cpu) for i in range(3))]


def _wants_foo() -> dict:
    pod = make_pod("wants-foo", cpu="1")
    pod["spec"]["containers"][0]["resources"]["requests"][UNKNOWN] = "1"
    return pod


async def _new_resource_name(svc: Service, trigger: str) -> None:
    if trigger == "device-plugin":
        node = copy.deepcopy(svc.store.node("n002"))
        node["status"]["allocatable"]["example.com/dev-1"] = "4"
        node["status"]["capacity"]["example.com/dev-1"] = "4"
        svc.cluster.apply(node)
    else:
        doc = await svc.filter("wants-foo")
        assert doc["NodeNames"] == [] and not doc.get("Error")


async def _bind_whole(svc: Service, names: list[str]) -> dict[str, str]:
    """Filter each member, then bind them all at once; pod -> bind error ("" = bound)."""
    nodes = {}
    for n in names:
        node, reason = await svc.schedule(n)
        assert node, f"{n}: {reason}"
        nodes[n] = node
    tasks = [asyncio.create_task(svc.bind(n, nodes[n])) for n in names]
    try:
        errors = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return dict(zip(names, errors, strict=True))


async def _answered(tasks: list[asyncio.Task], after: str) -> list[str]:
    try:
        return await asyncio.wait_for(asyncio.gather(*tasks), 2)
    except TimeoutError:
        raise AssertionError(f"binds waiting at the barrier were never answered after {after}") from None


def _no_over_commit(svc: Service) -> None:
    used: dict[str, collections.Counter[str]] = {}
    for pod in svc.cluster.list("", "Pod"):
        if pod["spec"].get("nodeName"):
            used.setdefault(pod["spec"]["nodeName"], collections.Counter()).update(pod_requests(pod))
    for node, acc in used.items():
        alloc = allocatable(svc.cluster.get("", "Node", None, node))
        assert all(v <= alloc.get(k, 0) for k, v in acc.items()), f"{node} over-committed: {acc}"
    for node, row in svc.store.node_rows.items():
        assert (svc.store.arrays.free[row] >= 0).all(), f"the store's free capacity of {node} is negative"


@pytest.mark.parametrize("trigger", ["device-plugin", "unknown-resource"])
@pytest.mark.parametrize(
    "path", ["barrier-times-out", "planned-node-cordoned", "member-deleted", "barrier-completes"]
)
async def test_reservations_held_when_a_new_resource_name_appears_are_released_by_every_path(
    make_service, trigger, path
):
    svc = await make_service(
        [*rack_cluster(racks=1, nodes_per_rack=3), *_gang3(), _wants_foo()], gang_release_on_first_bind=False
    )
    await wait_ready(svc.client)
    members = ["g-0", "g-1", "g-2"]
    assert len((await svc.filter("g-0"))["NodeNames"]) == 1
    gangs = (await (await svc.client.get("/debug/gangs")).json())["gangs"]
    plan = {pk.split("/")[1]: node for g in gangs for pk, node in g["plan"].items()}
    assert {f"default/{m}" for m in plan} == set(svc.store.reservations) == {f"default/{m}" for m in members}
    waiting = []
    try:
        if path in ("barrier-times-out", "member-deleted"):
            waiting = [asyncio.create_task(svc.bind(m, plan[m])) for m in members[:2]]
            await asyncio.sleep(0.05)
            assert not any(t.done() for t in waiting)
        await _new_resource_name(svc, trigger)  # a new column while three pods hold capacity
        if path == "barrier-times-out":
            await svc.expire(GANG_WAIT_S + 0.1)
            errors = await _answered(waiting, "the barrier timed out")
            assert all("quorum did not reach bind" in e for e in errors), errors
            assert svc.store.reservations == {}
            await svc.expire(2.1)  # the backoff
        elif path == "planned-node-cordoned":
            node = copy.deepcopy(svc.store.node(plan["g-1"]))
            node["spec"]["unschedulable"] = True
            svc.cluster.apply(node)
            assert svc.store.reservations == {}
        elif path == "member-deleted":
            svc.cluster.delete("", "Pod", "default", "g-2")
            errors = await _answered(waiting, "a planned member was deleted")
            assert all("g-2 was deleted" in e for e in errors), errors
            assert svc.store.reservations == {}
            svc.cluster.apply(gang_pod("g-2", "g", cpu="2", uid="g-2-again"))
        errors = await _bind_whole(svc, members)
        assert errors == dict.fromkeys(members, ""), errors
        assert all(svc.node_of(m) for m in members)
        assert svc.store.reservations == {}
        _no_over_commit(svc)
    finally:
        for t in waiting:  # none may outlive the test: a stray task's exception trips pytest's report
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def test_a_member_the_api_refused_keeps_its_place_in_the_gangs_domain(clients):
    """One rack, exactly the gang's size: a plain pod must not take the refused member's node."""
    objects = [*rack_cluster(racks=1, nodes_per_rack=3, cpu="4"), topology("dc"), *_gang3(cpu="4", rack=True)]
    objects.append(make_pod("plain", cpu="4"))
    refused: set[str] = {"g-2"}

    class RefusesOnce(EmbeddedCluster):
        async def bind_pod(self, *, namespace, name, uid, node, persist_s=0.0):
            await asyncio.sleep(0)
            if name in refused:
                refused.discard(name)
                raise BindError("injected: the API server refused the binding (a conflict)")
            await super().bind_pod(namespace=namespace, name=name, uid=uid, node=node)

    clock, cluster = FakeClock(), RefusesOnce(objects)
    app = build_app(
        default_settings(gang_wait_s=GANG_WAIT_S, cluster_http_timeout_s=HTTP_TIMEOUT_S),
        source=cluster,
        clock=clock,
    )
    client = TestClient(TestServer(app))
    await client.start_server()
    clients.append(client)
    await wait_ready(client)
    svc = Service(client, cluster, clock)
    errors = await _bind_whole(svc, ["g-0", "g-1", "g-2"])
    assert errors["g-0"] == errors["g-1"] == "" and "refused" in errors["g-2"]
    doc = await svc.filter("plain")  # kube-scheduler sees a free node; the gang still holds it
    assert doc["NodeNames"] == [], "the refused member's capacity went to another pod"
    node, reason = await svc.schedule("g-2")
    assert node, reason
    assert await asyncio.wait_for(svc.bind("g-2", node), 5) == ""
    assert all(svc.node_of(f"g-{i}") for i in range(3))
    _no_over_commit(svc)
