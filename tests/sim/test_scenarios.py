"""Scenarios through the real HTTP service, driven as kube-scheduler would drive it.

After every scenario: no node over-committed and no gang bound below its quorum.
"""

from __future__ import annotations

import pytest

from extender.sim.cluster import BLOCK, RACK, TPU_SLICE, build_cluster
from extender.sim.driver import DriverOptions, PodOutcome, SimulationResult, simulate
from extender.sim.report import build_report, preemption_summary, queue_summary
from extender.sim.scenario import (
    SEED_DIR,
    builtin_scenario,
    contention_scenario,
    load_objects,
    preemption_scenario,
    queue_scenario,
)

pytest.importorskip("extender.server.app")

OPTIONS = DriverOptions(idle_timeout_s=30.0, idle_real_s=0.2, max_wall_s=40.0)


async def run(*objects: dict) -> SimulationResult:
    result = await simulate([*build_cluster(), *objects], options=OPTIONS)
    report = build_report(result)
    assert result.overcommit == []
    assert report["summary"]["gangs_partial"] == 0
    return result


def seed(name: str) -> list[dict]:
    return load_objects([str(SEED_DIR / name)])


def domains(result: SimulationResult, pods, label: str) -> set[str]:
    return {result.node_labels[p.node][label] for p in pods}


async def test_topo_training_workers_share_one_rack_and_the_driver_goes_anywhere() -> None:
    result = await run(*seed("topo-training.yaml"))
    assert all(p.outcome is PodOutcome.BOUND for p in result.pods)
    workers = [p for p in result.pods if "-workers-" in p.name]
    assert len(workers) == 4 and len(domains(result, workers, RACK)) == 1


async def test_kai_jobset_keeps_one_block_and_each_worker_replica_in_one_rack() -> None:
    result = await run(*seed("kai-jobset-topology.yaml"))
    assert all(p.outcome is PodOutcome.BOUND for p in result.pods)
    assert len(domains(result, result.pods, BLOCK)) == 1
    for replica in ("worker-0", "worker-1"):
        pods = [p for p in result.pods if f"-{replica}-" in p.name]
        assert len(pods) == 3 and len(domains(result, pods, RACK)) == 1


async def test_tpu_multislice_lands_in_one_slice() -> None:
    result = await run(*seed("tpu-multislice.yaml"))
    assert all(p.outcome is PodOutcome.BOUND for p in result.pods)
    assert len(domains(result, result.pods, TPU_SLICE)) == 1


async def test_sequenced_gang_starts_workers_only_after_the_leader_is_bound() -> None:
    result = await run(*seed("sequenced-gang.yaml"))
    assert all(p.outcome is PodOutcome.BOUND for p in result.pods)
    leader = next(p for p in result.pods if "-leader-" in p.name)
    workers = [p for p in result.pods if "-worker-" in p.name]
    assert len(workers) == 2 and all(w.created_s >= (leader.bound_s or 0) for w in workers)


async def test_contention_binds_one_gang_whole_and_the_other_waits_with_a_reason() -> None:
    result = await run(*contention_scenario())
    by_wl = {w["workload"]: w for w in build_report(result)["workloads"]}
    outcomes = sorted((w["pods_bound"], w["groups"][0]["state"]) for w in by_wl.values())
    assert outcomes == [(0, "waiting"), (5, "whole")]
    loser = next(w for w in by_wl.values() if w["pods_bound"] == 0)
    assert "rack" in loser["groups"][0]["reason"]
    winner = next(w for w in by_wl.values() if w["pods_bound"] == 5)
    assert len(winner["domains"]["rack"]) == 1


async def test_the_builtin_scenario_places_every_seed_workload_and_only_the_contention_loser_waits() -> None:
    result = await simulate(builtin_scenario(), options=OPTIONS)
    report = build_report(result)
    assert result.overcommit == [] and report["summary"]["gangs_partial"] == 0
    assert result.problems == [] and result.held == []
    waiting = {w["workload"] for w in report["workloads"] if w["pods_bound"] < w["pods_total"]}
    assert len(waiting) == 1 and next(iter(waiting)).startswith("JobSet contention/")


async def test_an_urgent_jobset_evicts_the_cheapest_gangs_whole_and_lands_in_the_rack_they_freed() -> None:
    result = await simulate(preemption_scenario(), options=OPTIONS)
    assert result.overcommit == [] and build_report(result)["summary"]["gangs_partial"] == 0
    rep = preemption_summary(result)
    assert [(e["workload"], e["bound"], e["pods"], e["racks"]) for e in rep["arrived"]] == [
        ("JobSet preemption/urgent", 8, 8, ["p-r0"])
    ]
    # the two priority-100 gangs of rack p-r0, whole; the priority-500 gang of p-r1 is left alone
    assert [(e["workload"], e["evicted"], e["pods"], e["whole"]) for e in rep["evicted"]] == [
        ("PodGroup preemption/batch-a", 2, 2, True),
        ("PodGroup preemption/batch-b", 2, 2, True),
    ]
    assert [(e["workload"], e["bound"]) for e in rep["untouched"]] == [("PodGroup preemption/research", 4)]


