"""API calls failing mid-work, where features meet: a single pod's binding whose answer was lost, a
preemption victim's eviction a disruption budget refused, a gang's status the API server did not
take."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.scheduling.ledger import EVICTED_UNSEEN_S, UNCONFIRMED_S
from extender.state.source import BindError
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod, rack_cluster
from tests.scheduling.test_preemptor import settle


def bound_copy(pod: dict, node: str) -> dict:
    """The pod as the watch shows it once its binding landed on `node`."""
    return {**pod, "spec": {**pod["spec"], "nodeName": node}}


async def lo_preempted_by_hi(make_service, evictions: type) -> tuple[Any, Any]:
    """hi (two whole nodes in one rack) preempting gang lo on rack r00, x and y running in r01, with
    `evictions` (called with the cluster) standing in for the Eviction API: the service and it."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, victim_gang

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    ev = svc.cluster.evict_pod = evictions(svc.cluster)
    await svc.filter("hi-0")
    await settle()
    return svc, ev


async def replace_preemptor_pods(svc, names: tuple[str, ...] = ("hi-0", "hi-1")) -> None:
    """The preemptor's Job replaces its pods (deleted, then created again under new uids): its
    preemption is forgotten (every member left at once) and the new pods start afresh."""
    pods = [svc.pod(name) for name in names]
    for pod in pods:
        svc.cluster.delete("", "Pod", "default", pod["metadata"]["name"])
    await settle()
    assert svc.scheduler.ledger.preemption("default/hi") is None
    for pod in pods:
        svc.cluster.apply({**pod, "metadata": {**pod["metadata"], "uid": pod["metadata"]["name"] + "-again"}})
    await settle()


# ------------------------------------------------------------------ 1: a single pod's lost reply
@pytest.mark.parametrize("lands", [True, False], ids=["landed", "never-landed"])
async def test_a_single_pods_binding_whose_answer_was_lost_keeps_its_room_until_the_watch_tells(
    make_service, monkeypatch, lands
):
    """p1's binding POST gets no answer (the connection cut, every retry unanswered): the bind is
    answered with the error, but the API server may have applied it. Until the watch shows p1 bound,
    its room on n0 is not free (a second pod bound there meanwhile would over-commit n0 once p1's
    binding shows); a binding that never lands gives it back once no request can land any more."""
    svc = await make_service([make_node("n0", cpu="8"), make_pod("p1", cpu="6"), make_pod("p2", cpu="6")])
    landed: list[dict] = []

    async def lost_reply(*, namespace, name, uid, node, persist_s=0.0):
        if lands:
            landed.append(bound_copy(svc.pod(name, namespace), node))  # applied at the API server...
        raise BindError(
            f"could not reach the API server to bind {namespace}/{name} to {node}: reset", unknown=True
        )

    monkeypatch.setattr(svc.cluster, "bind_pod", lost_reply)
    assert (await svc.filter("p1", ["n0"]))["NodeNames"] == ["n0"]
    error = await svc.bind("p1", "n0")
    assert "could not reach the API server" in error
    monkeypatch.undo()
    # kube-scheduler forgets p1 and offers n0 to p2: the service keeps p1's room
    await svc.expire(10.0)
    doc = await svc.filter("p2", ["n0"])
    assert doc["NodeNames"] == [], doc
    svc.check_invariants()
    if lands:
        svc.cluster.apply(landed[0])  # ...and the watch shows p1's binding at last
        await settle()
        assert svc.scheduler.ledger.unconfirmed == {} and svc.store.reservations == {}
    else:
        await svc.expire(UNCONFIRMED_S)  # no request the API server took can land now
        assert svc.store.reservations == {}
        assert (await svc.filter("p2", ["n0"]))["NodeNames"] == ["n0"]
    svc.check_invariants()


# ------------------------------------------------------------------ 2: a preemption's refused eviction
class RefusedOnce:
    """The Eviction API with a PodDisruptionBudget that refuses `refuse`'s first eviction (429: a
    sibling it covers was unhealthy for a moment) and allows every later one; an allowed eviction
    deletes the pod at once."""

    def __init__(self, cluster, refuse: str) -> None:
        self.cluster, self.refuse = cluster, refuse
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        pod = self.cluster.get("", "Pod", namespace, name)
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            return True
        if name == self.refuse and self.calls.count(name) == 1:
            return False  # 429: "Cannot evict pod as it would violate the pod's disruption budget"
        self.cluster.delete("", "Pod", namespace, name)
        return True


