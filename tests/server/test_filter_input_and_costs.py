"""A planned member's filter answers bad input as any other does (400), and a big gang costs the
event loop work in proportion to what changed, not to its size: its assembly, its deletion and
other pods' arrivals.

Work is counted (PodRecords handed out by ClusterStore.group_members, the accessor every caller uses
to walk a gang), never timed, so nothing here depends on the machine's load.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from extender.model.labels import SUBGROUP_NAME
from extender.scheduling.disruption import GangDisruption
from extender.scheduling.ledger import GangLedger
from extender.scheduling.scheduler import Scheduler
from extender.server.app import SCHEDULER
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod


# ------------------------------------------------------------------ the planned-member fast path
def _raw_filter(pod: dict[str, Any], names_array: bytes) -> bytes:
    """A filter body exactly as Go marshals ExtenderArgs (Pod, Nodes, NodeNames), with the given
    NodeNames bytes."""
    return b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + names_array + b"}"


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b",5]", "a NodeNames entry that is not a string"),
        (b',{"a":1}]', "a NodeNames entry that is an object"),
        (b",,]", "malformed JSON"),
        (b',"ghost-node"]', "a node the cache does not hold"),
    ],
)
async def test_a_planned_members_filter_answers_bad_node_names_with_400(make_service, tail, why):
    """The promise: bad input is HTTP 400 with a reason, on every path. A planned member's filter is
    answered from the plan when its planned node's name appears in the raw NodeNames bytes; it
    decoded nothing else, so the same body was a 400 for a pod with no plan and a 200 for a planned
    one."""
    svc = await make_service()
    svc.cluster.apply(make_kai_podgroup("g", min_member=2))
    pods = [svc.cluster.apply(gang_pod(f"g{i}", "g", cpu="1")) for i in range(2)]
    status, body = await svc.post("filter", {"Pod": pods[0], "Nodes": None, "NodeNames": ["n000", "n001"]})
    assert status == 200 and orjson.loads(body)["NodeNames"], body
    planned = svc.app[SCHEDULER].ledger.planned_node("default/g1", pods[1]["metadata"]["uid"])
    assert planned is not None

    # the same bad tail for a plain pod (no plan): a 400, as promised
    plain = svc.cluster.apply(make_pod("plain", cpu="1"))
    status, text = await svc.post("filter", raw=_raw_filter(plain, b'["n000"' + tail))
    assert status == 400, (why, text)

    # for the planned member: answered 200 with its planned node, the bad input unseen
    status, text = await svc.post("filter", raw=_raw_filter(pods[1], b'["' + planned.encode() + b'"' + tail))
    assert status == 400, f"{why}: answered {status} {text[:200]!r}"


# ------------------------------------------------------------------ work proportional to a gang
class _World:
    """The scheduler over an embedded cluster, as the service runs it (the disruption listener too)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = ClusterStore()
        self.cluster = EmbeddedCluster(objects)
        self.cluster.attach(self.store)
        clock = lambda: 1000.0  # noqa: E731
        self.ledger = GangLedger(
            self.store, wait_s=5, hold_s=30, backoff_initial_s=2, backoff_max_s=60, clock=clock
        )
        self.disruption = GangDisruption(self.store, self.ledger, clock=clock, wall_clock=lambda: 1.0e9)
        self.scheduler = Scheduler(self.store, self.ledger, disruption=self.disruption)


