"""A service on a fake clock, and the invariants every gang scenario must leave intact."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from extender.config import default_settings
from extender.server.app import BARRIER, READY, SCHEDULER, STORE, build_app
from extender.state.embedded import EmbeddedCluster
from extender.state.store import is_live, is_terminal


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Service:
    def __init__(self, client: TestClient, cluster: EmbeddedCluster, clock: FakeClock) -> None:
        self.client = client
        self.cluster = cluster
        self.clock = clock
        self.app = client.server.app
        self.store = self.app[STORE]
        self.scheduler = self.app[SCHEDULER]

    @property
    def node_names(self) -> list[str]:
        return sorted(self.store.node_rows)

    def pod(self, name: str, namespace: str = "default") -> dict:
        return self.cluster.get("", "Pod", namespace, name)

    async def filter(self, name: str, names: list[str] | None = None, namespace: str = "default") -> dict:
        doc = {"Pod": self.pod(name, namespace), "Nodes": None, "NodeNames": names or self.node_names}
        resp = await self.client.post("/filter", data=orjson.dumps(doc))
        assert resp.status == 200, await resp.text()
        return orjson.loads(await resp.read())

    async def prioritize(self, name: str, names: list[str]) -> dict[str, int]:
        doc = {"Pod": self.pod(name), "Nodes": None, "NodeNames": names}
        resp = await self.client.post("/prioritize", data=orjson.dumps(doc))
        return {e["Host"]: e["Score"] for e in orjson.loads(await resp.read())}

    async def bind(self, name: str, node: str, namespace: str = "default") -> str:
        pod = self.pod(name, namespace)
        doc = {"PodName": name, "PodNamespace": namespace, "PodUID": pod["metadata"]["uid"], "Node": node}
        resp = await self.client.post("/bind", data=orjson.dumps(doc))
        assert resp.status == 200
        return orjson.loads(await resp.read())["Error"]

    async def schedule(self, name: str, namespace: str = "default") -> tuple[str | None, str]:
        """filter then bind on the only passing node, as kube-scheduler does for a planned member."""
        doc = await self.filter(name, namespace=namespace)
        if not doc["NodeNames"]:
            reasons = {**doc["FailedNodes"], **doc["FailedAndUnresolvableNodes"]}
            return None, next(iter(reasons.values()), doc["Error"])
        return doc["NodeNames"][0], ""

    async def expire(self, seconds: float) -> None:
        """Advance the fake clock and let the barrier's ticker run once."""
        self.clock.now += seconds
        self.app[READY]["tick"].set()
        for _ in range(20):
            await asyncio.sleep(0)

    def plan(self, gang: str) -> dict[str, str]:
        """pod -> planned node of the gang's current plan (unbound members only)."""
        entry = self.scheduler.ledger.entry(gang)
        return {pk: p.node for pk, p in entry.plan.items()} if entry else {}

    def phase(self, gang: str):
        return self.scheduler.phase_of(gang)

    def node_of(self, name: str, namespace: str = "default") -> str | None:
        return (self.pod(name, namespace).get("spec") or {}).get("nodeName")

    def check_invariants(self) -> None:
        """No over-commit, no reservation without a plan; the caller checks gang wholeness."""
        arrays = self.store.arrays
        rows = np.array(sorted(self.store.row_names), dtype=np.int64)
        if len(rows):
            assert (arrays.free[rows] >= 0).all(), "a node is over-committed"
        used: dict[str, dict[str, int]] = {}
        for rec in self.store.pods.values():
            if rec.node_name and not is_terminal(rec.obj):
                acc = used.setdefault(rec.node_name, {})
                for k, v in rec.requests.items():
                    acc[k] = acc.get(k, 0) + v
        for node, acc in used.items():
            alloc = self.store.node(node)["status"]["allocatable"]
            from extender.model.resources import to_units

            for k, v in acc.items():
                assert v <= to_units(k, alloc.get(k, "0")), f"{node} over-committed on {k}"
        self.check_no_partial_gang()
        ledger = self.scheduler.ledger
        for key, e in ledger.gangs.items():
            if not e.plan and not e.releasing:
                members = [r for r in self.store.group_members(key) if is_live(r.obj)]
                assert members, f"gang {key} is remembered with no member left (a leaked entry)"
        planned = {pk for e in ledger.gangs.values() for pk in e.plan}
        held_by = (
            set(self.app[BARRIER].in_flight)
            | set(ledger.assumed)
            | set(ledger.binding)
            | set(ledger.unconfirmed)
        )
        preempted = ledger.preemption_hold_keys()  # room freed by victims or claimed, held for a preemptor
        for pk in self.store.reservations:
            if pk in preempted:
                continue
            rec = self.store.pods.get(pk)
            assert rec is not None, f"reservation for {pk} left behind: the pod is gone"
            assert not rec.node_name, f"reservation for {pk} left behind: the pod is bound"
            assert pk in planned or pk in held_by, (
                f"reservation for {pk} left behind: no plan and no bind holds it"
            )

    def check_no_partial_gang(self) -> None:
        """Every gang with a bound member has its quorum bound (counted as the gang's tree counts it)."""
        from extender.model.group import MembershipState

        groups = {}
        for rec in self.store.pods.values():
            m = self.store.membership(rec)
            if m.state is MembershipState.MEMBER and m.group is not None and m.group.is_gang():
                groups.setdefault(m.group.key, (m.group, []))[1].append((m.subgroup, rec.node_name))
        for key, (group, members) in groups.items():
            bound: dict = {}
            for leaf, node in members:
                if node:
                    bound[leaf] = bound.get(leaf, 0) + 1
            if bound and group.ready_leaves(bound) is None:
                # members the pod garbage collector deleted after they succeeded count as the gang's
                # quorum counts them (their Jobs' status)
                done = self.store.finished_counts(group)
                live = [rec for rec in self.store.group_members(key) if rec.node_name and is_live(rec.obj)]
                for rec in live:
                    leaf = self.store.membership(rec).subgroup
                    done[leaf] = done.get(leaf, 0) + 1
                assert group.ready_leaves(done) is not None, f"gang {key} is partially bound: {bound}"


@pytest.fixture
async def make_service():
    clients = []

    async def start(objects, **settings):
        settings.setdefault("gang_wait_s", 5.0)
        # most scenarios look at one wait; those about members spread over kube-scheduler's
        # backoff set a longer hold
        settings.setdefault("gang_hold_s", settings["gang_wait_s"])
        clock = FakeClock()
        cluster = EmbeddedCluster(objects)
        # a live source's start-up fence, on an embedded cluster (whose own is 0)
        cluster.bind_fence_s = settings.pop("source_bind_fence_s", 0.0)
        app = build_app(default_settings(**settings), source=cluster, clock=clock)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return Service(client, cluster, clock)

    yield start
    for c in clients:
        await c.close()
