"""Issue 9 on the real control plane: defects 1, 2, 4 and 5 with a real kube-scheduler (1.20.2 and 1.36.2).

Every scenario checks the same promise, each bounded in time:
- the gang ends bound whole (every quorum member has spec.nodeName; inside one rack when its
  constraint requires it);
- no node is over-committed (requests of the pods bound to it stay within its allocatable);
- no reservation is left behind (GET /debug/gangs holds none for a pod that is bound or gone, and
  once the scenario settles the service holds no reservation at all).

A scenario collects every broken promise before it fails (`Findings`), so one run says all that
is wrong, with the pending pods' own reasons and a timeline. The service is restarted after each
scenario (same port, same flags), so one scenario's damage never fails the next one.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from controlplane.start import Api
from test_e2e_gangs import batch_job, bound_nodes, pending_reasons, pods, rack_of

from extender.model import labels as keys
from extender.model import resources
from tests.builders import gang_pod, make_kai_podgroup, make_pod

if TYPE_CHECKING:
    from conftest import Cluster


# a required pod affinity to pods that do not exist: kube-scheduler never places it. The plan does
# not model pod affinity, so the member is planned and its siblings wait at the bind barrier for it
# (a member the plan does not model reaches bind through its own cycle before any release)
BLOCKED = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"e2e.example.com/nowhere": "true"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}

T = TypeVar("T")

GANG_WAIT_S = 8.0  # the service's default --gang-wait-s (the fixture starts it with defaults)
HTTP_TIMEOUT_S = 10.0  # httpTimeout in manifests/base/scheduler-config.yaml
SETTLE_S = 5.0  # a bound pod's reservation goes as soon as the watch sees it bound
FOO = "example.com/foo"
PODGROUPS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
RACK_CONSTRAINT = {"topology": "dc", "requiredTopologyLevel": "topology.kubernetes.io/rack"}
# what kube-scheduler says when the bind call itself failed rather than being answered
TRANSPORT_FAILURE = re.compile(
    r"Client\.Timeout|deadline exceeded|connection refused|connection reset|EOF", re.IGNORECASE
)


# ---------------------------------------------------------------- polling and findings


def eventually(check: Callable[[], T], *, timeout_s: float, interval_s: float = 0.25) -> T:
    """Poll `check()` until it returns something truthy or the deadline passes; returns the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if last or time.monotonic() >= deadline:
            return last
        time.sleep(interval_s)


class Findings:
    """Broken promises of one scenario, reported together at its end."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.items: list[str] = []
        self.notes: list[str] = []
        self.started = time.monotonic()

    def check(self, ok: object, message: str) -> bool:
        if not ok:
            self.items.append(message)
        return bool(ok)

    def note(self, message: str) -> None:
        self.notes.append(f"[{time.monotonic() - self.started:5.1f}s] {message}")

    def assert_none(self, cluster: Cluster) -> None:
        if not self.items:
            return
        lines = [f"{self.scenario}: {len(self.items)} broken promise(s)"]
        lines += [f"  - {m}" for m in self.items]
        lines += ["timeline:"] + [f"  {n}" for n in self.notes]
        lines += ["--- service log (tail) ---", cluster.plane.log_tail("service", 15)]
        kept = keep_logs(cluster, self.scenario)
        if kept:
            lines.append(f"--- whole logs kept in {kept} ---")
        pytest.fail("\n".join(lines), pytrace=False)


def keep_logs(cluster: Cluster, scenario: str) -> str:
    """Copy the plane's logs (service, kube-scheduler, API server) of a broken promise to
    $GANG_EXTENDER_E2E_LOGS/<scenario>/, so an intermittent failure can be read after the plane is gone."""
    root = os.environ.get("GANG_EXTENDER_E2E_LOGS")
    if not root:
        return ""
    target = Path(root) / re.sub(r"[^A-Za-z0-9_.-]+", "_", scenario)
    target.mkdir(parents=True, exist_ok=True)
    for log in Path(cluster.plane.workdir).glob("*.log"):
        shutil.copy(log, target / log.name)
    return str(target)


# ---------------------------------------------------------------- the service's view


def http_get(url: str, timeout_s: float = 3.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:
        return 0, str(exc).encode()


def debug_gangs(cluster: Cluster) -> list[dict[str, Any]]:
    status, body = http_get(cluster.service_url + "/debug/gangs")
    return list(json.loads(body).get("gangs") or []) if status == 200 else []


def gang_view(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return next((g for g in debug_gangs(cluster) if g.get("gang") == f"{namespace}/{name}"), {})


def reservations_held(cluster: Cluster) -> int | None:
    """The service's reservation count from /metrics; None when it does not export one."""
    status, body = http_get(cluster.service_url + "/metrics")
    if status != 200:
        return None
    m = re.search(rb'^gang_extender_cache_objects\{cache="reservations"\} ([0-9.e+]+)$', body, re.MULTILINE)
    return int(float(m.group(1))) if m else None


