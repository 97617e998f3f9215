"""Coexistence with kube-scheduler 1.36's own gang scheduling: one gate per pod, never two.

A control plane of its own (1.36.2 with GenericWorkload and GangScheduling on every component, the
native peer's configuration), the service started with --native-gang-scheduling, and
kube-scheduler reading the shipped configuration. A scheduling.k8s.io PodGroup's pods (joined
through spec.schedulingGroup) are held by kube-scheduler's plugin until minCount exist, then bound
together; the service places them pod by pod and never gates them itself.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from controlplane.start import SCHEDULER_NAME, ControlPlane, PlaneUnavailable, wait_until

pytestmark = pytest.mark.e2e

VERSION = "1.36.2"


@pytest.fixture(scope="module")
def native_plane() -> Iterator[tuple[ControlPlane, str]]:
    try:
        plane = ControlPlane(version=VERSION, feature_gates="GenericWorkload=true,GangScheduling=true")
    except PlaneUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and control plane {VERSION} is unavailable: {exc}", pytrace=False)
        pytest.skip(f"control plane {VERSION} unavailable: {exc}")
    try:
        plane.start()
        plane.add_racks(blocks=1, racks_per_block=2, nodes_per_rack=2, cpu="4")
        url = plane.start_service(extra_args=["--native-gang-scheduling", "true"])
        plane.start_scheduler(url_prefix=url)
        yield plane, url
    except Exception as exc:
        pytest.fail(
            f"{exc}\n--- service ---\n{plane.log_tail('service')}\n"
            f"--- kube-scheduler ---\n{plane.log_tail('kube-scheduler')}",
            pytrace=False,
        )
    finally:
        plane.stop()


def pod(namespace: str, name: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "schedulingGroup": {"podGroupName": group},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def test_a_native_gang_is_gated_once_by_kube_scheduler_and_bound_whole(native_plane) -> None:
    plane, url = native_plane
    api = plane.api
    ns = f"native-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    pg = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "trio", "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }
    api.create(f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups", pg)
    for i in range(2):
        api.create(f"/api/v1/namespaces/{ns}/pods", pod(ns, f"trio-{i}", "trio"))
    time.sleep(5)  # kube-scheduler's plugin holds 2 of 3; nothing may bind meanwhile

    def bound() -> list[str]:
        items = api.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        return [p["metadata"]["name"] for p in items if p["spec"].get("nodeName")]

    assert bound() == [], "a native gang bound before its minCount existed"
    api.create(f"/api/v1/namespaces/{ns}/pods", pod(ns, "trio-2", "trio"))
    wait_until(lambda: len(bound()) == 3 or None, timeout_s=45, what="the native gang bound whole")
    # the service placed the members pod by pod: it never planned, held or gated this gang
    debug = orjson.loads(urllib.request.urlopen(f"{url}/debug/gangs", timeout=5).read())
    assert f"{ns}/trio" not in {g["gang"] for g in debug["gangs"]}, "the service gated a native gang too"