class _MemberWalks:
    """Counts the PodRecords ClusterStore.group_members hands out: a walk over a gang's members."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records = 0
        original = ClusterStore.group_members

        def counted(store: ClusterStore, group: Any) -> Any:
            out = original(store, group)
            self.records += len(out)
            return out

        monkeypatch.setattr(ClusterStore, "group_members", counted)

    def take(self) -> int:
        out, self.records = self.records, 0
        return out


def _nodes(n: int) -> list[dict[str, Any]]:
    return [make_node(f"n{i}", cpu="64", memory="256Gi") for i in range(n)]


def _deleting_a_bound_gang_walks(n: int, monkeypatch: pytest.MonkeyPatch) -> int:
    objs = [*_nodes(20), make_kai_podgroup("g", min_member=n)]
    objs += [gang_pod(f"g{i}", "g", cpu="100m", memory="64Mi", node=f"n{i % 20}") for i in range(n)]
    w = _World(objs)
    w.scheduler.tick(synced=True)  # the first synced pass: disruption has scanned the cluster
    walks = _MemberWalks(monkeypatch)
    for i in range(n):  # the garbage collector deletes the gang's pods (its Job was deleted)
        w.cluster.delete("", "Pod", "default", f"g{i}")
    return walks.take()


def test_deleting_a_bound_gang_costs_work_linear_in_its_size(monkeypatch):
    """One watch event must not walk the whole workload. Each bound member's deletion (the garbage
    collector removing a finished or deleted Job's pods, a node drained) walked every remaining member
    to note the survivors (disruption.py `_on_change`), so a gang of N pods cost N*(N-1)/2 record
    visits on the event loop: measured 0.39 s for 1,000 pods, 6.1 s for 4,000 (about 40 s for a
    10,000-replica JobSet) while every filter and bind waits behind the watch."""
    small = _deleting_a_bound_gang_walks(100, monkeypatch)
    big = _deleting_a_bound_gang_walks(800, monkeypatch)
    # linear work grows 8x from 100 to 800 pods; quadratic 64x
    assert big <= 12 * max(small, 100), f"100 pods: {small} member records walked; 800 pods: {big}"


def _waiting_member_filter_walks(n: int, monkeypatch: pytest.MonkeyPatch, *, subgroups: bool) -> int:
    if subgroups:  # two subgroups (a JobSet's leader and workers, say); the workers one pod short
        sgs = [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": n}]
        objs = [*_nodes(10), make_kai_podgroup("g", subgroups=sgs)]
        objs += [
            gang_pod(
                f"g{i}", "g", cpu="100m", memory="64Mi", labels={SUBGROUP_NAME: "workers" if i else "leader"}
            )
            for i in range(n)
        ]
    else:
        objs = [*_nodes(10), make_kai_podgroup("g", min_member=n + 1)]  # one pod short of its quorum
        objs += [gang_pod(f"g{i}", "g", cpu="100m", memory="64Mi") for i in range(n)]
    w = _World(objs)
    names = [f"n{i}" for i in range(10)]
    w.scheduler.filter(w.cluster.get("", "Pod", "default", "g0"), names)  # the gang is known now
    walks = _MemberWalks(monkeypatch)
    decision = w.scheduler.filter(w.cluster.get("", "Pod", "default", "g1"), names)
    assert "waiting for pods" in decision.reason, decision.reason
    return walks.take()


@pytest.mark.parametrize("subgroups", [False, True], ids=["one-leaf", "subgroups"])
def test_a_waiting_members_filter_does_not_walk_the_whole_gang(monkeypatch, subgroups):
    """A verb must not do work proportional to a workload. While a gang waits for its pods, every
    member's filter walked every member (filtering.py `_filter_gang`: the member list, then
    bound_counts), only to answer "N exist, M needed": 20-25 ms a call at 10,000 members, so the
    gang's assembly cost the event loop O(N^2) (each of its pods filtered at least once). A gang
    with subgroups (a JobSet's) answers from the store's counts by subgroup."""
    small = _waiting_member_filter_walks(100, monkeypatch, subgroups=subgroups)
    big = _waiting_member_filter_walks(1000, monkeypatch, subgroups=subgroups)
    assert big <= 2 * max(small, 50), f"100 members: {small} records walked per filter; 1000: {big}"


def _tick_after_an_unrelated_pod_walks(n: int, monkeypatch: pytest.MonkeyPatch) -> int:
    objs = [*_nodes(10), make_kai_podgroup("g", min_member=n + 1)]
    objs += [gang_pod(f"g{i}", "g", cpu="100m", memory="64Mi") for i in range(n)]
    w = _World(objs)
    w.scheduler.filter(w.cluster.get("", "Pod", "default", "g0"), [f"n{i}" for i in range(10)])
    w.scheduler.tick(synced=True)
    walks = _MemberWalks(monkeypatch)
    w.cluster.apply(make_pod("unrelated", cpu="1"))  # a plain pod anywhere in the cluster
    w.scheduler.tick(synced=True)
    return walks.take()


def test_an_unrelated_pod_costs_the_ticker_no_walk_of_a_waiting_gang(monkeypatch):
    """The ticker runs on the event loop up to ten times a second. After any pod is created anywhere
    (pods_added moves), `Telling.quorum_arrived` re-derived every gang short of pods from all its
    members, twice (spec_of(group_members), then live_leaf_counts): 12-15 ms a tick at 10,000
    members, on every tick of a busy cluster, for a gang that is still one pod short. Only a gang
    whose own members changed is looked at again."""
    small = _tick_after_an_unrelated_pod_walks(100, monkeypatch)
    big = _tick_after_an_unrelated_pod_walks(1000, monkeypatch)
    assert big <= 2 * max(small, 50), f"100 members: {small} records walked per tick; 1000: {big}"
