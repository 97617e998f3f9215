"""The store's projection keeps every field the decisions read: the same decisions on whole objects
and on their projections, over the simulator's scenarios and a table of pods and nodes that use
each field the code reads."""

from __future__ import annotations

import asyncio
import copy
import types
from typing import Any

import numpy as np
import orjson
import pytest

from extender.grouping import derive_membership
from extender.model import nodematch, podaffinity, priority, resources
from extender.model.cycle import cycle_needed
from extender.scheduling import queues
from extender.scheduling.disruption import _created_s, _deleted_at, _how
from extender.scheduling.view import marked_unschedulable
from extender.sim import driver
from extender.sim.expand import expand
from extender.sim.scenario import builtin_scenario, preemption_scenario, queue_scenario
from extender.state import embedded, projection
from extender.state.projection import project, shared
from extender.state.store import ClusterStore, disruption_condition, is_live, is_terminal


def as_served(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as an API server returns it: managedFields, status, container images, env, probes."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
    meta.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    meta["generation"] = 3
    if obj.get("kind") == "Pod":
        spec = obj.setdefault("spec", {})
        for c in spec.get("containers") if isinstance(spec.get("containers"), list) else ():
            c.update(image="app:v1", command=["/app"], env=[{"name": "A", "value": "1"}])
            c.setdefault("ports", [{"containerPort": 1}])
        spec.setdefault("volumes", [{"name": "v", "emptyDir": {}}])
        spec.update(dnsPolicy="ClusterFirst", serviceAccountName="sa")
        status = obj.setdefault("status", {})
        if isinstance(status.get("conditions", []), list):
            status.setdefault("conditions", []).extend(
                {"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for t in ("Ready", "Initialized")
            )
        status.update(podIP="10.0.0.1", containerStatuses=[{"name": "c", "image": "app:v1", "ready": True}])
    if obj.get("kind") == "Node":
        status = obj.setdefault("status", {})
        status.setdefault("conditions", []).append(
            {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
        )
        status.update(images=[{"names": ["app:v1"], "sizeBytes": 1}], nodeInfo={"kubeletVersion": "v1"})
    return obj


def pod(
    name: str, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any
) -> dict:
    containers = [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
        "spec": {"containers": containers, **(spec or {})},
        "status": status or {"phase": "Pending"},
    }


def node(
    name: str, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"rack": "r1", "kubernetes.io/hostname": name}, **meta},
        "spec": spec or {},
        "status": status
        or {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


TERM = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
ANTI = {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}
PODS = [
    pod("plain"),
    pod("of another scheduler", {"schedulerName": "default-scheduler"}),
    pod("of ours", {"schedulerName": "gang-scheduler"}),
    pod("nominated", {"priority": 1000}, {"phase": "Pending", "nominatedNodeName": "n1"}),
    pod("never preempts", {"priority": 1000, "preemptionPolicy": "Never"}),
    pod("preempts", {"priority": 1000, "preemptionPolicy": "PreemptLowerPriority"}),
    pod("bound", {"nodeName": "n1"}, {"phase": "Running"}),
    pod("done", {"nodeName": "n1"}, {"phase": "Succeeded"}),
    pod("failed", {"nodeName": "n1"}, {"phase": "Failed"}),
    pod("gated", {"schedulingGates": [{"name": "g"}]}),
    pod(
        "deleting",
        {"nodeName": "n1"},
        deletionTimestamp="2026-01-01T00:01:00Z",
        deletionGracePeriodSeconds=30,
    ),
    pod("created", creationTimestamp="2026-01-01T00:00:00Z", resourceVersion="7"),
    pod(
        "unschedulable",
        status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    ),
    pod(
        "disrupted",
        {"nodeName": "n1"},
        {
            "phase": "Running",
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
                {"type": "PodScheduled", "status": "True"},
            ],
        },
    ),
    pod(
        "requests",
        {
            "containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "init", "resources": {"requests": {"memory": "64Gi"}}},
            ],
            "overhead": {"cpu": "100m"},
            "resources": {"requests": {"memory": "2Gi"}},
        },
    ),
    pod("host port", {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
    pod("host port, bound", {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"hostPort": 80}]}]}),
    pod("init host port", {"initContainers": [{"name": "i", "ports": [{"hostPort": 9}]}]}),
    pod("claims a volume", {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]}),
    pod("claims devices", {"resourceClaims": [{"name": "gpu", "resourceClaimName": "g"}]}),
    pod("spread", {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "rack"}]}),
    pod("placed", {"nodeSelector": {"rack": "r1"}, "tolerations": [{"key": "t", "operator": "Exists"}]}),
    pod(
        "affine",
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [TERM]}
                }
            }
        },
    ),
    pod(
        "anti",
        {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [ANTI]}}},
        labels={"app": "a"},
    ),
    pod("urgent", {"priority": 1000, "priorityClassName": "high", "preemptionPolicy": "Never"}),
    pod("kai", annotations={"pod-group-name": "pg", "other": "x"}, labels={"kai.scheduler/queue": "q"}),
    pod("native", {"schedulingGroup": {"podGroupName": "pg"}}),
    pod(
        "owned",
        ownerReferences=[
            {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "uid-job", "controller": True}
        ],
    ),
    pod("odd", {"containers": "not a list", "tolerations": {"not": "a list"}}, {"conditions": "not a list"}),
]
NODES = [
    node("n1"),
    node("tainted", {"taints": [{"key": "t", "effect": "NoSchedule"}]}),
    node("cordoned", {"unschedulable": True}),
    node(
        "notready", status={"allocatable": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "False"}]}
    ),
    node("capacity-only", status={"capacity": {"cpu": "8", "pods": "10"}}),
    node("going", deletionTimestamp="2026-01-01T00:00:00Z", uid="uid-going"),
]
OWNERS = [
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job", "namespace": "ns", "uid": "uid-job"},
        "spec": {"parallelism": 2, "template": {"spec": {"containers": []}}},
    },
    {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {"minMember": 2},
    },
]


