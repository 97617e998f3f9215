"""KubeClusterSource against a real kube-apiserver (1.20.2, then 1.36.2): list+watch into a store, 410
relist, and writes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.state.kube import (
    DEFAULT_KINDS,
    KubeClusterSource,
    KubeSettings,
    WatchedKind,
    _Cursor,
    _Gone,
    lease_kind,
)
from extender.state.source import BindError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from controlplane.fixtures import plane_fixture, plane_version_fixture  # noqa: F401 - every version, in turn
from controlplane.start import ControlPlane, wait_until

pytestmark = pytest.mark.e2e

FAST = KubeSettings(watch_timeout_s=2, backoff_initial_s=0.05, backoff_max_s=0.2, write_backoff_s=0.01)


class RecordingStore:
    """The three store methods the source calls, recorded in order, with a way to await a record."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, str, Any]] = []
        self._changed = asyncio.Event()
        self.listed: frozenset[tuple[str, str]] | None = None  # set by the source after discovery

    def now_lists(self, kind: tuple[str, str]) -> None:
        """A kind found served after start-up, its first list applied."""
        self.listed = (self.listed or frozenset()) | {kind}
        self._record(("now-lists", kind[1], kind[0], None))

    def _record(self, op: tuple[str, str, str, Any]) -> None:
        self.ops.append(op)
        self._changed.set()

    def upsert(self, obj: dict[str, Any]) -> None:
        self._record(("upsert", obj["kind"], obj["metadata"]["name"], obj))

    def remove(self, obj: dict[str, Any]) -> None:
        self._record(("remove", obj["kind"], obj["metadata"]["name"], obj))

    def unlisted(self, group: str, kind: str, listed: set[str]) -> list[dict[str, Any]]:
        """The end of a list: it had `listed` (keys); this store holds nothing to remove."""
        self._record(("listed", kind, group, sorted(listed)))
        return []

    async def wait_for(
        self, pred: Callable[[tuple[str, str, str, Any]], bool], *, timeout_s: float = 10
    ) -> Any:
        async def seen() -> Any:
            while True:
                for op in self.ops:
                    if pred(op):
                        return op
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(seen(), timeout_s)


@pytest.fixture
def namespace(plane: ControlPlane) -> str:
    name = f"kube-source-{uuid.uuid4().hex[:6]}"
    plane.api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


@pytest.fixture(scope="module")
def node(plane: ControlPlane) -> str:
    """A node the scheduler never picks (unschedulable); binding through the API ignores that."""
    name = "kube-source-node"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"unschedulable": True}}
    plane.api.create("/api/v1/nodes", body, exist_ok=True)
    return name


@contextlib.asynccontextmanager
async def running(
    plane: ControlPlane, settings: KubeSettings = FAST, **kwargs: Any
) -> AsyncIterator[tuple[KubeClusterSource, RecordingStore]]:
    source = KubeClusterSource(plane.kubeconfig, settings=settings, **kwargs)
    store = RecordingStore()
    task = asyncio.create_task(source.run(store))
    try:
        yield source, store
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await source.close()


def make_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        # The default scheduler does not run here, so nothing but the test binds this pod.
        "spec": {"containers": [{"name": "c", "image": "sleep:v0.1.0"}]},
    }
    return plane.api.create(f"/api/v1/namespaces/{namespace}/pods", pod)


async def started(source: KubeClusterSource) -> None:
    async def synced() -> None:
        while not source.is_synced():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(synced(), 10)


