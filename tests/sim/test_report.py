"""The report: per workload gangs, pods, nodes and domains; a loud flag for a partial gang."""

from __future__ import annotations

import json

from extender.sim.cluster import BLOCK, RACK
from extender.sim.driver import PodOutcome, PodRecord, SimulationResult, StopReason
from extender.sim.expand import Workload
from extender.sim.report import build_report, gangs_from_debug, to_json, to_text

NODES = {"n1": {RACK: "r1", BLOCK: "b0"}, "n2": {RACK: "r2", BLOCK: "b0"}}


def rec(workload: str, name: str, node: str | None = None, msg: str = "") -> PodRecord:
    r = PodRecord(
        namespace="ml",
        name=name,
        workload=workload,
        scheduler_name="gang-scheduler",
        created_s=0.0,
        attempts=1,
        last_message=msg,
    )
    if node:
        r.node, r.bound_s, r.outcome = node, 0.25, PodOutcome.BOUND
    return r


def result() -> SimulationResult:
    pods = [
        rec("JobSet ml/good", "good-0", "n1"),
        rec("JobSet ml/good", "good-1", "n1"),
        rec("JobSet ml/half", "half-0", "n2"),
        rec("JobSet ml/half", "half-1", None, "gang ml/half: waiting"),
        rec("JobSet ml/wait", "wait-0", None, "gang ml/wait (2 pods, rack): best rack r2 fits 1 of 2"),
        rec("Job ml/solo", "solo-0", "n2"),
    ]
    gangs = {
        "gangs": [
            {
                "gang": "ml/good",
                "quorum": 2,
                "policy": "gang",
                "members": [{"pod": "ml/good-0"}, {"pod": "ml/good-1"}],
            },
            {
                "gang": "ml/half",
                "quorum": 2,
                "policy": "gang",
                "members": [{"pod": "ml/half-0"}, {"pod": "ml/half-1"}],
            },
            {
                "gang": "ml/wait",
                "quorum": 2,
                "policy": "gang",
                "members": [{"pod": "ml/wait-0"}],
                "lastReason": "",
            },
        ]
    }
    workloads = [Workload("JobSet", "ml", n) for n in ("good", "half", "wait")] + [
        Workload("Job", "ml", "solo")
    ]
    return SimulationResult(
        pods=pods,
        workloads=workloads,
        node_labels=NODES,
        gangs_debug=gangs,
        problems=[],
        held=[],
        overcommit=[],
        wall_s=1.5,
        sim_s=12.0,
        stop_reason=StopReason.IDLE,
        requests={"filter": 9},
    )


def test_gang_states_whole_partial_waiting_and_loose() -> None:
    rep = build_report(result())
    states = {w["workload"]: [g["state"] for g in w["groups"]] for w in rep["workloads"]}
    assert states == {
        "JobSet ml/good": ["whole"],
        "JobSet ml/half": ["PARTIAL"],
        "JobSet ml/wait": ["waiting"],
        "Job ml/solo": ["loose"],
    }
    s = rep["summary"]
    assert (s["pods_bound"], s["pods_total"], s["gangs_whole"], s["gangs_partial"], s["gangs_waiting"]) == (
        4,
        6,
        1,
        1,
        1,
    )


def test_a_waiting_gang_borrows_its_pods_reason_when_the_service_gives_none() -> None:
    wait = next(w for w in build_report(result())["workloads"] if w["workload"] == "JobSet ml/wait")
    assert wait["groups"][0]["reason"].startswith("gang ml/wait (2 pods, rack): best rack r2")


def test_domains_count_pods_per_rack_and_block() -> None:
    good = build_report(result())["workloads"][0]
    assert good["domains"] == {"block": {"b0": 2}, "rack": {"r1": 2}}


def test_text_flags_a_partial_gang_loudly_and_ends_with_the_summary() -> None:
    text = to_text(result())
    assert "!!! PARTIAL GANG ml/half (JobSet ml/half): 1 bound, quorum 2" in text
    assert "PENDING wait-0: gang ml/wait (2 pods, rack): best rack r2 fits 1 of 2" in text
    last = text.splitlines()[-1]
    assert last.startswith("pods bound 4/6 · gangs whole 1, waiting 1, PARTIAL 1")


def test_json_is_the_same_report() -> None:
    assert json.loads(to_json(result())) == json.loads(json.dumps(build_report(result())))


def test_debug_gangs_shapes_are_read_tolerantly() -> None:
    assert gangs_from_debug(None) == []
    assert (
        gangs_from_debug({"gangs": [{"gang": "a/b", "members": ["a/p"], "minMember": 3}]})[0]["quorum"] == 3
    )
    assert gangs_from_debug([{"key": "a/b", "members": [{"key": "a/p"}]}])[0]["members"] == ["a/p"]
    assert gangs_from_debug({"gangs": ["junk", {"no": "key"}]}) == []