def decisions(store: ClusterStore, p: dict[str, Any]) -> dict[str, Any]:
    """What the decisions read of a pod, through the functions that read it."""
    out: dict[str, Any] = {}
    for name, fn in [
        ("requests", resources.pod_requests),
        ("terms", nodematch.placement_terms),
        ("one per node", podaffinity.one_per_node),
        ("priority", priority.pod_priority),
        ("may preempt", priority.may_preempt),
        ("live", is_live),
        ("terminal", is_terminal),
        ("marked unschedulable", marked_unschedulable),
        ("disruption", disruption_condition),
        ("how", _how),
        ("deleted at", lambda o: _deleted_at(o.get("metadata") or {})),
        ("created", lambda o: _created_s(types.SimpleNamespace(obj=o))),
        ("membership", lambda o: repr(derive_membership(o, store))),
        ("eligible", lambda o: None if (m := store.eligible_mask(o)) is None else m.tolist()),
        ("another scheduler's", queues._another_schedulers),
        ("queue", lambda o: queues.named_queue(store, None, o)),
        ("nominated", lambda o: (o.get("status") or {}).get("nominatedNodeName")),
        # a bound pod is never released by a plan: its projection does not say
        ("cycle needed", lambda o: None if (o.get("spec") or {}).get("nodeName") else cycle_needed(o)),
    ]:
        try:
            out[name] = fn(p)
        except Exception as exc:  # a bad field must fail the same way on both
            out[name] = f"raises {type(exc).__name__}: {exc}"
    return out


def fed(objects: list[dict[str, Any]], transform: Any) -> ClusterStore:
    store = ClusterStore()
    for obj in objects:
        try:
            store.upsert(transform(obj))
        except Exception:  # the store refuses the same objects either way; compared below
            continue
    return store


def test_the_decisions_are_the_same_on_whole_objects_and_on_their_projections() -> None:
    served = [as_served(o) for o in [*NODES, *OWNERS, *PODS]]
    whole, cut = fed(served, lambda o: o), fed(served, project)
    assert whole.node_rows == cut.node_rows
    assert np.array_equal(whole.arrays.free, cut.arrays.free)
    assert np.array_equal(whole.arrays.schedulable, cut.arrays.schedulable)
    assert whole.tainted_rows == cut.tainted_rows
    # "odd" (containers not a list) is refused by the store either way
    assert set(whole.pods) == set(cut.pods) == {f"ns/{p['metadata']['name']}" for p in PODS} - {"ns/odd"}
    for key, rec in whole.pods.items():
        assert decisions(whole, rec.obj) == decisions(cut, cut.pods[key].obj), key
        assert rec.requests == cut.pods[key].requests, key
        assert repr(whole.membership(rec)) == repr(cut.membership(cut.pods[key])), key