async def test_syncs_served_kinds_and_skips_the_ones_the_server_lacks(plane: ControlPlane) -> None:
    async with running(plane) as (source, store):
        await started(source)
        served = {(k.group, k.kind): k.version for k in source.served_kinds()}
        listed = {(op[2], op[1]) for op in store.ops if op[0] == "listed"}
        # the store knows what it holds every object of: an owner of another kind absent is no sign
        assert store.listed == frozenset(served)
    expected = {
        ("", "Node"): "v1",
        ("", "Pod"): "v1",
        ("batch", "Job"): "v1",
        ("jobset.x-k8s.io", "JobSet"): "v1alpha2",
        ("kubeflow.org", "PyTorchJob"): "v1",
        ("scheduling.run.ai", "PodGroup"): "v2alpha2",
        ("kai.scheduler", "Topology"): "v1alpha1",
        ("scheduling.run.ai", "Queue"): "v2",
    }
    # the tier's 1.36 serves the Workload API as v1alpha2; 1.37 as v1beta1 and v1alpha3, and the source
    # reads the newest
    workload_api = {"1.20.2": None, "1.36.2": "v1alpha2", "1.37.2": "v1beta1"}[plane.version]
    if workload_api:
        expected[("scheduling.k8s.io", "PodGroup")] = workload_api
        expected[("scheduling.k8s.io", "Workload")] = workload_api
    if plane.version == "1.37.2":  # CompositePodGroup is v1alpha3 only (gate CompositePodGroup)
        expected[("scheduling.k8s.io", "CompositePodGroup")] = "v1alpha3"
    assert served == expected, (
        "1.20 serves no scheduling.k8s.io PodGroup, the tier's 1.36 serves v1alpha2, 1.37 v1beta1; "
        "every upstream CRD the tier applies is served"
    )
    assert listed == set(served), "every served kind is listed before the source reports synced"


async def test_a_kind_served_after_start_up_is_found_listed_and_watched(
    plane: ControlPlane, namespace: str
) -> None:
    """A CRD installed after the service started (KAI's or JobSet's, installed second): discovery is
    asked again, the kind is listed and watched, and the store told it now holds all of it."""
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    widget = WatchedKind(group, ("v1",), "widgets", "Widget")
    pods = next(k for k in DEFAULT_KINDS if k.kind == "Pod")
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    widgets = f"/apis/{group}/v1/namespaces/{namespace}/widgets"

    def widget_obj(name: str) -> dict[str, Any]:
        return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name}}

    settings = dataclasses.replace(FAST, rediscovery_s=0.1)
    try:
        async with running(plane, settings, kinds=(pods, widget)) as (source, store):
            await started(source)
            assert store.listed == frozenset({("", "Pod")})
            plane.api.create(crds, crd)

            def made() -> bool:
                try:
                    plane.api.create(widgets, widget_obj("w1"))
                except AssertionError:  # 404 until the CRD is established
                    return False
                return True

            wait_until(made, timeout_s=30, what="the first Widget created")
            await store.wait_for(lambda op: op[:3] == ("upsert", "Widget", "w1"), timeout_s=20)
            await store.wait_for(lambda op: op[0] == "now-lists", timeout_s=20)
            assert store.listed == frozenset({("", "Pod"), (group, "Widget")})
            assert {(k.group, k.kind) for k in source.served_kinds()} == {("", "Pod"), (group, "Widget")}
            plane.api.create(widgets, widget_obj("w2"))  # and watched from then on
            await store.wait_for(lambda op: op[:3] == ("upsert", "Widget", "w2"), timeout_s=20)
            assert [op[0] for op in store.ops].count("now-lists") == 1
    finally:
        plane.api.delete(f"{crds}/widgets.{group}")


async def test_watch_feeds_creates_updates_and_deletes(plane: ControlPlane, namespace: str) -> None:
    make_pod(plane, namespace, "before")
    async with running(plane) as (source, store):
        await started(source)
        listed = next(op for op in store.ops if op[0] == "listed" and op[1] == "Pod")
        assert f"{namespace}/before" in listed[3]
        make_pod(plane, namespace, "after")
        added = await store.wait_for(lambda op: op[:3] == ("upsert", "Pod", "after"))
        assert added[3]["apiVersion"] == "v1" and added[3]["metadata"]["uid"]
        assert "resourceVersion" not in added[3]["metadata"], "the watch reads it from the event"
        assert "managedFields" not in added[3]["metadata"], "the store gets the projection"
        assert set(added[3]["spec"]["containers"][0]) <= {"name", "resources"}, (
            "no image: what decisions read"
        )
        plane.api.patch(f"/api/v1/namespaces/{namespace}/pods/after", {"metadata": {"labels": {"x": "1"}}})
        await store.wait_for(
            lambda op: op[1:3] == ("Pod", "after") and op[3]["metadata"].get("labels") == {"x": "1"}
        )
        plane.api.delete(f"/api/v1/namespaces/{namespace}/pods/after")
        await store.wait_for(lambda op: op[:3] == ("remove", "Pod", "after"))