async def test_a_preemption_victim_whose_eviction_a_budget_refused_once_is_asked_again(make_service):
    """hi (priority 1000, two whole nodes in one rack) preempts gang lo (priority 10) in rack r00;
    rack r01 runs x and y (priority 50). lo-0 goes; lo-1's eviction is refused once by its
    PodDisruptionBudget, which allows it a moment later. Asked again, lo-1 goes, and hi is planned
    into r00. Never asked again (as before), gang lo ran partial for the whole hold, then n000's
    room, freed for hi, was everyone's, and hi evicted a second set, x and y, in the other rack."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, victim_gang

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    evictions = RefusedOnce(svc.cluster, refuse="lo-1")
    svc.cluster.evict_pod = evictions
    await svc.filter("hi-0")
    await settle()
    assert svc.scheduler.ledger.preemption("default/hi").domain == "rack r00"
    assert svc.pod("lo-0") is None and svc.pod("lo-1") is not None  # refused: lo runs partial for now
    for _ in range(3):  # the service's ticks, 5 s apart
        await svc.expire(5.0)
        await settle()
    assert evictions.calls == ["lo-0", "lo-1", "lo-1"], evictions.calls  # asked again once, after RETRY_S
    assert svc.pod("lo-1") is None
    node, reason = await svc.schedule("hi-0")
    assert node in ("n000", "n001"), reason
    assert evictions.calls == ["lo-0", "lo-1", "lo-1"], "a second set of victims"
    svc.check_invariants()


class AcceptedSeenLate:
    """The Eviction API accepting every eviction, and the watch showing the deletions only when
    `show` is called (a watch that lags the API server's answer)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []
        self._unseen: list[tuple[str, str]] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        self._unseen.append((namespace, name))
        return True

    def show(self) -> None:
        for namespace, name in self._unseen:
            self.cluster.delete("", "Pod", namespace, name)
        self._unseen.clear()


async def test_a_victim_whose_accepted_eviction_the_watch_shows_late_is_not_a_victim_twice(make_service):
    """hi preempts gang lo in rack r00; the API server accepts both evictions but the watch shows
    them late. Past its hold the preemption holds on (its victims are going, as Terminating ones
    are). Then hi's Job replaces its pods, which ends the preemption: the new hi-0's filter must not
    pick lo again (asking its evictions a second time) nor evict x and y in r01 for room already on
    its way: lo's room counts as coming and hi waits for it; the queue book counts lo as leaving
    meanwhile. Seed 2853 of the interleavings under hash seed 9 (a preemption ended by a node's
    change)."""

    svc, evictions = await lo_preempted_by_hi(make_service, AcceptedSeenLate)
    assert sorted(evictions.calls) == ["lo-0", "lo-1"]
    ledger = svc.scheduler.ledger
    await svc.expire(ledger.preemption("default/hi").hold_s + 1)
    await settle()
    assert ledger.preemption("default/hi") is not None  # past its hold, its victims going: held on
    await replace_preemptor_pods(svc)  # its Job replaces its pods: the preemption is forgotten
    assert sorted(ledger.victims_in_flight()) == ["default/lo-0", "default/lo-1"]  # leaving their queue
    doc = await svc.filter("hi-0")
    await settle()
    assert doc["NodeNames"] == [], doc
    assert sorted(evictions.calls) == ["lo-0", "lo-1"], "a victim asked twice, or a second set evicted"
    evictions.show()
    await settle()
    assert ledger.evictions_under_way() == []
    node, reason = await svc.schedule("hi-0")
    assert node in ("n000", "n001"), reason
    svc.check_invariants()


class SlowAccepted:
    """The Eviction API answering only when `answer()` is called (a slow API server), then accepting;
    the watch shows the deletions only when `show()` is called."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []
        self.gate = asyncio.Event()
        self._unseen: list[tuple[str, str]] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        await self.gate.wait()
        self._unseen.append((namespace, name))
        return True

    def answer(self) -> None:
        self.gate.set()

    def show(self) -> None:
        for namespace, name in self._unseen:
            self.cluster.delete("", "Pod", namespace, name)
        self._unseen.clear()


async def test_an_eviction_still_unanswered_when_its_preemption_ends_is_not_asked_again(make_service):
    """hi preempts gang lo in r00; the Eviction API is slow to answer. hi's Job replaces its pods
    while the evictions are still out, which ends the preemption. The new hi-0's filter must not
    take lo as victims again: their evictions are already asked (only the answer is late)."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, victim_gang

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    evictions = SlowAccepted(svc.cluster)
    svc.cluster.evict_pod = evictions
    await svc.filter("hi-0")
    await settle()
    assert evictions.calls == ["lo-0"]  # asked, not answered yet (the next waits its turn)
    await replace_preemptor_pods(svc)  # its Job replaces its pods: the preemption is forgotten
    await svc.filter("hi-0")
    await settle()
    evictions.answer()
    await settle()
    await settle()
    assert sorted(evictions.calls) == ["lo-0", "lo-1"], f"a victim asked twice: {evictions.calls}"
    assert svc.pod("lo-0") is not None  # accepted, and the watch has not shown it: still going
    evictions.show()
    await settle()
    node, reason = await svc.schedule("hi-0")
    assert node in ("n000", "n001"), reason
    svc.check_invariants()


async def test_a_refused_eviction_is_no_longer_counted_as_going(make_service):
    """A victim's eviction a budget refuses (429) is not going: a preemption ending meanwhile leaves
    it an ordinary pod, which a later preemption may take (its eviction asked again then)."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, victim_gang

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    evictions = RefusedOnce(svc.cluster, refuse="lo-1")
    svc.cluster.evict_pod = evictions
    await svc.filter("hi-0")
    await settle()
    ledger = svc.scheduler.ledger
    rec = svc.store.pods["default/lo-1"]
    assert not ledger.eviction_under_way(rec.key, rec.uid)
    assert svc.store.pods.get("default/lo-0") is None


async def test_an_accepted_eviction_the_watch_never_shows_is_forgotten(make_service):
    """The memory of an accepted eviction is bounded: past EVICTED_UNSEEN_S without the watch showing
    it (a pod the API server kept after all), the pod is an ordinary pod again."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, victim_gang

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    svc.cluster.evict_pod = AcceptedSeenLate(svc.cluster)
    await svc.filter("hi-0")
    await settle()
    ledger = svc.scheduler.ledger
    rec = svc.store.pods["default/lo-0"]
    assert ledger.eviction_under_way(rec.key, rec.uid)
    assert not ledger.eviction_under_way(rec.key, "another-uid")  # a pod of the name created since
    await svc.expire(EVICTED_UNSEEN_S - 1)
    assert ledger.evictions_under_way() != []
    await svc.expire(1)
    assert ledger.evictions_under_way() == []


# ------------------------------------------------------------------ 3: a PodGroup status write lost
async def test_a_gangs_running_status_whose_write_failed_is_written_again(make_service, monkeypatch):
    """A gang waits for its third pod (its PodGroup is written Pending with the reason), then binds
    whole; the PodGroup's Running write meets an API server answering 500 on every try. It is written
    again once the API server is well (never written again, as before, the PodGroup said Pending,
    Unschedulable, for a gang that runs)."""
    objs = [*rack_cluster(), make_kai_podgroup("train", min_member=3)]
    objs += [gang_pod(f"train-{i}", "train") for i in range(2)]
    svc = await make_service(objs)
    assert (await svc.filter("train-0"))["NodeNames"] == []  # 2 of 3 exist
    await svc.expire(1.0)
    for _ in range(20):
        await asyncio.sleep(0)
    pg = svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "train")
    assert (pg.get("status") or {}).get("phase") == "Pending", pg.get("status")
    real = svc.cluster.patch_group_status
    failing = {"on": True}

    async def busy(**kw):
        if failing["on"]:
            return False  # 500 "etcdserver: request timed out" after every try: write it again later
        await real(**kw)

    monkeypatch.setattr(svc.cluster, "patch_group_status", busy)
    svc.cluster.apply(gang_pod("train-2", "train"))
    nodes = {}
    for name in ("train-0", "train-1", "train-2"):
        node, why = await svc.schedule(name)
        assert node, why
        nodes[name] = node
    assert await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes)) == ["", "", ""]
    for _ in range(20):
        await asyncio.sleep(0)
    failing["on"] = False  # the API server is well again
    for _ in range(6):
        await svc.expire(10.0)
        for _ in range(20):
            await asyncio.sleep(0)
    status = svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "train").get("status") or {}
    assert status.get("phase") == "Running", status