def reservation_problems(cluster: Cluster, namespace: str) -> list[str]:
    """Reservations the service still holds once a scenario settled: each one is a leak.

    The API's pods are read before the service's view, so a pod shown bound (or gone) here was so
    before the service was asked: a reservation the service still holds for it is not a binding that
    landed between the two reads. Each line says what the holding gang was doing (its phase and
    plan), so a plan still in progress can be told from a leak."""
    api = cluster.plane.api
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in pods(api, namespace)}
    out = []
    for gang in debug_gangs(cluster):
        held = gang.get("reservation") or {}
        if not str(gang.get("gang", "")).startswith(f"{namespace}/") or not held:
            continue
        doing = f"phase {gang.get('phase')}, {len(gang.get('plan') or {})} planned"
        for pk in held:
            name = str(pk).partition("/")[2]
            node = nodes.get(name)
            state = "gone" if node is None else f"bound to {node}" if node else "pending"
            out.append(f"gang {gang['gang']} ({doing}) holds a reservation for {pk} ({state})")
    total = reservations_held(cluster)
    if total:
        out.append(f"the service holds {total} reservation(s) after the scenario settled")
    return out


def settled_without_reservations(cluster: Cluster, namespace: str) -> list[str]:
    return eventually(lambda: reservation_problems(cluster, namespace) or None, timeout_s=SETTLE_S) or []


def service_healthy(cluster: Cluster) -> list[str]:
    out = []
    for path in ("/healthz", "/readyz"):
        status, body = http_get(cluster.service_url + path)
        if status != 200:
            out.append(f"GET {path} -> {status}: {body.decode(errors='replace').strip()[:160]}")
    return out


# ---------------------------------------------------------------- the cluster's view


def pod_requests(pod: dict[str, Any]) -> Counter[str]:
    """What the pod asks for, counted as the scheduler counts it (the project's own rules)."""
    return Counter(resources.pod_requests(pod))


def quantity(name: str, text: object) -> int:
    return resources.to_units(name, text)  # type: ignore[arg-type]


def overcommitted(api: Api, *, deleted: Collection[str] = ()) -> list[str]:
    """Nodes whose bound pods request more than their allocatable, in any resource. A node of
    `deleted` that is gone is left out: its pods run nowhere (the caller deleted it under them)."""
    alloc = {
        n["metadata"]["name"]: {
            k: quantity(k, v) for k, v in ((n.get("status") or {}).get("allocatable") or {}).items()
        }
        for n in api.get("/api/v1/nodes")["items"]
    }
    used: dict[str, Counter[str]] = {}
    for p in api.get("/api/v1/pods")["items"]:
        node = p["spec"].get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            used.setdefault(node, Counter()).update(pod_requests(p))
    out = []
    for node, req in sorted(used.items()):
        if node in deleted and node not in alloc:
            continue
        for name, amount in sorted(req.items()):
            have = alloc.get(node, {}).get(name, 0)
            if amount > have:
                out.append(f"node {node} over-committed: {name} {amount} requested, {have} allocatable")
    return out


