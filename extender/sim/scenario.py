"""The simulator's inputs: manifest files, the seed scenario, and the contention scenario.

The built-in scenario is the built-in cluster, every manifest in extender/scenarios/seed/*.yaml
(in file-name order), and the contention scenario: two rack-constrained gangs that each need five
whole a100 nodes. Ten a100 nodes exist, but only rack b0-r3 has five of them, so exactly one gang
can be placed; the other must wait whole, never half-bound.

The preemption scenario runs on its own small cluster (two racks of four 8-GPU nodes, every node
half taken by low-priority gangs already running): a priority-1000 JobSet that needs a whole rack
arrives, evicts the cheapest gangs whole and lands in the rack they freed.

The queue scenario runs on its own small cluster too (two racks of three 8-GPU nodes) with two KAI
queues. team-b, alone first, already runs five 8-GPU gangs (40 of the 48 GPUs, far over its quota of
8). Then, in this order: team-a (quota 8, limit 12) submits a 4-GPU gang, which takes half of the
free node; team-b asks for another 8-GPU gang, held by fair share while team-a, below its share,
waits for the same capacity; team-a submits two 8-GPU gangs. The first is within team-a's fair share
but fits nowhere (4 GPUs are free), so it reclaims one whole team-b gang; the second would take
team-a past its limit and is held. Both queues end with a gang waiting for the same 4 free GPUs.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

import yaml

from extender.sim.cluster import BLOCK, GPU, HOSTNAME, POOL, RACK, build_cluster, node
from extender.sim.expand import DEFAULT_SCHEDULER

SEED_DIR = pathlib.Path(__file__).resolve().parent.parent / "scenarios" / "seed"
CONTENTION_PODS = 5
CONTENTION_GPUS = 8
PREEMPTION_NS = "preemption"
PREEMPTION_RACKS = ("p-r0", "p-r1")
PREEMPTION_NODES_PER_RACK = 4
PREEMPTION_PODS = 8  # of the high-priority JobSet, 4 GPUs each: a whole rack once half of it is freed
# low-priority gangs already running, each pod on its own node with 4 of its 8 GPUs:
# (name, priority class, rack, first node index, pods)
PREEMPTION_VICTIMS = (
    ("batch-a", "low", "p-r0", 0, 2),
    ("batch-b", "low", "p-r0", 2, 2),
    ("research", "medium", "p-r1", 0, 4),
)
PRIORITY_CLASSES = (("low", 100), ("medium", 500), ("urgent", 1000))
QUEUE_NS = "queues"
QUEUE_RACKS = ("q-r0", "q-r1")
QUEUE_NODES_PER_RACK = 3
# KAI Queue gpu resources: (name, quota, limit, overQuotaWeight); a limit of -1 is no limit
QUEUES = (("team-a", 8, 12, 1), ("team-b", 8, -1, 1))
# team-b's gangs already running, one 8-GPU node each: 2 pods of 4 GPUs
QUEUE_RUNNING = tuple(f"b{i}" for i in range(1, 6))
QUEUE_RUNNING_SHAPE = (2, 4)  # (pods, GPUs per pod)
# gangs still to be placed, in the order they are queued: (name, queue, pods, GPUs per pod)
QUEUE_PENDING = (
    ("a1", "team-a", 2, 2),
    ("b6", "team-b", 2, 4),
    ("a2", "team-a", 4, 2),
    ("a3", "team-a", 4, 2),
)


class ScenarioError(ValueError):
    """A manifest file that cannot be read; the message names the file and what to do."""


def load_objects(paths: list[str]) -> list[dict[str, Any]]:
    """Objects from YAML streams or JSON files, `kind: List` flattened, empty documents dropped."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        p = pathlib.Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read ({exc.strerror or exc}); check the path") from None
        try:
            if p.suffix == ".json":
                docs = [json.loads(text)]
            else:
                docs = list(yaml.safe_load_all(text))
        except (yaml.YAMLError, json.JSONDecodeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ScenarioError(f"{path}: not valid YAML/JSON ({first})") from None
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ScenarioError(f"{path}: document {i + 1} is not a Kubernetes object (a map)")
            if doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
                items = doc.get("items") or []
                if not isinstance(items, list):
                    raise ScenarioError(f"{path}: document {i + 1}: items must be a list")
                objects.extend(items)
            else:
                objects.append(doc)
    return objects


def seed_paths() -> list[str]:
    return [str(p) for p in sorted(SEED_DIR.glob("*.yaml"))]


def contention_scenario() -> list[dict[str, Any]]:
    """Two JobSets, each one rack-constrained gang of five pods that each take a whole a100 node."""
    return [_contention_jobset(name) for name in ("contention-a", "contention-b")]


def builtin_scenario() -> list[dict[str, Any]]:
    return [*build_cluster(), *load_objects(seed_paths()), *contention_scenario()]


def with_cluster(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`objects` on the built-in cluster when they bring no Node of their own."""
    if any(isinstance(o, dict) and o.get("kind") == "Node" for o in objects):
        return objects
    return [*build_cluster(), *objects]


def _contention_jobset(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "contention"},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "scheduling": {
                "schedulingPolicy": {"gang": {}},
                "schedulingConstraints": {"topology": [{"key": RACK}]},
            },
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": CONTENTION_PODS,
                            "completions": CONTENTION_PODS,
                            "completionMode": "Indexed",
                            "template": {
                                "spec": {
                                    "restartPolicy": "OnFailure",
                                    "nodeSelector": {POOL: "a100"},
                                    "tolerations": [
                                        {
                                            "key": POOL,
                                            "operator": "Equal",
                                            "value": "a100",
                                            "effect": "NoSchedule",
                                        }
                                    ],
                                    "containers": [
                                        {
                                            "name": "trainer",
                                            "image": "sleep:v0.1.0",
                                            "command": ["sleep", "60s"],
                                            "resources": {
                                                "requests": {"cpu": "4", "memory": "16Gi"},
                                                "limits": {GPU: str(CONTENTION_GPUS)},
                                            },
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _gpu_racks(block: str, racks: Sequence[str], per_rack: int) -> list[dict[str, Any]]:
    """A small scenario's own cluster: `per_rack` 8-GPU nodes named `<rack>-n<i>` in each rack."""
    objects: list[dict[str, Any]] = []
    for rack in racks:
        for i in range(per_rack):
            name = f"{rack}-n{i}"
            labels = {BLOCK: block, RACK: rack, HOSTNAME: name}
            alloc = {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "8"}
            objects.append(node(name, labels=labels, allocatable=alloc))
    return objects


def preemption_scenario() -> list[dict[str, Any]]:
    """Its own cluster, the PriorityClasses, the running low-priority gangs and the urgent JobSet."""
    objects = _gpu_racks("p", PREEMPTION_RACKS, PREEMPTION_NODES_PER_RACK)
    values = dict(PRIORITY_CLASSES)
    for pc, value in PRIORITY_CLASSES:
        objects.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc},
                "value": value,
                "preemptionPolicy": "PreemptLowerPriority",
            }
        )
    for name, pc, rack, first, pods in PREEMPTION_VICTIMS:
        objects.append(
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": PREEMPTION_NS},
                "spec": {"minMember": pods, "queue": "default-queue"},
            }
        )
        for i in range(pods):
            objects.append(_running_member(name, i, f"{rack}-n{first + i}", pc, values[pc]))
    objects.append(_urgent_jobset())
    return objects