@pytest.mark.parametrize(
    "obj", [*PODS, *NODES, *OWNERS], ids=lambda o: f"{o['kind']}-{o['metadata']['name']}"
)
def test_projection_drops_what_no_decision_reads(obj: dict[str, Any]) -> None:
    cut = project(as_served(obj))
    text = orjson.dumps(cut).decode()
    for dropped in ("managedFields", "last-applied-configuration", "image", "env", "volumes", "nodeInfo"):
        assert dropped not in text
    assert project(cut) == cut, "a projection projects to itself"
    if obj["kind"] != "Job":
        assert "generation" not in cut["metadata"] or obj["kind"] not in ("Pod", "Node")


def test_equal_parts_are_kept_once_and_are_no_source_object() -> None:
    a, b = (
        as_served(pod("a", {"tolerations": [{"key": "t"}]})),
        as_served(pod("b", {"tolerations": [{"key": "t"}]})),
    )
    store = ClusterStore()
    store.upsert(project(a))
    store.upsert(project(b))
    pa, pb = store.get("", "Pod", "ns", "a"), store.get("", "Pod", "ns", "b")
    assert pa is not None and pb is not None
    assert pa["spec"]["tolerations"] is pb["spec"]["tolerations"]
    assert pa["spec"]["containers"] is pb["spec"]["containers"]
    assert pa["spec"]["tolerations"] is not a["spec"]["tolerations"]
    a["spec"]["tolerations"][0]["key"] = "edited in place by its source"
    assert pb["spec"]["tolerations"] == [{"key": "t"}]
    assert shared([]) == [] and shared("text") == "text"


def scenario_result(objects: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, cut: bool) -> Any:
    """Where each pod ends and how, and the problems found. Not how many attempts each took: the
    simulation's clock is real time plus its jumps, so how often a pod is tried before its room
    frees follows the machine's load (one more attempt of a queue scenario's gang in about one run
    in five on a busy machine, on whole objects as on projections alike)."""
    monkeypatch.setattr(embedded, "project", projection.project if cut else lambda o: o)
    result = asyncio.run(driver.simulate([as_served(o) for o in objects], seed=3))
    return sorted((p.namespace, p.name, p.node, p.outcome.value) for p in result.pods), result.problems


@pytest.mark.parametrize(
    "scenario", [builtin_scenario, preemption_scenario, queue_scenario], ids=lambda s: s.__name__
)
def test_scenarios_schedule_the_same_on_projections(scenario: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = scenario()
    assert any(o.get("kind") == "Pod" for o in expand(objects).objects)
    assert scenario_result(objects, monkeypatch, cut=True) == scenario_result(objects, monkeypatch, cut=False)


@pytest.mark.parametrize(
    ("kind", "objs"),
    [("Pod", PODS), ("Node", NODES)],
)
def test_a_list_page_decoded_to_the_kept_fields_projects_as_the_whole_page(kind: str, objs: list) -> None:
    """Every object alone on a page, then all together: the page decoder's items project exactly as
    the whole objects do; a page with a part of another shape is left to the whole decode."""
    decode = projection.page_decoder(kind)
    assert decode is not None and projection.page_decoder("Job") is None
    served = [as_served(o) for o in objs]
    pages = [[o] for o in served] + [served]
    odd = 0
    for page in pages:
        data = orjson.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "9"}, "items": page})
        doc = decode(data)
        if doc is None:
            odd += 1
            continue
        assert doc["metadata"] == {"resourceVersion": "9"}
        assert [project(i) for i in doc["items"]] == [project(copy.deepcopy(o)) for o in page]
        # the parts read only for a pending pod's cycle stay undecoded (msgspec.Raw) until projected
        assert "managedFields" not in orjson.dumps(doc, default=lambda raw: bytes(raw).decode()).decode()
    assert odd == (2 if kind == "Pod" else 0), "only the page holding the odd pod needs the whole decode"
    assert decode(b'{"items": [1]}') is None and decode(b"not json") is None
