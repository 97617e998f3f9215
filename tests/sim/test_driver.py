"""The driver against a wire-protocol test double (tests/sim/wire_double.py), not the real service."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.sim.cluster import node
from extender.sim.driver import DriverOptions, PodOutcome, SimulationResult, StopReason, simulate
from tests.sim.wire_double import WireDouble

FAST = DriverOptions(idle_timeout_s=15.0, idle_real_s=0.05, real_pause_s=0.005, max_wall_s=20.0)


def nodes(*names: str, cpu: str = "2") -> list[dict]:
    return [
        node(n, labels={"kubernetes.io/hostname": n}, allocatable={"cpu": cpu, "memory": "4Gi", "pods": "10"})
        for n in names
    ]


def pod(name: str, *, cpu: str = "1", **spec: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "t"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec},
    }


async def run(
    objects: list[dict], setup=None, options: DriverOptions = FAST
) -> tuple[SimulationResult, WireDouble]:
    holder: dict[str, WireDouble] = {}

    def factory(cluster: Any):
        double = holder["d"] = WireDouble(cluster)
        if setup:
            setup(double)
        return double.app()

    result = await simulate(objects, app_factory=factory, options=options)
    return result, holder["d"]


def by_name(result: SimulationResult) -> dict[str, Any]:
    return {p.name: p for p in result.pods}


async def test_pods_are_placed_on_the_best_scored_node_that_still_fits() -> None:
    result, _ = await run([*nodes("n1", "n2"), pod("a"), pod("b"), pod("c")])
    pods = by_name(result)
    assert [pods[n].node for n in "abc"] == ["n1", "n1", "n2"]  # n1 is full after two 1-cpu pods
    assert result.stop_reason is StopReason.ALL_BOUND
    assert result.requests == {"filter": 3, "prioritize": 2, "bind": 3}  # c had one node left: no prioritize
    assert result.overcommit == []


async def test_a_rejected_pod_backs_off_on_the_simulated_clock_and_retries() -> None:
    rejections = {"n": 0}

    def setup(d: WireDouble) -> None:
        def reject(p: dict) -> str | None:
            rejections["n"] += 1
            return "not yet" if rejections["n"] <= 2 else None

        d.reject = reject

    result, _ = await run([*nodes("n1"), pod("p")], setup)
    p = by_name(result)["p"]
    assert p.outcome is PodOutcome.BOUND and p.attempts == 3
    assert p.time_to_bind_s is not None and p.time_to_bind_s >= 3.0  # 1 s then 2 s of backoff
    assert result.wall_s < 3.0  # ...without waiting for them


async def test_a_nudge_brings_a_backing_off_pod_straight_back() -> None:
    def setup(d: WireDouble) -> None:
        d.reject = lambda p: (
            "waiting for early" if p["metadata"]["name"] == "late" and not early_bound(d) else None
        )
        original = d.bind

        async def bind_then_nudge(request):
            reply = await original(request)
            await d.cluster.nudge_pod(namespace="t", name="late", value="1")
            return reply

        d.app = lambda: _app_with_bind(d, bind_then_nudge)

    def early_bound(d: WireDouble) -> bool:
        return bool((d.cluster.get("", "Pod", "t", "early") or {}).get("spec", {}).get("nodeName"))

    slow = DriverOptions(**{**FAST.__dict__, "backoff_initial_s": 30.0, "backoff_max_s": 30.0})
    # "late" is created first, so it is tried (and rejected) before "early"
    result, _ = await run([*nodes("n1"), pod("late"), pod("early")], setup, options=slow)
    late = by_name(result)["late"]
    assert late.outcome is PodOutcome.BOUND and late.nudges == 1
    assert late.time_to_bind_s is not None and late.time_to_bind_s < 30.0


def _app_with_bind(d: WireDouble, bind):
    from aiohttp import web

    app = web.Application()
    app.router.add_post("/filter", d.filter)
    app.router.add_post("/prioritize", d.prioritize)
    app.router.add_post("/bind", bind)
    return app


async def test_binds_run_concurrently_like_binding_goroutines() -> None:
    def setup(d: WireDouble) -> None:
        d.bind_gate = asyncio.Event()
        original = d.bind

        async def gated(request):
            if d.binds_waiting + 1 >= 3:
                d.bind_gate.set()  # the third concurrent bind releases all three
            return await original(request)

        d.app = lambda: _app_with_bind(d, gated)

    result, double = await run([*nodes("n1", cpu="4"), pod("a"), pod("b"), pod("c")], setup)
    assert all(p.outcome is PodOutcome.BOUND for p in result.pods)
    assert double.max_binds_waiting == 3  # all three were in flight at once


async def test_a_filter_error_leaves_the_pod_pending_with_the_error() -> None:
    def setup(d: WireDouble) -> None:
        d.filter_error = "boom"

    result, _ = await run([*nodes("n1"), pod("p")], setup)
    p = by_name(result)["p"]
    assert p.outcome is PodOutcome.PENDING
    assert p.last_message.startswith("SchedulerError: boom")
    assert result.stop_reason is StopReason.IDLE


async def test_in_tree_filters_run_before_the_extender_is_asked() -> None:
    result, double = await run([*nodes("n1"), pod("p", nodeSelector={"disk": "ssd"})])
    p = by_name(result)["p"]
    assert p.outcome is PodOutcome.PENDING
    assert p.last_message == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    assert "filter" not in double.calls


async def test_another_schedulers_pods_are_left_alone() -> None:
    result, double = await run([*nodes("n1"), pod("p", schedulerName="default-scheduler")])
    assert by_name(result)["p"].outcome is PodOutcome.NOT_OURS
    assert double.calls == []
    assert result.stop_reason is StopReason.NOTHING_LEFT


async def test_sequenced_replicated_jobs_start_when_their_predecessor_is_bound() -> None:
    tmpl = {
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}},
        }
    }
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "seq", "namespace": "t"},
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": tmpl},
                {
                    "name": "worker",
                    "replicas": 1,
                    "template": tmpl,
                    "dependsOn": [{"name": "leader", "status": "Ready"}],
                },
            ]
        },
    }
    result, _ = await run([*nodes("n1"), js])
    assert len(result.pods) == 4 and all(p.outcome is PodOutcome.BOUND for p in result.pods)
    leaders = [p for p in result.pods if "-leader-" in p.name]
    workers = [p for p in result.pods if "-worker-" in p.name]
    assert min(w.created_s for w in workers) >= max(p.bound_s or 0 for p in leaders)
    assert result.held == []