def _running_member(group: str, i: int, node_name: str, priority_class: str, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{group}-{i}",
            "namespace": PREEMPTION_NS,
            "annotations": {"pod-group-name": group},
        },
        "spec": {
            "schedulerName": DEFAULT_SCHEDULER,
            "nodeName": node_name,
            "priorityClassName": priority_class,
            "priority": priority,
            "containers": [
                {
                    "name": "main",
                    "image": "sleep:v0.1.0",
                    "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {GPU: "4"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def _urgent_jobset() -> dict[str, Any]:
    js = _contention_jobset("urgent")
    js["metadata"]["namespace"] = PREEMPTION_NS
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod["parallelism"] = pod["completions"] = PREEMPTION_PODS
    spec = pod["template"]["spec"]
    spec.pop("nodeSelector")
    spec.pop("tolerations")
    spec["priorityClassName"] = "urgent"
    spec["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {GPU: "4"}}
    return js


def queue_scenario() -> list[dict[str, Any]]:
    """Its own cluster, the two Queues, team-b's running gangs and the gangs still to be placed."""
    nodes = [f"{rack}-n{i}" for rack in QUEUE_RACKS for i in range(QUEUE_NODES_PER_RACK)]
    objects = _gpu_racks("q", QUEUE_RACKS, QUEUE_NODES_PER_RACK)
    for name, quota, limit, weight in QUEUES:
        objects.append(
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"resources": {"gpu": {"quota": quota, "limit": limit, "overQuotaWeight": weight}}},
            }
        )
    pods, gpus = QUEUE_RUNNING_SHAPE
    for i, group in enumerate(QUEUE_RUNNING):
        objects.append(_queue_podgroup(group, "team-b", pods))
        objects.extend(_queue_member(group, j, gpus, node_name=nodes[i]) for j in range(pods))
    for group, queue, pods, gpus in QUEUE_PENDING:
        objects.append(_queue_podgroup(group, queue, pods))
        objects.extend(_queue_member(group, j, gpus, node_name=None) for j in range(pods))
    return objects


def _queue_podgroup(name: str, queue: str, pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": QUEUE_NS},
        "spec": {"minMember": pods, "queue": queue},
    }


def _queue_member(group: str, i: int, gpus: int, *, node_name: str | None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{i}", "namespace": QUEUE_NS, "annotations": {"pod-group-name": group}},
        "spec": {
            "schedulerName": DEFAULT_SCHEDULER,
            "containers": [
                {
                    "name": "main",
                    "image": "sleep:v0.1.0",
                    "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {GPU: str(gpus)}},
                }
            ],
        },
    }
    if node_name:
        pod["spec"]["nodeName"] = node_name
        pod["status"] = {"phase": "Running"}
    return pod
