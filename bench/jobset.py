"""What one large JobSet costs each call: a JobSet of N replicatedJobs (one Job, one pod each, KAI's
derived gang: one subgroup per replicatedJob and per Job) scheduled member by member, while its
controller keeps relabelling its Jobs.

    python -m bench jobset [--quick] [--rjs 1000] [--replicas 1] [--touch-every 10]

In one process, over an embedded cluster, the scheduler driven directly as the server drives it (no
HTTP): each member is filtered and bound in turn (the last bind releases the gang); every
`--touch-every` members one of its Jobs changes (a label), which is a grouping change. Wall time per
call, in ms: filter, bind (the waiting binds and the releasing one), and the event of a Job change
(the store re-deriving the pods that read it). Every call must stay far below kube-scheduler's
httpTimeout (10 s by default); before the membership index was kept by events, a bind waiting at the
barrier of a 1000-replicatedJob JobSet was answered after 22-24 s.

Each line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from typing import Any

from extender import placement
from extender.model import labels as keys
from extender.scheduling.decisions import BindVerdict, Verdict
from extender.scheduling.ledger import GangLedger
from extender.scheduling.scheduler import Scheduler
from extender.state import heap
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore

NS = "default"
PODS_PER_NODE = 100


def _node(i: int) -> dict[str, Any]:
    alloc = {"cpu": "128", "memory": "512Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i:04d}", "labels": {"kubernetes.io/hostname": f"node-{i:04d}"}},
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def workload(
    n_rjs: int, replicas: int = 1
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The JobSet, its Jobs and its pods, with the owner references and labels the controllers write:
    `n_rjs` replicatedJobs of `replicas` Jobs each, one pod a Job."""
    pod_spec = {
        "schedulerName": "gang-scheduler",
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": NS, "uid": "big-uid"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"rj{i}",
                    "replicas": replicas,
                    "template": {"spec": {"parallelism": 1, "template": {"spec": pod_spec}}},
                }
                for i in range(n_rjs)
            ]
        },
    }
    jobs, pods = [], []
    for i in range(n_rjs):
        for r in range(replicas):
            labels = {keys.JOBSET_NAME: "big", keys.REPLICATED_JOB_NAME: f"rj{i}", keys.JOB_INDEX: str(r)}
            job_name, job_uid = f"big-rj{i}-{r}", f"job-{i}-{r}"
            jobs.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": job_name,
                        "namespace": NS,
                        "uid": job_uid,
                        "labels": dict(labels),
                        "ownerReferences": [_ref(jobset)],
                    },
                    "spec": {"parallelism": 1, "template": {"spec": pod_spec}},
                }
            )
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job_name}-x",
                        "namespace": NS,
                        "uid": f"pod-{i}-{r}",
                        "labels": {**labels, keys.JOB_NAME: job_name},
                        "ownerReferences": [_ref(jobs[-1])],
                    },
                    "spec": copy.deepcopy(pod_spec),
                    "status": {"phase": "Pending"},
                }
            )
    return jobset, jobs, pods


def _ref(owner: dict[str, Any]) -> dict[str, Any]:
    m = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": m["name"],
        "uid": m["uid"],
        "controller": True,
    }


def _node_of(cluster: EmbeddedCluster, name: str) -> str | None:
    pod = cluster.get("", "Pod", NS, name)
    return pod["spec"].get("nodeName") if pod is not None else None


def _ms(seconds: float) -> float:
    return round(1000 * seconds, 3)


def _stats(name: str, samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        f"{name}_p50_ms": _ms(statistics.median(ordered)),
        f"{name}_p99_ms": _ms(p99),
        f"{name}_max_ms": _ms(ordered[-1]),
    }


def measure(n_rjs: int, touch_every: int, replicas: int = 1) -> dict[str, object]:
    store = ClusterStore()
    cluster = EmbeddedCluster([_node(i) for i in range(n_rjs * replicas // PODS_PER_NODE + 1)])
    cluster.attach(store)
    ledger = GangLedger(
        store,
        wait_s=600,
        hold_s=600,
        backoff_initial_s=2,
        backoff_max_s=60,
        clock=time.monotonic,
        release_on_first_bind=False,  # the barrier, as every earlier figure: the last bind releases the gang
    )
    scheduler = Scheduler(store, ledger)
    placement.warm_up()  # as the server does before it reports ready: no call pays numba's loading
    heap.settle()  # as the server does once its first list is in: the JobSet comes after
    jobset, jobs, pods = workload(n_rjs, replicas)
    t0 = time.perf_counter()
    for obj in (jobset, *jobs, *pods):
        cluster.apply(obj)
    load_s = time.perf_counter() - t0
    nodes = sorted(store.node_rows)
    filters: list[float] = []
    binds: list[float] = []
    touches: list[float] = []
    released = False
    for i, pod in enumerate(pods):
        if touch_every and i % touch_every == 0:
            job_name = jobs[(i * 7) % len(jobs)]["metadata"]["name"]
            job = copy.deepcopy(cluster.get("batch", "Job", NS, job_name))
            job["metadata"]["labels"]["touched"] = str(i)
            t0 = time.perf_counter()
            cluster.apply(job)
            touches.append(time.perf_counter() - t0)
        name = pod["metadata"]["name"]
        live = cluster.get("", "Pod", NS, name)
        t0 = time.perf_counter()
        decision = scheduler.filter(live, nodes)
        filters.append(time.perf_counter() - t0)
        if decision.verdict is not Verdict.PASS:
            raise RuntimeError(f"{name} was not planned: {decision.reason}")
        t0 = time.perf_counter()
        bound = scheduler.bind(namespace=NS, name=name, uid=live["metadata"]["uid"], node=decision.passed[0])
        binds.append(time.perf_counter() - t0)
        if bound.verdict is BindVerdict.RELEASE:
            released = True
            for m in bound.members:
                member = cluster.get("", "Pod", NS, m.pod.split("/")[1])
                cluster.apply({**member, "spec": {**member["spec"], "nodeName": m.node}})
            scheduler.release_done(bound.gang, {m.pod: "" for m in bound.members})
    row: dict[str, object] = {
        "bench": "jobset",
        "replicated_jobs": n_rjs,
        "replicas": replicas,
        "touch_every": touch_every,
        "released": released,
        "bound": sum(1 for p in pods if _node_of(cluster, p["metadata"]["name"])),
        "load_ms": _ms(load_s),
    }
    row.update(_stats("filter", filters))
    row.update(_stats("bind", binds))
    row.update(_stats("job_change", touches))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench jobset", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 replicatedJobs")
    parser.add_argument("--rjs", default=None, help="comma-separated JobSet sizes (default 1000)")
    parser.add_argument(
        "--touch-every", type=int, default=10, help="a Job changes every N members (0: never)"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="Jobs per replicatedJob (default 1; 1 x 9999 is KAI's largest)",
    )
    args = parser.parse_args(argv)
    try:
        sizes = [int(x) for x in (args.rjs or ("200" if args.quick else "1000")).split(",")]
    except ValueError:
        parser.error("--rjs: expected comma-separated integers, e.g. 200,1000")
    if any(n < 1 for n in sizes):
        parser.error("--rjs: sizes must be positive")
    if args.touch_every < 0:
        parser.error("--touch-every: must be 0 or more")
    if args.replicas < 1:
        parser.error("--replicas: must be 1 or more")
    for n in sizes:
        print(json.dumps(measure(n, args.touch_every, args.replicas)), flush=True)
    return 0