def lease(namespace: str, name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


async def test_the_leader_lease_is_watched_alone_by_name(plane: ControlPlane, namespace: str) -> None:
    """--leader-lease: the one Lease, in its namespace, by a metadata.name field selector (what RBAC
    grants by resourceNames); a Lease beside it, or of that name elsewhere, is never read."""
    leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    plane.api.create(leases.format(ns=namespace), lease(namespace, "gang-scheduler", "a_1"))
    plane.api.create(leases.format(ns=namespace), lease(namespace, "other", "x_1"))
    kinds = (*DEFAULT_KINDS, lease_kind(namespace, "gang-scheduler"))
    async with running(plane, kinds=kinds) as (source, store):
        await started(source)
        listed = next(op for op in store.ops if op[0] == "listed" and op[1] == "Lease")
        assert listed[3] == [f"{namespace}/gang-scheduler"]
        plane.api.patch(f"{leases.format(ns=namespace)}/gang-scheduler", {"spec": {"holderIdentity": "b_2"}})
        plane.api.patch(f"{leases.format(ns=namespace)}/other", {"spec": {"holderIdentity": "y_2"}})
        moved = await store.wait_for(
            lambda op: (
                op[:3] == ("upsert", "Lease", "gang-scheduler") and op[3]["spec"]["holderIdentity"] == "b_2"
            )
        )
        assert moved[3]["metadata"]["namespace"] == namespace
        await asyncio.sleep(0.5)  # the other Lease's edit, had it been watched, would be here by now
        assert not [op for op in store.ops if op[1] == "Lease" and op[2] == "other"]


async def test_relists_when_the_watched_version_is_gone(plane: ControlPlane) -> None:
    source = KubeClusterSource(plane.kubeconfig, settings=FAST, _iterations=2)
    store = RecordingStore()
    try:
        source._served = await source._discover()
        topologies = source._served[("kai.scheduler", "Topology")]
        # A custom resource's watch cache starts when its CRD was created: version 2 is long gone.
        with pytest.raises(_Gone):
            await source._watch_into(store, topologies, _Cursor("2"))
        await asyncio.wait_for(source._feed(store, topologies, rv="2"), 15)
    finally:
        await source.close()
    ops = [op[0] for op in store.ops]
    assert "listed" in ops and set(ops[: ops.index("listed")]) <= {"upsert"}, (
        "a 410 on watch is followed by a relist"
    )
    assert source.watch_restarts == {"Topology.kai.scheduler": 1}


async def test_bind_succeeds_and_a_repeat_to_the_same_node_is_success(
    plane: ControlPlane, namespace: str, node: str
) -> None:
    pod = make_pod(plane, namespace, "p")
    uid = pod["metadata"]["uid"]
    source = KubeClusterSource(plane.kubeconfig, settings=FAST)
    try:
        await source.bind_pod(namespace=namespace, name="p", uid=uid, node=node)
        assert plane.api.get(f"/api/v1/namespaces/{namespace}/pods/p")["spec"]["nodeName"] == node
        await source.bind_pod(namespace=namespace, name="p", uid=uid, node=node)
        with pytest.raises(BindError, match=f"already bound to {node}"):
            await source.bind_pod(namespace=namespace, name="p", uid=uid, node="elsewhere")
        with pytest.raises(BindError, match="not found"):
            await source.bind_pod(namespace=namespace, name="missing", uid="x", node=node)
    finally:
        await source.close()


async def test_condition_patch_merges_by_type(plane: ControlPlane, namespace: str) -> None:
    make_pod(plane, namespace, "p")
    source = KubeClusterSource(plane.kubeconfig, settings=FAST)
    try:
        for kind, reason in (
            ("gang-extender.io/SubGroup", "InvalidSubGroup"),
            ("PodScheduled", "Unschedulable"),
        ):
            cond = {"type": kind, "status": "False", "reason": reason, "message": f"{reason} for the test"}
            await source.set_pod_condition(namespace=namespace, name="p", condition=cond)
        await source.set_pod_condition(namespace=namespace, name="gone", condition=cond)  # logged, not raised
    finally:
        await source.close()
    assert source.write_errors == {("condition", "4xx"): 1}, "the write to a missing pod is counted"
    conds = plane.api.get(f"/api/v1/namespaces/{namespace}/pods/p")["status"]["conditions"]
    assert {c["type"]: c["reason"] for c in conds} == {
        "gang-extender.io/SubGroup": "InvalidSubGroup",
        "PodScheduled": "Unschedulable",
    }
    assert all(c["lastTransitionTime"] for c in conds)


async def test_events_are_created_and_rate_limited_per_object_and_reason(
    plane: ControlPlane, namespace: str
) -> None:
    pod = make_pod(plane, namespace, "p")
    now = [1000.0]
    source = KubeClusterSource(plane.kubeconfig, settings=FAST, clock=lambda: now[0])
    ref = {"namespace": namespace, "name": "p", "uid": pod["metadata"]["uid"], "kind": "Pod"}
    try:
        await source.emit_event(**ref, reason="GangWaiting", message="gang waits for 3 of 4 pods")
        await source.emit_event(**ref, reason="GangWaiting", message="gang waits for 2 of 4 pods")
        await source.emit_event(**ref, reason="GangBound", message="gang bound")
        now[0] += FAST.event_interval_s
        await source.emit_event(**ref, reason="GangWaiting", message="gang waits for 1 of 4 pods")
    finally:
        await source.close()
    events = plane.api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    got = sorted((e["reason"], e["message"]) for e in events)
    assert got == [
        ("GangBound", "gang bound"),
        ("GangWaiting", "gang waits for 1 of 4 pods"),
        ("GangWaiting", "gang waits for 3 of 4 pods"),
    ]
    assert {e["involvedObject"]["uid"] for e in events} == {pod["metadata"]["uid"]}
    assert {e["source"]["component"] for e in events} == {"gang-extender"}


async def test_nudge_and_group_status_patches(plane: ControlPlane, namespace: str) -> None:
    make_pod(plane, namespace, "p")
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": namespace},
        "spec": {"minMember": 2},
    }
    created = plane.api.create(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups", group)
    source = KubeClusterSource(plane.kubeconfig, settings=FAST)
    try:
        source._served = await source._discover()
        await source.emit_event(
            namespace=namespace,
            name="g",
            uid=created["metadata"]["uid"],
            kind="PodGroup",
            reason="GangPlanned",
            message="gang planned",
            api_version="scheduling.run.ai/v2alpha2",
        )
        await source.nudge_pod(namespace=namespace, name="p", value="7")
        status = {"phase": "Pending", "running": 0, "pending": 1}
        await source.patch_group_status(
            group="scheduling.run.ai", kind="PodGroup", namespace=namespace, name="g", status=status
        )
    finally:
        await source.close()
    pod = plane.api.get(f"/api/v1/namespaces/{namespace}/pods/p")
    assert pod["metadata"]["annotations"] == {"gang-extender.io/nudge": "7"}
    got = plane.api.get(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups/g")
    assert got["status"] == status and got["spec"] == {"minMember": 2}
    (event,) = plane.api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    assert event["involvedObject"] == {
        "kind": "PodGroup",
        "namespace": namespace,
        "name": "g",
        "uid": created["metadata"]["uid"],
        "apiVersion": "scheduling.run.ai/v2alpha2",
    }
    assert source.write_errors == {}


async def test_group_status_writes_follow_the_served_crd(plane: ControlPlane, namespace: str) -> None:
    """With KAI v0.16's PodGroup schema (no `phase`, `running`, `pending`) served, the first status write
    learns from the answer which fields were pruned; later writes carry only what the schema keeps, and
    the reason still lands in `schedulingConditions`."""
    from controlplane.upstream import kai_v016_status_served

    path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups"
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "spec": {"minMember": 2}}
    condition = {"type": "UnschedulableOnNodePool", "nodePool": "default", "status": "True"}
    with kai_v016_status_served(plane.api, namespace):
        for name in ("v016-first", "v016-second"):
            plane.api.create(path, {**group, "metadata": {"name": name, "namespace": namespace}})
        source = KubeClusterSource(plane.kubeconfig, settings=FAST)
        try:
            source._served = await source._discover()
            for name in ("v016-first", "v016-second"):
                status = {
                    "phase": "Pending",
                    "running": 0,
                    "pending": 1,
                    "schedulingConditions": [{**condition, "message": f"{name} waits"}],
                }
                await source.patch_group_status(
                    group="scheduling.run.ai", kind="PodGroup", namespace=namespace, name=name, status=status
                )
        finally:
            await source.close()
        for name in ("v016-first", "v016-second"):
            got = plane.api.get(f"{path}/{name}")["status"]
            assert got == {"schedulingConditions": [{**condition, "message": f"{name} waits"}]}, got
        first, second = (plane.status_writes("podgroups", name) for name in ("v016-first", "v016-second"))
        assert len(first) == len(second) == 1, (first, second)
        assert '"phase"' in first[0], first  # what the source learned from
        assert '"phase"' not in second[0] and '"running"' not in second[0], second
        assert source.write_errors == {}


def _jobset(namespace: str, name: str, *, depth: int = 0) -> bytes:
    """A JobSet in JSON; `depth` > 0 nests its `spec.scheduling` (kept as it comes: the tier's CRD
    preserves its unknown fields) that many levels, past what the source's decoder reads."""
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "sleep:v0.1.0"}]}}
    body = orjson.dumps(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": pod}}}]
            },
        }
    )
    if not depth:
        return body
    nested = b'"scheduling":{"x":' + b"[" * depth + b"]" * depth + b"},"
    return body.replace(b'"spec":{', b'"spec":{' + nested, 1)