def create_pod(api: Api, pod: dict[str, Any]) -> dict[str, Any]:
    pod = {**pod, "status": {}}
    pod["spec"] = {**pod["spec"], "terminationGracePeriodSeconds": 0}
    return api.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)


def member(namespace: str, name: str, group: str, *, cpu: str, labels: dict[str, str]) -> dict[str, Any]:
    return gang_pod(name, group, namespace=namespace, cpu=cpu, memory="256Mi", labels=labels)


def wait_bound(api: Api, namespace: str, count: int, selector: str, timeout_s: float) -> list[dict[str, Any]]:
    """The pods of `selector` once `count` of them are bound (or the last listing at the deadline)."""
    last: list[dict[str, Any]] = []

    def done() -> bool:
        nonlocal last
        last = pods(api, namespace, selector)
        return len(bound_nodes(last)) >= count

    eventually(done, timeout_s=timeout_s)
    return last


def why_unbound(api: Api, namespace: str, items: list[dict[str, Any]]) -> str:
    """Each unbound pod with the last reason kube-scheduler gave for it."""
    out = []
    for p in items:
        if p["spec"].get("nodeName"):
            continue
        reasons = pending_reasons(api, namespace, p)
        out.append(f"{p['metadata']['name']}: {reasons[-1] if reasons else 'no reason recorded'}")
    return "; ".join(out) or "none"


# A filter-phase FailedScheduling message; anything else kube-scheduler reports for a pod comes from bind.
FILTER_FAILURE = re.compile(r"^\d+/\d+ nodes are available")


def bind_failures(api: Api, namespace: str, name: str) -> list[str]:
    """kube-scheduler's FailedScheduling messages for this pod that come from its bind call: 1.20 prefixes
    them `Binding rejected: `; 1.36 reports the bind error as it is (the extender's answer, or the
    transport's error), and only filter failures start `0/N nodes are available`."""
    msgs = pending_reasons(api, namespace, {"metadata": {"name": name}})
    return [m for m in msgs if m.lower().startswith("binding rejected") or not FILTER_FAILURE.match(m)]


def gang_summary(items: list[dict[str, Any]], quorum: int) -> str:
    nodes = bound_nodes(items)
    return f"{len(nodes)} of {len(items)} pods bound (quorum {quorum}) on {sorted(set(nodes))}"


# ---------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def fresh_service_after(cluster: Cluster) -> Iterator[None]:
    """Once the scenario and its namespace are gone, restart the service: today's code can be left with a
    dead watch, a broken ticker or leaked reservations, which must not fail the next scenario."""
    yield
    cluster.plane.restart_service()


# ---------------------------------------------------------------- defect 1


