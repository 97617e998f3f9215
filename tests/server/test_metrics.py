"""/metrics: the process's own metrics, time to bind, pending gangs, and the cluster source's counts."""

from __future__ import annotations

import asyncio
import collections

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from extender import __version__
from extender.config import default_settings
from extender.server.app import build_app
from extender.server.metrics import Metrics
from extender.state.embedded import EmbeddedCluster
from tests.builders import gang_pod, make_kai_podgroup, rack_cluster
from tests.scheduling.conftest import FakeClock, Service
from tests.scheduling.test_gang_flow import bind_all


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, parsed as Prometheus parses the page."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(svc: Service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = await svc.client.get("/metrics")
    assert resp.status == 200
    return samples(await resp.text())


async def test_metrics_name_the_gangs_and_the_process_and_move_with_them():
    clock = FakeClock()
    cluster = EmbeddedCluster(
        [*rack_cluster(), make_kai_podgroup("train", min_member=2), gang_pod("train-0", "train")]
    )
    client = TestClient(TestServer(build_app(default_settings(gang_wait_s=5.0), source=cluster, clock=clock)))
    await client.start_server()
    try:
        svc = Service(client, cluster, clock)
        before = await scrape(svc)
        assert before[("gang_extender_gangs_pending", ())] == 0
        assert before[("gang_extender_gang_time_to_bind_seconds_count", ())] == 0
        assert ("process_cpu_seconds_total", ()) in before and ("process_resident_memory_bytes", ()) in before
        assert any(name == "python_info" for name, _ in before)
        # the embedded cluster has no write errors or watch: the families are there, empty
        assert not any(
            name.startswith(("gang_extender_api_write_errors", "gang_extender_watch")) for name, _ in before
        )

        assert (await svc.filter("train-0"))["NodeNames"] == []  # first seen: waiting for its second pod
        assert (await scrape(svc))[("gang_extender_gangs_pending", ())] == 1
        clock.now += 7.0
        cluster.apply(gang_pod("train-1", "train"))
        assert set((await bind_all(svc, ["train-0", "train-1"])).values()) == {""}
        await asyncio.sleep(0.05)
        after = await scrape(svc)
        assert after[("gang_extender_gangs_pending", ())] == 0
        assert after[("gang_extender_gang_time_to_bind_seconds_count", ())] == 1
        assert after[("gang_extender_gang_time_to_bind_seconds_sum", ())] == 7.0  # on the injected clock
        assert after[("gang_extender_gang_time_to_bind_seconds_bucket", (("le", "10.0"),))] == 1
        assert after[("gang_extender_gang_time_to_bind_seconds_bucket", (("le", "5.0"),))] == 0

        cluster.write_errors = collections.Counter({("event", "4xx"): 2, ("bind", "connection"): 1})
        cluster.watch_restarts = collections.Counter({"PodGroup.scheduling.run.ai": 3})
        counted = await scrape(svc)
        assert (
            counted[("gang_extender_api_write_errors_total", (("status_class", "4xx"), ("write", "event")))]
            == 2
        )
        assert (
            counted[
                ("gang_extender_api_write_errors_total", (("status_class", "connection"), ("write", "bind")))
            ]
            == 1
        )
        assert counted[("gang_extender_watch_restarts_total", (("kind", "PodGroup.scheduling.run.ai"),))] == 3
        # skipped objects are counted (a counter: it only grows), the release and the role are shown
        assert counted[("gang_extender_bad_objects_skipped_total", ())] == 0
        cluster.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bad"}, "status": "no"})
        assert (
            (await scrape(svc))[("gang_extender_bad_objects_skipped_total", ())] == cluster.bad_objects == 1
        )
        assert counted[("gang_extender_build_info", (("version", __version__),))] == 1
        assert counted[("gang_extender_leader", ())] == 1  # the only replica acts
    finally:
        await client.close()


def test_each_app_has_its_own_registry_with_process_metrics():
    """Two apps in one process (the tests, the simulator) must not collide on a metric's name."""
    a, b = Metrics(), Metrics()
    a.gangs_pending.set(3)
    assert b"gang_extender_gangs_pending 0.0" in b.render()[0]
    assert b"process_cpu_seconds_total" in a.render()[0] and b"process_cpu_seconds_total" in b.render()[0]
