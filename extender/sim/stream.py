"""The stream scenario: small gangs keep arriving and ending on four racks while one gang that
needs a whole rack waits, and what its hold does (extender/scheduling/holding.py).

Its own cluster: four racks of four 8-GPU nodes. A small gang (2 pods of 8 GPUs: two whole nodes,
rack required) arrives every STREAM_EVERY_S and runs SMALL_LIFE_S once whole; at LARGE_AT_S the large
gang arrives (4 pods of 8 GPUs: a whole rack). The stream alone keeps about ten of the sixteen nodes
busy, spread over every rack, so without a hold some small gang always runs in each rack and the
large gang waits until the stream stops. With its hold, the least used rack drains (no small gang
starts there), and the large gang binds there within about one small gang's life, while the small
gangs go on in the other three racks.
"""

from __future__ import annotations

from typing import Any

from extender.sim.cluster import GPU, TOPOLOGY_NAME, topology
from extender.sim.driver import Arrival, SimulationResult
from extender.sim.expand import DEFAULT_SCHEDULER
from extender.sim.scenario import _gpu_racks

STREAM_NS = "stream"
STREAM_RACKS = ("s-r0", "s-r1", "s-r2", "s-r3")
STREAM_NODES_PER_RACK = 4
STREAM_EVERY_S = 1.5
STREAM_S = 60.0
SMALL_LIFE_S = 10.0
SMALL_PODS = 2
LARGE_AT_S = 12.0
LARGE_LIFE_S = 10.0
LARGE = "large"
WATCHED = f"{STREAM_NS}/{LARGE}"
TITLE = (
    "Stream scenario (its own cluster: 4 racks x 4 nodes of 8 GPUs): a 2-node gang arrives every "
    f"{STREAM_EVERY_S:g}s and runs {SMALL_LIFE_S:g}s, for {STREAM_S:g}s; at {LARGE_AT_S:g}s a gang needing a "
    "whole rack arrives"
)


def stream_cluster() -> list[dict[str, Any]]:
    return [*_gpu_racks("s", STREAM_RACKS, STREAM_NODES_PER_RACK), topology()]


def stream_arrivals() -> tuple[Arrival, ...]:
    """The small gangs and the large one, in order of arrival, each with its life."""
    out = []
    t, i = 0.0, 0
    while t < STREAM_S:
        name = f"small-{i:02d}"
        out.append(Arrival(t, _gang(name, SMALL_PODS), life_s=SMALL_LIFE_S))
        t += STREAM_EVERY_S
        i += 1
    out.append(Arrival(LARGE_AT_S, _gang(LARGE, STREAM_NODES_PER_RACK), life_s=LARGE_LIFE_S))
    return tuple(sorted(out, key=lambda a: a.at_s))


def _gang(name: str, pods: int) -> tuple[dict[str, Any], ...]:
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": STREAM_NS},
        "spec": {
            "minMember": pods,
            "queue": "default-queue",
            "topologyConstraint": {"topology": TOPOLOGY_NAME, "requiredTopologyLevel": "rack"},
        },
    }
    members = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{j}",
                "namespace": STREAM_NS,
                "annotations": {"pod-group-name": name},
            },
            "spec": {
                "schedulerName": DEFAULT_SCHEDULER,
                "containers": [
                    {
                        "name": "main",
                        "image": "sleep:v0.1.0",
                        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {GPU: "8"}},
                    }
                ],
            },
        }
        for j in range(pods)
    ]
    return (group, *members)


def stream_summary(result: SimulationResult) -> dict[str, Any]:
    """The small gangs (whole, their wait), the large gang (held where, drained, bound when, and
    whether before the stream stopped), what the service said of it along the way."""
    by_gang: dict[str, list[Any]] = {}
    for p in result.pods:
        if p.namespace == STREAM_NS:
            by_gang.setdefault(p.name.rsplit("-", 1)[0], []).append(p)
    small = {g: pods for g, pods in by_gang.items() if g != LARGE}
    waits = sorted(
        max(p.bound_s for p in pods) - min(p.created_s for p in pods)
        for pods in small.values()
        if all(p.bound_s is not None for p in pods)
    )
    large = by_gang.get(LARGE, [])
    bound = [p.bound_s for p in large if p.bound_s is not None]
    large_bound_s = max(bound) if len(bound) == len(large) and large else None
    racks = {result.node_labels.get(p.node or "", {}).get("topology.kubernetes.io/rack") for p in large}
    holds = [(t, said["hold"]) for t, said in result.watched if said and said.get("hold")]
    first_hold = next(((t, h) for t, h in holds if h.get("domain")), None)
    last_stream_arrival = STREAM_EVERY_S * (int((STREAM_S - 1e-9) // STREAM_EVERY_S))
    return {
        "small": {
            "gangs": len(small),
            "whole": len(waits),
            "waitP50S": round(waits[len(waits) // 2], 2) if waits else None,
            "waitP95S": round(waits[min(len(waits) - 1, int(0.95 * len(waits)))], 2) if waits else None,
        },
        "large": {
            "arrivedS": LARGE_AT_S,
            "heldFromS": first_hold[0] if first_hold else None,
            "held": first_hold[1]["text"] if first_hold else None,
            "drained": [
                f"{t:g}s {h['drainedNodes']}/{h['heldNodes']}" for t, h in holds if "drainedNodes" in h
            ],
            "boundS": round(large_bound_s, 2) if large_bound_s is not None else None,
            "waitS": round(large_bound_s - LARGE_AT_S, 2) if large_bound_s is not None else None,
            "racks": sorted(r for r in racks if r),
            "boundDuringStream": large_bound_s is not None and large_bound_s <= last_stream_arrival,
            "partial": 0 < len(bound) < len(large),
        },
        "streamEndsS": last_stream_arrival,
        "overcommit": list(result.overcommit),
    }


def stream_failed(summary: dict[str, Any]) -> bool:
    """The promise: every small gang whole, the large gang whole in one rack before the stream stops,
    no gang partial, no node over-committed."""
    small, large = summary["small"], summary["large"]
    return bool(
        summary["overcommit"]
        or small["whole"] != small["gangs"]
        or large["partial"]
        or not large["boundDuringStream"]
        or len(large["racks"]) != 1
    )


def stream_text(summary: dict[str, Any]) -> str:
    small, large = summary["small"], summary["large"]
    lines = [
        TITLE,
        f"  small gangs: {small['whole']} of {small['gangs']} whole; wait p50 {small['waitP50S']}s, "
        f"p95 {small['waitP95S']}s",
    ]
    if large["held"]:
        lines.append(f"  {large['held']} from {large['heldFromS']:g}s (arrived {large['arrivedS']:g}s)")
    if large["drained"]:
        lines.append(f"  draining: {', '.join(large['drained'])}")
    if large["boundS"] is not None:
        during = "while the stream ran" if large["boundDuringStream"] else "only after the stream stopped"
        lines.append(
            f"  large gang bound whole in {', '.join(large['racks'])} at {large['boundS']:g}s, "
            f"{large['waitS']:g}s after it arrived, {during} (it ends at {summary['streamEndsS']:g}s)"
        )
    else:
        lines.append("  large gang NOT bound")
    if summary["overcommit"]:
        lines.append(f"  OVER-COMMITTED: {summary['overcommit']}")
    return "\n".join(lines)
