"""Pods that run: a rack of kwok nodes (controlplane/kwok.py) whose pods kwok runs, makes Ready and, for
a Job's pods that say how long they run, completes, so what happens after a gang is bound is real.

- A gang Job fills the kwok rack and runs; a second gang that needs the same rack waits whole. The first
  Job's pods exit one by one (kwok's delay and jitter) and are Succeeded; the real Job controller marks
  the Job Complete. While it finishes the first gang is neither stale nor broken (its finished members
  count toward its quorum: no pod of it evicted, no GangDisrupted, no GangEvicted); once its members are
  done the rack is free and the second gang binds whole there, soon, and never beside a pod still running.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from controlplane import kwok
from controlplane.start import Api, wait_until
from test_e2e_disruption import told
from test_e2e_gangs import RACK, bound_nodes, pending_reasons, pods, wait_all_bound
from test_e2e_job_scheduling import JOBS, job

from extender.model import labels as keys

if TYPE_CHECKING:
    from conftest import Cluster

NODES, NODE_CPU = 3, "4"
RUNS_S, JITTER_S = 2, 6  # the first Job's pods exit between 2 and 6 s after they start
FINISH_WITHIN_S = 60.0
REBIND_WITHIN_S = 15.0  # the waiting gang binds this soon after the rack is free (stamps have 1 s grain)


def gang_job(name: str, namespace: str, *, runs: bool) -> dict[str, Any]:
    """A Job of three whole-node pods, one KAI gang (a required rack), placed on the kwok nodes; `runs`:
    its pods exit after a while, otherwise they run until deleted."""
    obj = job(name, namespace, count=NODES, cpu=NODE_CPU)
    obj["metadata"]["annotations"] = {
        keys.BATCH_MIN_MEMBER: str(NODES),
        keys.TOPOLOGY: "dc",
        keys.TOPOLOGY_REQUIRED: RACK,
    }
    template = obj["spec"]["template"]
    template["spec"].update(kwok.placement())
    if runs:
        template.setdefault("metadata", {})["annotations"] = {
            "pod-complete.stage.kwok.x-k8s.io/delay": f"{RUNS_S}s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": f"{JITTER_S}s",
        }
    return obj


def _time(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _running(items: list[dict[str, Any]]) -> bool:
    return all(
        p["status"].get("phase") == "Running" and (_condition(p, "Ready") or {}).get("status") == "True"
        for p in items
    )


def _finished_at(pod: dict[str, Any]) -> datetime.datetime:
    states = [s["state"]["terminated"]["finishedAt"] for s in pod["status"]["containerStatuses"]]
    return max(_time(s) for s in states)


def test_a_gang_job_runs_to_completion_and_the_next_gang_gets_its_rack(
    cluster: Cluster, namespace: str
) -> None:
    api: Api = cluster.plane.api
    with kwok.kwok_rack(cluster.plane, nodes=NODES, cpu=NODE_CPU) as names:
        api.create(JOBS.format(ns=namespace), gang_job("first", namespace, runs=True))
        first = wait_all_bound(api, namespace, NODES, "job-name=first")
        assert sorted(bound_nodes(first)) == names
        wait_until(
            lambda: _running(pods(api, namespace, "job-name=first")),
            timeout_s=30,
            what="kwok to run the first gang's pods (Running, Ready)",
        )

        api.create(JOBS.format(ns=namespace), gang_job("second", namespace, runs=False))
        waiting = wait_until(
            lambda: (lambda got: got if len(got) == NODES else None)(pods(api, namespace, "job-name=second")),
            timeout_s=30,
            what="the second Job's pods",
        )

        def done() -> list[dict[str, Any]] | None:
            got = pods(api, namespace, "job-name=first")
            return got if all(p["status"].get("phase") == "Succeeded" for p in got) else None

        finished = wait_until(
            done, timeout_s=FINISH_WITHIN_S, what="the first gang's pods to exit (Succeeded)"
        )
        complete = wait_until(
            lambda: _condition(api.get(f"{JOBS.format(ns=namespace)}/first"), "Complete"),
            timeout_s=30,
            what="the Job controller to mark the first Job Complete",
        )
        assert complete["status"] == "True", complete

        second = wait_all_bound(api, namespace, NODES, "job-name=second")
        assert sorted(bound_nodes(second)) == names
        last_exit = max(_finished_at(p) for p in finished)
        for pod in second:
            scheduled = _condition(pod, "PodScheduled")
            assert scheduled is not None and scheduled["status"] == "True", pod["status"]
            assert _time(scheduled["lastTransitionTime"]) >= last_exit, (
                f"{pod['metadata']['name']} bound at {scheduled['lastTransitionTime']}, before the first "
                f"gang's last pod exited at {last_exit:%H:%M:%S}: a node held two whole-node pods"
            )
            waited_s = (_time(scheduled["lastTransitionTime"]) - last_exit).total_seconds()
            assert waited_s <= REBIND_WITHIN_S, (
                f"the freed rack went to the waiting gang {waited_s:.0f} s after the first gang finished"
            )
        # while it waited, the second gang said why
        assert any(pending_reasons(api, namespace, p) for p in waiting)

        # finishing member by member, the first gang was never taken for a broken or stale one
        assert all(not p["metadata"].get("deletionTimestamp") for p in finished)
        assert all(_condition(p, "DisruptionTarget") is None for p in finished)
        assert told(api, namespace, "GangDisrupted") == []
        assert told(api, namespace, "GangEvicted") == []