async def test_two_queues_a_limit_held_fair_shares_and_one_whole_gang_reclaimed() -> None:
    result = await simulate(queue_scenario(), options=OPTIONS)
    assert result.overcommit == [] and build_report(result)["summary"]["gangs_partial"] == 0
    rep = queue_summary(result)
    assert rep["breaches"] == []
    queues = {q["queue"]: q for q in rep["queues"]}
    a, b = queues["team-a"], queues["team-b"]
    # team-a's limit is reached, never passed, and its third gang waits on it with the numbers
    assert (a["limit"], a["peak"], a["allocated"]) == (12, 12, 12)
    assert a["held"] == {"queues/a3": "queue team-a: gpu limit 12, in use 12, gang needs 8"}
    # 48 GPUs: team-a's share is its limit, team-b gets the rest it asks for; each gets no more
    assert (a["fairShare"], b["fairShare"]) == (12, 36)
    # team-b runs 32 GPUs (within its share); its gang still waiting holds the 8 it will fit in once
    # they drain, and a hold is charged to its queue like the plan it becomes
    assert b["allocated"] == 32 + 8 and b["peak"] == 40
    # the reclaim: one team-b gang, whole, and team-b never below its quota
    assert [(e["workload"], e["queue"], e["evicted"], e["pods"], e["whole"]) for e in rep["evicted"]] == [
        ("PodGroup queues/b5", "team-b", 2, 2, True)
    ]
    assert b["lowAfterEviction"] == 32 >= b["quota"] == 8 and b["quotaKept"] is True
    assert [(p["workload"], p["bound"]) for p in rep["placed"]] == [
        ("PodGroup queues/a1", 2),
        ("PodGroup queues/a2", 4),
    ]
    assert [(w["gang"], w["queue"]) for w in rep["waiting"]] == [("queues/b6", "team-b")]
    # on the way: team-b's extra gang held by fair share while team-a, below its share, waited for
    # the same capacity; team-a's first 8-GPU gang reclaiming
    reasons = {(t["gang"], t["reason"].split(" (")[0].split(":")[0]) for t in rep["turnedAway"]}
    assert reasons == {
        ("queues/b6", "queue team-b is at its fair share of gpu"),
        ("queues/a2", "queue team-a is below its fair share"),
        ("queues/a3", "queue team-a"),
    }
    b6 = next(t["reason"] for t in rep["turnedAway"] if t["gang"] == "queues/b6")
    assert b6.endswith("waits for the same capacity: held so that queue team-a gets its share first")


async def test_the_stream_scenario_large_gang_is_held_and_binds_while_small_gangs_keep_coming() -> None:
    """Without its hold the large gang binds during the stream only when the small gangs happen to
    leave a rack empty (they did in some runs, not in others: see bench versus's stream for the
    measured starvation); with it, it is held from its first pass and starts within one small gang's
    life, every time."""
    from extender.sim.stream import (
        LARGE_AT_S,
        SMALL_LIFE_S,
        WATCHED,
        stream_arrivals,
        stream_cluster,
        stream_failed,
        stream_summary,
    )

    result = await simulate(stream_cluster(), options=OPTIONS, arrivals=stream_arrivals(), watch_gang=WATCHED)
    rep = stream_summary(result)
    assert rep["overcommit"] == [] and not rep["large"]["partial"] and len(rep["large"]["racks"]) == 1
    assert rep["small"]["whole"] == rep["small"]["gangs"] == 40
    assert rep["large"]["boundDuringStream"] and not stream_failed(rep)
    assert rep["large"]["held"].startswith(f"gang {WATCHED} holds rack {rep['large']['racks'][0]} (")
    assert rep["large"]["drained"][-1].endswith("4/4")
    # held from its first pass (the holding pass after the gang's first no-fit, a few of kube-scheduler's
    # queue turns after it arrives), it starts within one small gang's life of the hold: the youngest
    # small gang in the held rack may have started just before it. Measured from its arrival, the
    # bound failed when the hold came 3 s late on a rack whose small gang was 1.5 s old (25.5 s)
    assert rep["large"]["heldFromS"] <= LARGE_AT_S + 5, rep["large"]
    assert rep["large"]["boundS"] <= rep["large"]["heldFromS"] + SMALL_LIFE_S + 3, rep["large"]