async def test_a_custom_resource_nested_past_the_decoder_costs_only_itself(
    plane: ControlPlane, namespace: str
) -> None:
    """The API server stores a JobSet whose preserved `spec.scheduling` is 2,000 levels deep; orjson
    reads 1,024. The list goes on past it, with the object named and skipped; its deletion and the
    events after it are applied."""
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    for name, depth in (("shallow", 0), ("deep", 2000)):
        plane.api.request("POST", path, _jobset(namespace, name, depth=depth), decode=False)
    try:
        async with running(plane) as (source, store):
            await started(source)
            listed = await store.wait_for(lambda op: op[:2] == ("listed", "JobSet"))
            assert {f"{namespace}/shallow", f"{namespace}/deep"} <= set(listed[3]), "the deep one is kept"
            applied = {op[2] for op in store.ops if op[0] == "upsert" and op[1] == "JobSet"}
            assert "shallow" in applied and "deep" not in applied
            assert source.bad_objects >= 1
            assert f"JobSet {namespace}/deep: ValueError: it cannot be decoded, nested deeper" in (
                source.last_bad_object
            )
            plane.api.request("DELETE", f"{path}/deep", decode=False)
            plane.api.request("POST", path, _jobset(namespace, "after"), decode=False)
            await store.wait_for(lambda op: op[:3] == ("remove", "JobSet", "deep"))
            await store.wait_for(lambda op: op[:3] == ("upsert", "JobSet", "after"))
    finally:
        plane.api.request("DELETE", f"{path}/deep", ok=(200, 202, 404), decode=False)
