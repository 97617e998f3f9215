"""Whole-gang disruption: which running gangs are evicted whole, when, and why (scheduling.disruption).

The decisions run over a real store fed by an embedded cluster; a test plays the API server's part
(an eviction removes the pod) and the clocks are fakes."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.model import labels as keys
from extender.scheduling.decisions import BindVerdict, Verdict
from extender.scheduling.disruption import RETRY_S, GangDisruption, Why
from extender.scheduling.scheduler import Scheduler
from extender.server.app import DISRUPTION, METRICS
from extender.sim.expand import expand
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore, is_live
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod
from tests.scheduling.test_queues import World as FilterWorld

T0 = 1_800_000_000.0  # wall clock of the tests' start


def stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clocks:
    """The monotonic clock and the wall clock, advanced together."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = T0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += seconds


def all_group(name: str, min_count: int) -> dict[str, Any]:
    """A scheduling.k8s.io PodGroup whose disruption mode is the whole group (JobSet `all`)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "disruptionMode": "PodGroup"},
    }


def running(name: str, *, group: str, kind: str, node: str = "n0", created: float = T0 - 300) -> dict:
    if kind == "all":
        pod = make_pod(name, scheduling_group=group, node=node)
    else:
        pod = make_pod(name, annotations={"pod-group-name": group}, node=node)
    pod["metadata"]["creationTimestamp"] = stamp(created)
    pod["status"] = {"phase": "Running"}
    return pod


def gang_objects(name: str, *, kind: str, size: int, quorum: int) -> list[dict]:
    group = all_group(name, quorum) if kind == "all" else make_kai_podgroup(name, min_member=quorum)
    return [group, *(running(f"{name}-{i}", group=name, kind=kind, node=f"n{i}") for i in range(size))]


class World:
    """An embedded cluster, its store and the disruption logic over it."""

    def __init__(self, objects: list[dict], *, grace_s: float = 60.0) -> None:
        self.clocks = Clocks()
        self.cluster = EmbeddedCluster([*(make_node(f"n{i}") for i in range(8)), *objects])
        self.store = ClusterStore()
        self.cluster.attach(self.store)
        self.logic = self.fresh(grace_s)
        self.evicted: list[str] = []

    def fresh(self, grace_s: float = 60.0) -> GangDisruption:
        """The logic as a service (re)started now would hold it: nothing in memory."""
        return GangDisruption(
            self.store,
            stale_grace_s=grace_s,
            clock=lambda: self.clocks.now,
            wall_clock=lambda: self.clocks.wall,
        )

    def pod(self, name: str) -> dict | None:
        return self.cluster.get("", "Pod", "default", name)

    def change(self, name: str, fn) -> None:
        pod = copy.deepcopy(self.pod(name))
        fn(pod)
        self.cluster.apply(pod)

    def delete(self, name: str, grace_s: int = 30) -> None:
        """kubectl delete, as the API server marks it: deletionTimestamp `grace_s` ahead (the kubelet
        would finish it then)."""

        def mark(pod: dict) -> None:
            pod["metadata"]["deletionTimestamp"] = stamp(self.clocks.wall + grace_s)
            pod["metadata"]["deletionGracePeriodSeconds"] = grace_s

        self.change(name, mark)

    def preempt(self, name: str) -> None:
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "lastTransitionTime": stamp(self.clocks.wall),
        }
        self.change(name, lambda p: p["status"].setdefault("conditions", []).append(cond))

    def remove(self, name: str) -> None:
        self.cluster.delete("", "Pod", "default", name)

    def finish(self, name: str, phase: str) -> None:
        self.change(name, lambda p: p["status"].__setitem__("phase", phase))

    def decide(self) -> list:
        """One pass; the evictions it asks for are carried out as the API server would (pod removed)."""
        found = self.logic.decide()
        for ev in found:
            for v in ev.pods:
                pod = self.pod(v.pod.partition("/")[2])
                if pod is not None and pod["metadata"]["uid"] == v.uid:
                    self.remove(v.pod.partition("/")[2])
                    self.evicted.append(v.pod.partition("/")[2])
        return found

    def running(self, prefix: str) -> list[str]:
        return sorted(
            r.key.partition("/")[2]
            for r in self.store.pods.values()
            if r.key.startswith(f"default/{prefix}-") and r.node_name and is_live(r.obj)
        )


def _replacement_in_grace(w: World) -> None:
    """A member deleted with 30 s of grace, its replacement bound while it terminates."""
    w.delete("x-3")
    w.clocks.advance(2)
    w.cluster.apply(running("x-3b", group="x", kind="all", node="n5", created=w.clocks.wall))


def _replacement(w: World) -> None:
    """A member replaced after the incident (the Job controller's new pod), then bound."""
    w.remove("x-3")
    w.clocks.advance(2)
    w.cluster.apply(running("x-3b", group="x", kind="all", node="n5", created=w.clocks.wall))


def _second_loss(w: World) -> None:
    """An elastic gang loses a member and stays at its quorum; the member's replacement is bound;
    then two more go: the replacement is one of the survivors the eviction takes."""
    w.remove("x-0")
    w.clocks.advance(2)
    w.cluster.apply(running("x-0b", group="x", kind="kai", node="n5", created=w.clocks.wall))
    w.clocks.advance(2)
    w.remove("x-1")
    w.remove("x-2")


# (name, gang kind, size, quorum, what happens, evicted, why, words in the reason)
CASES = [
    ("all: a member deleted", "all", 4, 4, lambda w: w.delete("x-3"), ["x-0", "x-1", "x-2"],
     Why.DISRUPTION_ALL, "member default/x-3 was deleted; disruptionMode all"),
    ("all: a member preempted by kube-scheduler", "all", 4, 4, lambda w: w.preempt("x-3"),
     ["x-0", "x-1", "x-2"], Why.DISRUPTION_ALL, "member default/x-3 was preempted"),
    ("all: a member gone outright", "all", 4, 4, lambda w: w.remove("x-3"), ["x-0", "x-1", "x-2"],
     Why.DISRUPTION_ALL, "x-3 was deleted"),
    ("all: even above its quorum", "all", 4, 2, lambda w: w.delete("x-3"), ["x-0", "x-1", "x-2"],
     Why.DISRUPTION_ALL, "disruptionMode all evicts the whole gang"),
    ("all: a member succeeded (a finished pod is no disruption)", "all", 4, 4,
     lambda w: w.finish("x-3", "Succeeded"), [], None, ""),
    ("all: the replacement of a gone member is not a survivor", "all", 4, 4, _replacement,
     ["x-0", "x-1", "x-2"], Why.DISRUPTION_ALL, ""),
    ("all: a replacement bound while the member it replaces terminates", "all", 4, 4,
     _replacement_in_grace, ["x-0", "x-1", "x-2"], Why.DISRUPTION_ALL, ""),
    ("kai: a member deleted below quorum", "kai", 4, 4, lambda w: w.delete("x-0"), ["x-1", "x-2", "x-3"],
     Why.BELOW_QUORUM, "leaving 3 of the 4 pods its quorum needs"),
    ("kai: a member preempted below quorum", "kai", 4, 4, lambda w: w.preempt("x-0"),
     ["x-1", "x-2", "x-3"], Why.BELOW_QUORUM, "default/x-0 was preempted"),
    ("kai elastic: one member lost, still at quorum", "kai", 4, 2, lambda w: w.remove("x-0"), [], None, ""),
    ("kai elastic: taken below its quorum", "kai", 4, 3,
     lambda w: (w.remove("x-0"), w.preempt("x-1")), ["x-2", "x-3"], Why.BELOW_QUORUM, "x-1 was preempted"),
    ("kai elastic: a member bound since the first loss is a survivor of the next", "kai", 4, 3,
     _second_loss, ["x-0b", "x-3"], Why.BELOW_QUORUM, "leaving 2 of the 3 pods"),
    ("kai: a failed member waits for the stale grace", "kai", 4, 4, lambda w: w.finish("x-0", "Failed"),
     [], None, ""),
    ("kai: finished members count (a completed Job is healthy)", "kai", 4, 4,
     lambda w: (w.finish("x-0", "Succeeded"), w.finish("x-1", "Succeeded")), [], None, ""),
    ("a healthy gang", "all", 4, 4, lambda w: None, [], None, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "kind", "size", "quorum", "event", "evicted", "why", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_whole_gang_disruption(name, kind, size, quorum, event, evicted, why, words):
    w = World(gang_objects("x", kind=kind, size=size, quorum=quorum))
    assert w.decide() == []  # healthy to start with
    w.clocks.advance(1)
    event(w)
    found = w.decide()
    assert sorted(v.pod.partition("/")[2] for ev in found for v in ev.pods) == evicted
    if why is not None:
        (ev,) = found
        assert ev.why is why and ev.fresh
        assert words in ev.reason and ev.reason.startswith("gang default/x: ")
        effect = ev.effects()[0]
        assert (
            effect.kind == "evict"
            and effect.data["reason"] == ev.reason
            and effect.data["gang"] == "default/x"
        )
        assert effect.data["uid"]
    w.clocks.advance(RETRY_S + 1)
    assert w.decide() == []  # settled: once per incident


def test_an_eviction_in_flight_is_asked_once_then_retried_and_counted_once():
    w = World(gang_objects("x", kind="all", size=3, quorum=3))
    w.decide()
    w.delete("x-2")
    first = w.logic.decide()  # not carried out: a PodDisruptionBudget answered 429, say
    assert [len(ev.pods) for ev in first] == [2] and first[0].fresh
    assert w.logic.decide() == []  # asked for already: no storm
    w.clocks.advance(RETRY_S)
    again = w.logic.decide()
    assert [len(ev.pods) for ev in again] == [2] and not again[0].fresh  # the same incident, retried


def test_a_restarted_service_finishes_the_job_from_the_store():
    """The first process wrote its DisruptionTarget on one survivor and evicted it, then stopped."""
    w = World(gang_objects("x", kind="all", size=4, quorum=4))
    w.decide()
    w.delete("x-3")
    w.clocks.advance(1)
    ours = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "GangDisrupted",
        "lastTransitionTime": stamp(w.clocks.wall),
    }
    w.change("x-0", lambda p: p["status"].setdefault("conditions", []).append(ours))
    w.change("x-0", lambda p: p["metadata"].__setitem__("deletionTimestamp", stamp(w.clocks.wall)))
    w.logic = w.fresh()  # restarted: nothing in memory
    (ev,) = w.decide()
    assert sorted(v.pod for v in ev.pods) == ["default/x-1", "default/x-2"]
    assert ev.why is Why.DISRUPTION_ALL


@pytest.mark.parametrize("evicted_state", ["gone", "terminating"])
def test_a_restarted_service_finishes_an_eviction_whose_trigger_is_gone(evicted_state: str) -> None:
    """A KAI gang of 4 bound whole; x-0 vanished (its node lost); the first process wrote its condition
    on x-1, x-2 and x-3 and evicted them: x-1 and x-2 went (or terminate), a PodDisruptionBudget
    refused x-3 (retried after RETRY_S). A restarted process knows nothing of who was bound: x-3,
    carrying our condition, is still evicted, not left running alone for good (found by review)."""
    w = World(gang_objects("x", kind="kai", size=4, quorum=4))
    assert w.decide() == []
    w.clocks.advance(1)
    w.remove("x-0")
    found = w.logic.decide()
    assert sorted(v.pod for ev in found for v in ev.pods) == ["default/x-1", "default/x-2", "default/x-3"]
    ours = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "GangDisrupted",
        "lastTransitionTime": stamp(w.clocks.wall),
    }
    for name in ("x-1", "x-2", "x-3"):  # the condition first, then the eviction
        w.change(name, lambda p: p["status"].setdefault("conditions", []).append(dict(ours)))
    for name in ("x-1", "x-2"):
        if evicted_state == "gone":
            w.remove(name)
        else:
            w.delete(name)
    w.logic = w.fresh()  # restarted: nothing in memory
    again: list = []
    for _ in range(3):
        w.clocks.advance(RETRY_S + 1)
        again = w.decide()
        if again:
            break
    assert sorted(v.pod for ev in again for v in ev.pods) == ["default/x-3"], w.logic.describe("default/x")


def test_a_replacement_gang_bound_while_old_members_terminate_is_left_alone():
    w = World(gang_objects("x", kind="all", size=2, quorum=2))
    w.decide()
    w.delete("x-0")
    w.delete("x-1")  # the whole gang is going (evicted, or its JobSet restarted)
    w.clocks.advance(3)
    for i in range(2):  # the Job controller's replacements, bound whole meanwhile
        w.cluster.apply(running(f"x-r{i}", group="x", kind="all", node=f"n{4 + i}", created=w.clocks.wall))
    assert w.decide() == []
    assert w.running("x") == ["x-r0", "x-r1"]


@pytest.mark.parametrize(
    ("grace_s", "after_s", "evicted"),
    [
        (60, 59, []),
        (60, 60, ["x-1", "x-2", "x-3"]),
        (5, 5, ["x-1", "x-2", "x-3"]),
        (0, 10_000, []),  # 0: stale-gang eviction is off
    ],
)
def test_a_stale_gang_is_evicted_whole_after_the_grace(grace_s, after_s, evicted):
    w = World(gang_objects("x", kind="kai", size=4, quorum=4), grace_s=grace_s)
    w.decide()
    w.finish("x-0", "Failed")
    assert w.decide() == []
    w.clocks.advance(after_s)
    found = w.decide()
    assert sorted(v.pod.partition("/")[2] for ev in found for v in ev.pods) == evicted
    if evicted:
        assert found[0].why is Why.STALE
        assert f"--stale-gang-grace-s ({grace_s:g}s)" in found[0].reason
        assert "3 of the 4 pods its quorum needs" in found[0].reason


def test_stale_progress_shows_in_describe():
    w = World(gang_objects("x", kind="kai", size=3, quorum=3), grace_s=60)
    w.decide()
    assert w.logic.describe("default/x") == {
        "staleGraceS": 60,
        "belowQuorumForS": None,
        "decision": "healthy: at its quorum",
    }
    w.finish("x-2", "Failed")
    w.decide()
    w.clocks.advance(20)
    w.decide()
    doc = w.logic.describe("default/x")
    assert doc["belowQuorumForS"] == 20
    assert doc["decision"] == "below quorum (2 of 3) for 20s; evicted whole after 60s"


def test_a_gang_that_recovers_its_quorum_is_not_stale():
    w = World(gang_objects("x", kind="kai", size=3, quorum=3), grace_s=60)
    w.decide()
    w.finish("x-2", "Failed")
    w.decide()
    w.clocks.advance(30)
    w.cluster.apply(running("x-2b", group="x", kind="kai", node="n6", created=w.clocks.wall))
    w.decide()
    w.clocks.advance(60)
    assert w.decide() == []


def test_a_gang_never_bound_whole_is_not_stale():
    """Members of a gang being placed may be bound one by one; below quorum then is no staleness."""
    objs = gang_objects("x", kind="kai", size=2, quorum=3)
    w = World(objs)
    w.clocks.advance(1000)
    assert w.decide() == []


# ------------------------------------------------------------------ randomized interleavings
OPS = st.lists(
    st.tuples(
        st.sampled_from(["delete", "preempt", "remove", "fail", "succeed", "tick", "wait"]),
        st.sampled_from(["all", "kai", "elastic"]),
        st.integers(0, 3),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_randomized_interleavings_leave_gangs_all_or_nothing(ops):
    """Whatever disrupts members and whenever the logic runs: once it settles, no disruption-all group
    and no non-elastic gang runs with some members gone, and a gang nothing disrupted is never touched."""
    objects = [
        *gang_objects("all", kind="all", size=4, quorum=4),
        *gang_objects("kai", kind="kai", size=4, quorum=4),
        *gang_objects("elastic", kind="kai", size=4, quorum=2),
    ]
    w = World(objects, grace_s=30)
    disrupted: dict[str, set[str]] = {"all": set(), "kai": set(), "elastic": set()}
    for op, gang, i in ops:
        name = f"{gang}-{i}"
        pod = w.pod(name)
        w.clocks.advance(1)
        if op == "tick":
            w.decide()
        elif op == "wait":
            w.clocks.advance(20)
            w.decide()
        elif pod is None or not is_live(pod):
            continue
        elif op == "delete":
            w.delete(name)
        elif op == "preempt":  # kube-scheduler's preemption: the condition, then the deletion
            w.preempt(name)
            w.delete(name)
        elif op == "remove":
            w.remove(name)
        elif op == "fail":
            w.finish(name, "Failed")
        elif op == "succeed":
            w.finish(name, "Succeeded")
            continue
        if op not in ("tick", "wait"):
            disrupted[gang].add(name)
    for _ in range(5):  # settle: past the grace and the retry delay
        w.clocks.advance(max(RETRY_S, 31))
        w.decide()
    for gang in ("all", "kai"):
        if disrupted[gang]:
            assert w.running(gang) == [], f"{gang} left half-running: {w.running(gang)}"
    if len(disrupted["elastic"]) <= 2:
        assert not any(p.startswith("elastic-") for p in w.evicted), "an elastic gang at quorum was evicted"
    for gang, gone in disrupted.items():
        if not gone:
            assert not any(p.startswith(f"{gang}-") for p in w.evicted), f"healthy {gang} was evicted"


# ------------------------------------------------------------------ through the service
async def test_the_service_evicts_the_whole_gang_with_its_reasons(make_service):
    svc = await make_service(
        [*(make_node(f"n{i}") for i in range(4)), *gang_objects("x", kind="all", size=4, quorum=4)]
    )
    await svc.expire(0)
    pod = svc.pod("x-3")
    pod = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": stamp(T0 + 10**6)}}
    svc.cluster.apply(pod)
    await svc.expire(0)
    for _ in range(20):
        await svc.expire(0)
    assert [n for n in ("x-0", "x-1", "x-2") if svc.pod(n) is not None] == []
    pod_events = [e for e in svc.cluster.events if e["involvedObject"]["kind"] == "Pod"]
    assert sorted(e["involvedObject"]["name"] for e in pod_events) == ["x-0", "x-1", "x-2"]
    assert {e["reason"] for e in pod_events} == {"GangDisrupted"}
    assert all("x-3 was deleted; disruptionMode all" in e["message"] for e in pod_events)
    group_events = [e for e in svc.cluster.events if e["involvedObject"]["kind"] == "PodGroup"]
    assert [e["reason"] for e in group_events] == ["GangEvicted"]
    metrics = svc.app[METRICS]
    assert metrics.gang_evictions.labels("disruption-all")._value.get() == 1
    assert metrics.evicted_pods._value.get() == 3
    assert svc.app[DISRUPTION].describe("default/x")["decision"] == ""  # over: nothing runs


async def test_debug_gang_shows_the_disruption(make_service):
    svc = await make_service(
        [*(make_node(f"n{i}") for i in range(4)), *gang_objects("x", kind="kai", size=3, quorum=3)],
        gang_stale_grace_s=45.0,
    )
    await svc.expire(0)
    resp = await svc.client.get("/debug/gangs/default/x")
    doc = orjson.loads(await resp.read())
    assert doc["disruption"] == {
        "staleGraceS": 45.0,
        "belowQuorumForS": None,
        "decision": "healthy: at its quorum",
    }


# ------------------------------------------------------------------ settings and explain
@pytest.mark.parametrize(
    ("grace_s", "error"),
    [
        (60.0, None),
        (0.0, None),
        (-1.0, "--stale-gang-grace-s must be 0 (off) or positive, got -1.0"),
        (float("nan"), "--stale-gang-grace-s must be 0 (off) or positive, got nan"),
    ],
)
def test_the_stale_grace_is_validated(grace_s, error):
    from extender.config import default_settings, validate

    errors = validate(default_settings(gang_stale_grace_s=grace_s))
    assert errors == ([error] if error else [])


def test_the_stale_grace_flag_has_an_environment_twin(monkeypatch):
    from extender import cli

    (flag,) = [f for f in cli.SERVE_FLAGS if f.name == "stale-gang-grace-s"]
    assert flag.target == "gang.stale_grace_s"
    assert cli._env_name(flag.name) == "GANG_EXTENDER_STALE_GANG_GRACE_S"


@pytest.mark.parametrize(
    ("disruption", "line"),
    [
        (
            {"staleGraceS": 60, "belowQuorumForS": 12.5, "decision": "below quorum (2 of 3) for 12s"},
            "Disruption:  below quorum (2 of 3) for 12s   below quorum for 12.5s   stale after 60s",
        ),
        (
            {"staleGraceS": 0, "belowQuorumForS": None, "decision": "healthy: at its quorum"},
            "Disruption:  healthy: at its quorum   stale-gang eviction off",
        ),
    ],
)
def test_explain_shows_the_disruption_decision(disruption, line):
    from extender import cli

    doc = {
        "gang": "ml/x",
        "phase": "Bound",
        "policy": "gang",
        "quorum": 3,
        "members": [],
        "disruption": disruption,
    }
    assert line in cli.render_gang(doc).splitlines()


async def test_a_fault_in_the_disruption_logic_stays_out_of_the_ticker(make_service, monkeypatch, caplog):
    """The ticker answers every waiting bind with an internal error when a pass raises: a fault deciding
    evictions is logged and the pass goes on."""
    from extender.server.app import _tick

    svc = await make_service([make_node("n0")])

    def broken() -> list:
        raise RuntimeError("boom")

    monkeypatch.setattr(svc.app[DISRUPTION], "decide", broken)
    _tick(svc.app)
    assert "deciding whole-gang evictions failed" in caplog.text


def test_survivors_and_replacements_within_one_second_are_told_apart():
    """Timestamps are whole seconds: a gang disrupted in the second it was created, and replaced in that
    second too. The members bound when the disruption was seen are the survivors, exactly."""
    objects = [
        all_group("x", 3),
        *(running(f"x-{i}", group="x", kind="all", node=f"n{i}", created=T0) for i in range(3)),
    ]
    w = World(objects)
    w.decide()
    w.remove("x-2")  # gone within its first second
    w.cluster.apply(running("x-2b", group="x", kind="all", node="n5", created=T0))  # replaced, same second
    (ev,) = w.decide()
    assert sorted(v.pod for v in ev.pods) == ["default/x-0", "default/x-1"]
    w.clocks.advance(RETRY_S + 1)
    assert w.decide() == []  # our own evictions start no incident of their own
    assert w.running("x") == ["x-2b"]


# ------------------------------------------------------------------ finished members the pod GC deleted
def training_job(parallelism: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "default",
            "uid": "train-uid",
            "annotations": {"kai.scheduler/batch-min-member": str(parallelism)},
        },
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": {}}},
        "status": {"active": parallelism},
    }


@pytest.mark.parametrize(
    ("succeeded", "evicted"),
    [
        (3, []),  # the Job keeps the count: a finishing Job is not stale
        (0, ["train-3"]),  # nothing says they finished: 1 of 4 running is stale
    ],
)
def test_succeeded_members_the_pod_gc_deleted_still_count_for_the_stale_rule(succeeded, evicted):
    job = training_job(4)
    pods = []
    for i in range(4):
        pod = make_pod(f"train-{i}", owner=job, node=f"n{i}")
        pod["metadata"]["creationTimestamp"] = stamp(T0 - 300)
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    w = World([job, *pods], grace_s=60)
    assert w.decide() == []
    for i in range(3):
        w.finish(f"train-{i}", "Succeeded")
    assert w.decide() == []
    for i in range(3):
        w.remove(f"train-{i}")  # the pod garbage collector
    job = copy.deepcopy(w.cluster.get("batch", "Job", "default", "train"))
    job["status"] = {"active": 1, "succeeded": succeeded}
    w.cluster.apply(job)
    w.decide()
    w.clocks.advance(120)
    found = w.decide()
    assert sorted(v.pod.partition("/")[2] for ev in found for v in ev.pods) == evicted
    if evicted:
        assert found[0].why is Why.STALE


# ------------------------------------------------------------------ a gang deleted with its owner
JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: default, uid: js-uid}
spec:
  scheduling: {schedulingPolicy: {gang: {}}}
  replicatedJobs:
  - name: w
    replicas: 1
    template:
      spec:
        parallelism: 4
        completions: 4
        template:
          spec:
            containers: [{name: w, image: sleep, resources: {requests: {cpu: "1"}}}]
"""


def job_world() -> World:
    """Job train's four pods, all bound, in the 1.37 PodGroup x (minCount 4) that the Job controller
    makes for a Job (WorkloadWithJob): the pods name it, so their gang outlives the Job's deletion until
    the garbage collector has taken them and it."""
    job = training_job(4)
    del job["metadata"]["annotations"]
    group = all_group("x", 4)
    del group["spec"]["disruptionMode"]
    group["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "train-uid", "controller": True}
    ]
    pods = []
    for i in range(4):
        pod = make_pod(f"train-{i}", owner=job, node=f"n{i}", scheduling_group="x")
        pod["metadata"]["creationTimestamp"] = stamp(T0 - 300)
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return World([group, job, *pods])


def _restarted_after_the_job_went(w: World) -> None:
    """The Job deleted in the background, then the service restarted: the new process never saw it go."""
    w.cluster.delete("batch", "Job", "default", "train")
    w.logic = w.fresh()
    assert w.decide() == []


def _unlisted_and_absent(w: World) -> None:
    """Jobs are not listed (their API not served when the service started): the Job's absence is no
    sign of its deletion, and a restarted service never saw it go."""
    w.store.listed = frozenset({("", "Pod"), ("", "Node"), ("scheduling.k8s.io", "PodGroup")})
    w.cluster.delete("batch", "Job", "default", "train")
    w.logic = w.fresh()
    assert w.decide() == []


def jobset_world() -> World:
    """JobSet js (a gang) of one Job of four pods, all bound: pod -> Job -> JobSet."""
    objs = expand([yaml.safe_load(JOBSET)]).objects
    pods = sorted((o for o in objs if o["kind"] == "Pod"), key=lambda o: o["metadata"]["name"])
    for i, pod in enumerate(pods):
        pod["spec"]["nodeName"] = f"n{i}"
        pod["metadata"]["name"] = f"train-{i}"
        pod["metadata"]["creationTimestamp"] = stamp(T0 - 300)
        pod["status"] = {"phase": "Running"}
    return World(objs)


def _job_changed(w: World, fn) -> None:
    job = copy.deepcopy(w.cluster.get("batch", "Job", "default", "train"))
    fn(job)
    w.cluster.apply(job)


def _marked(obj: dict) -> None:
    obj["metadata"]["deletionTimestamp"] = stamp(T0)
    obj["metadata"]["finalizers"] = ["foregroundDeletion"]


def _orphaned(obj: dict) -> None:
    obj["metadata"]["deletionTimestamp"] = stamp(T0)
    obj["metadata"]["finalizers"] = ["orphan"]


def _held_by_a_finalizer(obj: dict) -> None:
    obj["metadata"]["deletionTimestamp"] = stamp(T0)
    obj["metadata"]["finalizers"] = ["example.com/cleanup"]


def _owner_gone_job_held(w: World) -> None:
    """The Job's owner (a Trainer) deleted in the background; the Job, marked, held by a finalizer:
    the garbage collector deletes no pod while the Job stays."""
    meta = {"name": "t", "namespace": "default", "uid": "t-uid"}
    w.cluster.apply({"apiVersion": "example.com/v1", "kind": "Trainer", "metadata": meta})

    def owned_and_held(job: dict) -> None:
        ref = {
            "apiVersion": "example.com/v1",
            "kind": "Trainer",
            "name": "t",
            "uid": "t-uid",
            "controller": True,
        }
        job["metadata"]["ownerReferences"] = [ref]

    _job_changed(w, owned_and_held)
    w.cluster.delete("example.com", "Trainer", "default", "t")
    _job_changed(w, _held_by_a_finalizer)


def _jobset_marked(w: World) -> None:
    js = copy.deepcopy(w.cluster.get("jobset.x-k8s.io", "JobSet", "default", "js"))
    _marked(js)
    w.cluster.apply(js)


def _made_again(w: World) -> None:
    w.cluster.delete("batch", "Job", "default", "train")
    job = training_job(4)
    job["metadata"]["uid"] = "another-uid"
    w.cluster.apply(job)


# (case, its world, what happens to the owners before the garbage collector deletes a member,
# evicted, the decision)
OWNER_CASES = [
    ("the Job stays: its survivors go whole", job_world, lambda w: None, ["train-1", "train-2", "train-3"],
     "evicting"),
    ("the Job deleted outright (background)", job_world,
     lambda w: w.cluster.delete("batch", "Job", "default", "train"), [],
     "being deleted with its owner Job default/train (deleted)"),
    ("the Job marked for deletion (foreground)", job_world, lambda w: _job_changed(w, _marked), [],
     "being deleted with its owner Job default/train (being deleted)"),
    ("the Job deleted, its pods orphaned: they run on", job_world, lambda w: _job_changed(w, _orphaned),
     ["train-1", "train-2", "train-3"], "evicting"),
    ("the Job deleted in the background, held by another finalizer: nothing is deleted yet", job_world,
     lambda w: _job_changed(w, _held_by_a_finalizer), ["train-1", "train-2", "train-3"], "evicting"),
    ("the Job deleted before a restart", job_world, _restarted_after_the_job_went, [],
     "being deleted with its owner Job default/train (gone)"),
    ("a Job absent, of a kind not listed: nothing says it went", job_world, _unlisted_and_absent,
     ["train-1", "train-2", "train-3"], "evicting"),
    ("the Job deleted and made again under its name", job_world, _made_again, [],
     "being deleted with its owner Job default/train (deleted)"),
    ("the Job's own owner deleted, the Job held by another finalizer: nothing is deleted yet", job_world,
     _owner_gone_job_held, ["train-1", "train-2", "train-3"], "evicting"),
    ("the JobSet stays: its survivors go whole", jobset_world, lambda w: None,
     ["train-1", "train-2", "train-3"], "evicting"),
    ("the JobSet above the Job marked for deletion (foreground)", jobset_world, _jobset_marked, [],
     "being deleted with its owner JobSet default/js (being deleted)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "world", "event", "evicted", "decision"), OWNER_CASES, ids=[c[0] for c in OWNER_CASES]
)
def test_a_gang_deleted_with_its_owner_is_left_to_the_garbage_collector(
    case, world, event, evicted, decision
):
    """Deleting a JobSet or a Job deletes its pods one by one; evicting the rest as each goes would be
    a write per member racing the garbage collector (a 4096-pod gang: 4096 evictions for nothing)."""
    w = world()
    assert w.decide() == []
    (gang,) = {
        w.store.membership(r).group.key for r in w.store.pods.values() if r.key.startswith("default/train-")
    }
    event(w)
    w.remove("train-0")  # the garbage collector's first deletion
    found = w.decide()
    assert sorted(v.pod.partition("/")[2] for ev in found for v in ev.pods) == evicted
    assert w.logic.describe(gang)["decision"].startswith(decision)


def subgroup_gang(min_sub_group: int) -> list[dict]:
    """Gang x: subgroups a and b of two pods each (minMember 2), all four bound."""
    pg = make_kai_podgroup("x", subgroups=[{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}])
    pg["spec"]["minSubGroup"] = min_sub_group
    pods = []
    for i, name in enumerate(["x-a0", "x-a1", "x-b0", "x-b1"]):
        pod = running(name, group="x", kind="kai", node=f"n{i}")
        pod["metadata"].setdefault("labels", {})[keys.SUBGROUP_NAME] = name[2]
        pods.append(pod)
    return [pg, *pods]


@pytest.mark.parametrize(
    ("min_sub_group", "evicted", "words"),
    [
        # the gang keeps its quorum through b; a is left half-running: its survivor goes
        (1, ["x-a0"], "leaving 1 of the 2 pods subgroup a needs; a subgroup below its minMember"),
        # both subgroups are needed: the gang itself is below its quorum, and goes whole
        (2, ["x-a0", "x-b0", "x-b1"], "a gang below its quorum is evicted whole"),
    ],
)
def test_a_subgroup_a_preemption_leaves_below_its_min_member_is_evicted_whole(min_sub_group, evicted, words):
    w = World(subgroup_gang(min_sub_group))
    assert w.decide() == []
    w.clocks.advance(1)
    w.preempt("x-a1")
    (ev,) = w.decide()
    assert sorted(v.pod.partition("/")[2] for v in ev.pods) == evicted
    assert ev.why is Why.BELOW_QUORUM and words in ev.reason and "x-a1 was preempted" in ev.reason
    w.clocks.advance(RETRY_S + 1)
    assert w.decide() == []  # once per incident
    # x-a1 runs on until kube-scheduler deletes it (a preemption's victim is not this service's)
    assert w.running("x") == sorted({"x-a0", "x-a1", "x-b0", "x-b1"} - set(evicted))


class VictimLedger:
    """The ledger's part the disruption logic reads: which pods a preemption (or reclaim) is evicting."""

    def __init__(self, victims: dict[str, str]) -> None:
        self.victims = victims  # pod key -> the preempting gang

    def victim_of(self, pod: str) -> str | None:
        return self.victims.get(pod)

    def entry(self, gang: str) -> None:
        return None

    def eviction_accepted(self, pod: str, uid: str) -> bool:
        return False


@pytest.mark.parametrize(
    ("victims", "evicted", "decision"),
    [
        # a reclaim evicts x whole: its first member's going is that reclaim's, not a disruption
        ({"default/x-0", "default/x-1", "default/x-2"}, [], "being evicted whole for gang default/big"),
        # nobody is evicting the rest: the loss of x-0 is a disruption and the survivors go
        (set(), ["x-1", "x-2"], "evicting 2 member(s) (below-quorum)"),
    ],
    ids=["reclaim-victims", "disrupted"],
)
def test_a_gang_a_preemption_or_reclaim_evicts_whole_is_not_evicted_again(victims, evicted, decision):
    w = World(gang_objects("x", kind="kai", size=3, quorum=3))
    w.logic.ledger = VictimLedger({v: "default/big" for v in victims})
    w.decide()
    # the preemption's first eviction lands; the other two are on their way, still running in the cache
    w.change("x-0", lambda p: p["metadata"].__setitem__("deletionTimestamp", stamp(w.clocks.wall)))
    w.decide()
    assert w.evicted == evicted
    assert w.logic.describe("default/x")["decision"].startswith(decision)


def disrupted_world(n: int, quorum: int) -> tuple[FilterWorld, GangDisruption]:
    """A store, a real ledger and scheduler, and the disruption logic over them; gang g of `n` pods of
    1 cpu, its quorum `quorum`, on four nodes."""
    w = FilterWorld([*(make_node(f"n{i}") for i in range(4)), make_kai_podgroup("g", min_member=quorum)])
    ledger = w.ledger(release_on_first_bind=False)
    disruption = GangDisruption(w.store, ledger, clock=ledger.clock)
    w.scheduler = Scheduler(w.store, ledger, disruption=disruption)
    for i in range(n):
        w.cluster.apply(gang_pod(f"g-{i}", "g", cpu="1"))
    return w, disruption


@pytest.mark.parametrize(
    ("lands", "evicted"),
    [(True, ["default/g-0"]), (False, [])],
    ids=["its-binding-lands", "the-api-refuses-it"],
)
def test_a_member_whose_release_lands_after_a_preemption_took_the_others_is_evicted(lands, evicted) -> None:
    """kube-scheduler preempts two of a gang of three while the third's binding, part of the gang's
    release, is still in flight: once it lands, it is a survivor of that incident and goes too (else it
    runs alone until the stale grace)."""
    w, disruption = disrupted_world(3, 3)
    for name in ("g-0", "g-1", "g-2"):
        assert w.filter(name).verdict is Verdict.PASS
    w.scheduler.bind(namespace="default", name="g-0", uid=w.pod("g-0")["metadata"]["uid"], node="n0")
    w.scheduler.bind(namespace="default", name="g-1", uid=w.pod("g-1")["metadata"]["uid"], node="n0")
    last = w.pod("g-2")
    d = w.scheduler.bind(namespace="default", name="g-2", uid=last["metadata"]["uid"], node="n0")
    assert d.verdict is BindVerdict.RELEASE
    where = {m.pod: m.node for m in d.members}
    for name in ("g-1", "g-2"):  # their POSTs land; g-0's is still on its way
        pod = w.pod(name)
        w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": where[f"default/{name}"]}})
    disruption.decide()
    for name in ("g-1", "g-2"):  # kube-scheduler's preemption deletes them
        w.cluster.delete("", "Pod", "default", name)
    assert disruption.decide() == []  # nothing of the gang runs yet
    if lands:
        pod = w.pod("g-0")
        w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": where["default/g-0"]}})
    refused = "" if lands else "the API server refused the binding"
    w.scheduler.release_done(d.gang, {m.pod: (refused if m.pod == "default/g-0" else "") for m in d.members})
    evictions = disruption.decide()
    assert [v.pod for e in evictions for v in e.pods] == evicted
    if lands:
        assert evictions[0].why is Why.BELOW_QUORUM
        assert "was deleted, leaving 1 of the 3 pods its quorum needs" in evictions[0].reason


def test_a_subgroup_member_whose_own_bind_lands_after_a_preemption_took_its_subgroup_is_evicted() -> None:
    """Subgroup b is bound whole (b0, b1) and b2, beyond its minMember, has its own bind in flight when
    kube-scheduler's preemption takes b0 and b1 (b whole, as the preempt verb allows): b2 lands a
    survivor of that incident, and goes too (else subgroup b runs with 1 of its 2; seed 2229)."""
    pg = make_kai_podgroup("s", subgroups=[{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}])
    pg["spec"]["minSubGroup"] = 1
    w = FilterWorld([*(make_node(f"n{i}") for i in range(4)), pg])
    ledger = w.ledger(release_on_first_bind=False)
    disruption = GangDisruption(w.store, ledger, clock=ledger.clock)
    w.scheduler = Scheduler(w.store, ledger, disruption=disruption)
    for name in ("s-a0", "s-a1", "s-b0", "s-b1", "s-b2"):
        w.cluster.apply(gang_pod(name, "s", cpu="1", labels={keys.SUBGROUP_NAME: name[2]}))
    w.schedule("s-a0", "s-a1", "s-b0", "s-b1")
    assert w.bound("s-a0", "s-a1", "s-b0", "s-b1")
    assert w.filter("s-b2").verdict is Verdict.PASS
    b2 = w.pod("s-b2")
    d = w.scheduler.bind(namespace="default", name="s-b2", uid=b2["metadata"]["uid"], node="n3")
    assert d.verdict is BindVerdict.NOW  # its own POST, now on its way
    disruption.decide()
    for name in ("s-b0", "s-b1"):  # kube-scheduler's preemption deletes them
        w.cluster.delete("", "Pod", "default", name)
    assert disruption.decide() == []  # subgroup b runs nothing yet: nothing partial
    w.cluster.apply({**b2, "spec": {**b2["spec"], "nodeName": "n3"}})
    w.scheduler.bind_done("default/s-b2", "n3", "")
    evictions = disruption.decide()
    assert [v.pod for e in evictions for v in e.pods] == ["default/s-b2"]
    assert "leaving 1 of the 2 pods subgroup b needs" in evictions[0].reason


def test_a_member_whose_own_bind_lands_after_a_preemption_took_every_other_is_evicted() -> None:
    """A gang of quorum 3 is bound (g-0..g-2) and g-3, beyond its quorum, has its own bind in flight
    when kube-scheduler's preemption takes the other three: nothing of the gang runs then, but the
    incident is not forgotten while g-3's binding is on its way. It lands a survivor and goes too
    (forgotten, it ran alone until the stale grace; kill seed 342 under hash seed 21)."""
    w, disruption = disrupted_world(4, 3)
    w.schedule("g-0", "g-1", "g-2")
    assert w.bound("g-0", "g-1", "g-2")
    assert w.filter("g-3").verdict is Verdict.PASS
    g3 = w.pod("g-3")
    d = w.scheduler.bind(namespace="default", name="g-3", uid=g3["metadata"]["uid"], node="n3")
    assert d.verdict is BindVerdict.NOW  # its own POST, now on its way
    disruption.decide()
    for name in ("g-0", "g-1", "g-2"):  # kube-scheduler's preemption deletes them
        w.cluster.delete("", "Pod", "default", name)
    assert disruption.decide() == []  # nothing of the gang runs yet
    w.cluster.apply({**g3, "spec": {**g3["spec"], "nodeName": "n3"}})
    w.scheduler.bind_done("default/g-3", "n3", "")
    evictions = disruption.decide()
    assert [v.pod for e in evictions for v in e.pods] == ["default/g-3"]
    assert "leaving 1 of the 3 pods its quorum needs" in evictions[0].reason


def test_a_member_that_arrives_while_its_gang_is_evicted_whole_waits_for_the_eviction() -> None:
    """A gang below its quorum is evicted whole; a member created before the evictions land must not
    be planned beside the survivors (bound with them, it would be left running alone)."""
    w, disruption = disrupted_world(3, 3)
    w.schedule("g-0", "g-1", "g-2")
    assert w.bound("g-0", "g-1", "g-2")
    disruption.decide()
    w.cluster.delete("", "Pod", "default", "g-0")  # below its quorum: the other two go
    evictions = disruption.decide()
    assert [sorted(v.pod for v in e.pods) for e in evictions] == [["default/g-1", "default/g-2"]]
    w.cluster.apply(gang_pod("g-3", "g", cpu="1"))  # its replacement, before the evictions land
    decision = w.filter("g-3")
    assert decision.verdict is Verdict.WAITING
    assert decision.reason.startswith("gang default/g: evicting 2 member(s) (below-quorum)"), decision.reason


def three_leaf_gang() -> list[dict]:
    """Gang x: subgroups a, b, c of two bound pods each (minMember 2, minSubGroup 1); a's pods are
    owned by PodGroup holder (any owner the store holds)."""
    holder = make_kai_podgroup("holder", min_member=1)
    holder["metadata"]["uid"] = "holder-uid"
    pg = make_kai_podgroup("x", subgroups=[{"name": s, "minMember": 2} for s in "abc"])
    pg["spec"]["minSubGroup"] = 1
    pods = []
    for i, name in enumerate(["x-a0", "x-a1", "x-b0", "x-b1", "x-c0", "x-c1"]):
        pod = running(name, group="x", kind="kai", node=f"n{i}")
        pod["metadata"].setdefault("labels", {})[keys.SUBGROUP_NAME] = name[2]
        if name[2] == "a":
            pod["metadata"]["annotations"][keys.SKIP_PODGROUPER] = "true"
            ref = {
                "apiVersion": holder["apiVersion"],
                "kind": "PodGroup",
                "name": "holder",
                "uid": "holder-uid",
            }
            pod["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
        pods.append(pod)
    return [holder, pg, *pods]


def test_a_broken_subgroup_beside_one_deleted_with_its_owner_is_still_evicted():
    """Leaf a goes with its owner (the garbage collector's) while leaf b loses a member: b's survivor
    goes whole; a's being the collector's must not end the look at the other leaves."""
    w = World(three_leaf_gang())
    assert w.decide() == []
    w.clocks.advance(1)
    holder = copy.deepcopy(w.cluster.get("scheduling.run.ai", "PodGroup", "default", "holder"))
    _marked(holder)
    w.cluster.apply(holder)
    w.remove("x-a1")  # the garbage collector's first deletion
    w.preempt("x-b1")  # and b loses a member meanwhile
    found = w.decide()
    assert sorted(v.pod.partition("/")[2] for ev in found for v in ev.pods) == ["x-b0"]


def test_a_broken_subgroups_eviction_refused_is_asked_again_after_the_retry_delay():
    """A PodDisruptionBudget answering 429: the survivor stays. A pass within RETRY_S found nothing due
    and wrote 'healthy' over 'evicting', which took the gang off the retried ones for good."""
    w = World(subgroup_gang(1))
    assert w.decide() == []
    w.clocks.advance(1)
    w.preempt("x-a1")
    first = w.logic.decide()  # asked for, and refused: x-a0 stays
    assert [v.pod for ev in first for v in ev.pods] == ["default/x-a0"]
    w.clocks.advance(1)
    assert w.logic.decide() == []
    assert w.logic.describe("default/x")["decision"].startswith("evicting")
    w.clocks.advance(RETRY_S + 1)
    again = w.logic.decide()
    assert [v.pod for ev in again for v in ev.pods] == ["default/x-a0"]