async def test_a_running_gangs_counts_follow_members_bound_beyond_its_quorum(make_service):
    """A Job's gang of minMember 2 binds its first two pods (the PodGroup is written Running, 2
    running); its controller creates four more, which are placed as they come. The PodGroup's
    running and pending counts follow within a tick (KAI's own status does): they said 2 running,
    0 pending for good while six pods ran (a flake of the end-to-end PodGroup test on a loaded
    machine, where the Job controller created its pods after the first two bound)."""
    objs = [*rack_cluster(), make_kai_podgroup("train", min_member=2)]
    objs += [gang_pod(f"train-{i}", "train", cpu="1") for i in range(2)]
    svc = await make_service(objs)
    for name in ("train-0", "train-1"):
        node, why = await svc.schedule(name)
        assert node and await svc.bind(name, node) == "", why
    await svc.expire(1.0)
    await settle()
    status = svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "train").get("status") or {}
    assert (status.get("phase"), status.get("running")) == ("Running", 2), status
    for i in range(2, 6):
        svc.cluster.apply(gang_pod(f"train-{i}", "train", cpu="1"))
        node, why = await svc.schedule(f"train-{i}")
        assert node and await svc.bind(f"train-{i}", node) == "", why
    await svc.expire(1.0)
    await settle()
    status = svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "train").get("status") or {}
    assert (status.get("phase"), status.get("running"), status.get("pending")) == ("Running", 6, 0), status
    svc.cluster.delete("", "Pod", "default", "train-5")  # one finishes and goes: counted again
    await svc.expire(1.0)
    await settle()
    status = svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "train").get("status") or {}
    assert (status.get("running"), status.get("pending")) == (5, 0), status