def test_new_resource_name_while_gang_waits_at_barrier(cluster: Cluster, namespace: str) -> None:
    """A device plugin's new resource and a pod asking for it arrive while 3 of 4 members wait at the
    bind barrier for a member kube-scheduler cannot place (a nodeSelector no node has). The barrier
    times out with an answer; once that member is replaced, the 4 bind whole and the plain pod binds."""
    api = cluster.plane.api
    f = Findings("defect 1: a new resource name while a gang waits at the barrier")
    labels = {"app": "quad"}
    api.create(PODGROUPS.format(ns=namespace), make_kai_podgroup("quad", namespace=namespace, min_member=4))
    blocked = member(namespace, "quad-blocked", "quad", cpu="1", labels=labels)
    blocked["spec"]["affinity"] = copy.deepcopy(BLOCKED)  # planned, never placed by kube-scheduler
    create_pod(api, blocked)
    for i in range(3):
        create_pod(api, member(namespace, f"quad-{i}", "quad", cpu="1", labels=labels))

    def at_barrier() -> list[str]:
        view = gang_view(cluster, namespace, "quad")
        return [m["pod"].split("/", 1)[1] for m in view.get("members") or [] if m.get("waitingAtBind")]

    waiting = eventually(lambda: len(at_barrier()) >= 3 and at_barrier(), timeout_s=30, interval_s=0.1)
    waiting = waiting or at_barrier()
    plan = gang_view(cluster, namespace, "quad").get("plan") or {}
    f.note(f"{len(waiting)} member(s) waiting at the barrier {waiting}; plan {plan}")
    device_node = next(n for n in reversed(cluster.nodes) if n not in set(plan.values()))
    plain = make_pod("foo-user", namespace=namespace, cpu="500m", memory="256Mi")
    res = plain["spec"]["containers"][0]["resources"]
    res["requests"][FOO] = "1"
    res["limits"] = {FOO: "1"}  # extended resources cannot be overcommitted: limits == requests
    try:
        # a device plugin registering: the node gains an allocatable resource the service has never seen
        api.patch(
            f"/api/v1/nodes/{device_node}/status",
            {"status": {"capacity": {FOO: "4"}, "allocatable": {FOO: "4"}}},
            kind="strategic",
        )
        create_pod(api, plain)
        f.note(f"{FOO}: 4 added to {device_node}; foo-user created")

        # the barrier's deadline passes (or the plan is dropped): every waiting bind gets an answer
        def answered() -> dict[str, list[str]]:
            got = {p: bind_failures(api, namespace, p) for p in waiting}
            return got if all(got.values()) else {}

        answers = eventually(answered, timeout_s=GANG_WAIT_S + HTTP_TIMEOUT_S + 5) or {
            p: bind_failures(api, namespace, p) for p in waiting
        }
        f.note(f"bind answers: {answers}")
        for pod_name in waiting:
            msgs = answers.get(pod_name) or []
            if f.check(
                msgs, f"{pod_name}'s bind was never answered (no bind failure after the barrier's deadline)"
            ):
                hung = [m for m in msgs if TRANSPORT_FAILURE.search(m)]
                f.check(
                    not hung,
                    f"{pod_name}'s bind hung until kube-scheduler's httpTimeout: {hung[0] if hung else ''}",
                )

        # the operator fixes the member: a replacement without the impossible nodeSelector
        api.delete(f"/api/v1/namespaces/{namespace}/pods/quad-blocked")
        create_pod(api, member(namespace, "quad-3", "quad", cpu="1", labels=labels))
        f.note("quad-blocked replaced by quad-3")

        items = wait_bound(api, namespace, 4, "app=quad", timeout_s=45)
        f.note(gang_summary(items, 4))
        f.check(
            len(items) == 4 and len(bound_nodes(items)) == 4,
            f"the gang is not bound whole: {gang_summary(items, 4)}; "
            f"unbound: {why_unbound(api, namespace, items)}",
        )
        got = eventually(
            lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/foo-user")["spec"].get("nodeName"),
            timeout_s=15,
        )
        f.check(
            got == device_node,
            f"foo-user (asks {FOO}: 1) is bound to {got!r}, not {device_node}; "
            f"why: {why_unbound(api, namespace, pods(api, namespace, 'app!=quad'))}",
        )
        for p in items:  # whether or not the barrier was seen: no bind of this gang may hang
            name = p["metadata"]["name"]
            hung = [m for m in bind_failures(api, namespace, name) if TRANSPORT_FAILURE.search(m)]
            f.check(name in waiting or not hung, f"{name}'s bind hung: {hung[:1]}")
        f.check(not (over := overcommitted(api)), f"over-commit: {over}")
        f.check(not (held := settled_without_reservations(cluster, namespace)), f"reservations left: {held}")
    finally:
        api.delete(f"/api/v1/namespaces/{namespace}/pods")  # every pod, one request
        api.patch(
            f"/api/v1/nodes/{device_node}/status",
            {"status": {"capacity": {FOO: None}, "allocatable": {FOO: None}}},
            kind="strategic",
        )
    f.assert_none(cluster)


# ---------------------------------------------------------------- defect 2


def test_int64_overflowing_request_leaves_the_service_healthy(cluster: Cluster, namespace: str) -> None:
    """Pods asking `cpu: 1e16` (the API server accepts it) are skipped, never fatal: the service stays
    healthy and ready, a normal gang binds whole in one rack, a node added afterwards is used, and
    the pending one stays pending because it does not fit.

    Two such pods: one pending for gang-scheduler (the filter path), and one already bound to a
    cordoned node of its own, as a pod placed by another scheduler would be (the watch path: the
    cache charges a bound pod's requests to its node)."""
    plane, api = cluster.plane, cluster.plane.api
    f = Findings("defect 2: a request that overflows int64")
    host, big = f"absurd-{namespace}", f"big-{namespace}"
    try:
        create_pod(api, make_pod("absurd", namespace=namespace, cpu="1e16", memory="256Mi"))

        def absurd_reasons() -> list[str]:
            return pending_reasons(api, namespace, {"metadata": {"name": "absurd"}})

        eventually(absurd_reasons, timeout_s=20)
        f.note(f"absurd pending: {absurd_reasons()[-1:]}; service: {service_healthy(cluster) or 'healthy'}")
        plane.add_node(host, labels={}, cpu="4")
        api.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": True}})
        create_pod(api, make_pod("absurd-bound", namespace=namespace, cpu="1e16", memory="256Mi", node=host))
        time.sleep(1.0)  # the watch delivers it
        f.note(f"absurd-bound created on {host}; service: {service_healthy(cluster) or 'healthy'}")

        anns = {
            keys.BATCH_MIN_MEMBER: "4",
            keys.TOPOLOGY: "dc",
            keys.TOPOLOGY_REQUIRED: "topology.kubernetes.io/rack",
        }
        api.create(
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            batch_job(namespace, "train", pods_n=4, cpu="2", annotations=anns),
        )
        items = wait_bound(api, namespace, 4, "job-name=train", timeout_s=25)
        f.note(f"train: {gang_summary(items, 4)}")
        if f.check(
            len(items) == 4 and len(bound_nodes(items)) == 4,
            f"the normal gang is not bound whole: {gang_summary(items, 4)}; "
            f"unbound: {why_unbound(api, namespace, items)}",
        ):
            racks = {rack_of(api, n) for n in bound_nodes(items)}
            f.check(len(racks) == 1, f"the rack-constrained gang spans racks {sorted(racks)}")

        # 2 pods of 6 CPUs fit only the new 16-CPU node (the others have 4)
        plane.add_node(big, labels={}, cpu="16")
        api.create(
            PODGROUPS.format(ns=namespace), make_kai_podgroup("wide", namespace=namespace, min_member=2)
        )
        for i in range(2):
            create_pod(api, member(namespace, f"wide-{i}", "wide", cpu="6", labels={"app": "wide"}))
        wide = wait_bound(api, namespace, 2, "app=wide", timeout_s=20)
        f.note(f"wide: {gang_summary(wide, 2)}")
        f.check(
            bound_nodes(wide) == [big, big],
            f"the gang that fits only the new node {big} is not bound there: {gang_summary(wide, 2)}; "
            f"unbound: {why_unbound(api, namespace, wide)}",
        )

        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/absurd")
        f.check(not pod["spec"].get("nodeName"), f"the absurd pod was bound to {pod['spec'].get('nodeName')}")
        fit = re.compile(r"insufficient cpu|not fit|no room|has room|short", re.IGNORECASE)
        reasons = absurd_reasons()
        f.check(
            any(fit.search(m) for m in reasons),
            f"the absurd pod's FailedScheduling does not say it does not fit: {reasons[-2:]}",
        )
        f.check(not (sick := service_healthy(cluster)), f"the service is not healthy: {sick}")
        over = [m for m in overcommitted(api) if f"node {host} " not in m]  # absurd-bound's, on purpose
        f.check(not over, f"over-commit: {over}")
        f.check(not (held := settled_without_reservations(cluster, namespace)), f"reservations left: {held}")
    finally:
        # every pod, the absurd ones too: a restarted service must not meet them again
        api.delete(f"/api/v1/namespaces/{namespace}/pods")
        for node in (host, big):
            api.delete(f"/api/v1/nodes/{node}")
    f.assert_none(cluster)


# ---------------------------------------------------------------- defect 4


def test_bound_gang_grows_after_a_service_restart(cluster: Cluster, namespace: str) -> None:
    """Min-member 2, rack-constrained: the quorum binds, the service restarts (same port), then two
    more members arrive; both bind inside the quorum's rack within 30 s."""
    plane, api = cluster.plane, cluster.plane.api
    f = Findings("defect 4: a bound gang grows after a restart")
    group = make_kai_podgroup("elastic", namespace=namespace, min_member=2, topology=dict(RACK_CONSTRAINT))
    api.create(PODGROUPS.format(ns=namespace), group)
    labels = {"app": "elastic"}
    for i in range(2):
        create_pod(api, member(namespace, f"elastic-{i}", "elastic", cpu="2", labels=labels))
    quorum = wait_bound(api, namespace, 2, "app=elastic", timeout_s=30)
    assert len(bound_nodes(quorum)) == 2, (
        f"precondition: the quorum binds before the restart: {gang_summary(quorum, 2)}; "
        f"unbound: {why_unbound(api, namespace, quorum)}"
    )
    rack = rack_of(api, bound_nodes(quorum)[0])
    started = time.monotonic()
    plane.restart_service()
    f.note(f"quorum bound in {rack}; service restarted in {time.monotonic() - started:.1f}s")

    for i in range(2, 4):
        create_pod(api, member(namespace, f"elastic-{i}", "elastic", cpu="2", labels=labels))
    items = wait_bound(api, namespace, 4, "app=elastic", timeout_s=30)
    f.note(f"after restart: {gang_summary(items, 2)}")
    f.check(
        len(items) == 4 and len(bound_nodes(items)) == 4,
        f"members beyond the bound quorum did not bind within 30 s of the restart: {gang_summary(items, 2)}; "
        f"unbound: {why_unbound(api, namespace, items)}",
    )
    racks = {rack_of(api, n) for n in bound_nodes(items)}
    f.check(racks <= {rack}, f"members bound outside the quorum's rack {rack}: {sorted(racks)}")
    f.check(not (over := overcommitted(api)), f"over-commit: {over}")
    f.check(not (held := settled_without_reservations(cluster, namespace)), f"reservations left: {held}")
    f.assert_none(cluster)


# ---------------------------------------------------------------- defect 5


def test_gang_with_required_pod_anti_affinity_converges(cluster: Cluster, namespace: str) -> None:
    """3 members, each refusing a node that holds a sibling (required anti-affinity on hostname), on 12
    free nodes: 3 bound on 3 distinct nodes within 60 s, not a replan livelock."""
    api = cluster.plane.api
    f = Findings("defect 5: required pod anti-affinity")
    labels = {"app": "spread"}
    api.create(PODGROUPS.format(ns=namespace), make_kai_podgroup("spread", namespace=namespace, min_member=3))
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    for i in range(3):
        pod = member(namespace, f"spread-{i}", "spread", cpu="1", labels=labels)
        pod["spec"]["affinity"] = anti
        create_pod(api, pod)
    items = wait_bound(api, namespace, 3, "app=spread", timeout_s=60)
    nodes = bound_nodes(items)
    f.note(gang_summary(items, 3))
    f.check(
        len(items) == 3 and len(nodes) == 3,
        f"the gang is not bound whole within 60 s: {gang_summary(items, 3)}; "
        f"unbound: {why_unbound(api, namespace, items)}; "
        f"service: {gang_view(cluster, namespace, 'spread').get('lastReason', '')}",
    )
    f.check(len(set(nodes)) == len(nodes), f"anti-affine members share a node: {nodes}")
    f.check(not (over := overcommitted(api)), f"over-commit: {over}")
    f.check(not (held := settled_without_reservations(cluster, namespace)), f"reservations left: {held}")
    f.assert_none(cluster)
