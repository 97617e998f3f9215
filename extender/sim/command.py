"""`gang-extender simulate [FILE ...]`: load the scenario, run the simulation, print the report.

Exit codes: 0 when the run kept every invariant (pods left waiting are not a failure: the
contention scenario leaves one gang waiting on purpose), 1 when a gang was bound below its quorum,
a node was over-committed, a preemption or reclaim evicted part of a gang, a queue's bound pods went
past its limit at any moment or a reclaim took a queue below its quota, 2 when the input could not be
read or the run failed, or when the stream scenario's large gang did not bind whole, in one rack,
while the stream of small gangs ran. The built-in scenario is followed by the preemption scenario, the
queue scenario and the stream scenario (each on its own cluster, in its own run), reported after it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TextIO

import orjson

from extender.sim.driver import DriverOptions, SimulationResult, simulate
from extender.sim.report import (
    build_report,
    preemption_summary,
    preemption_text,
    queue_summary,
    queue_text,
    to_json,
    to_text,
)
from extender.sim.scenario import (
    ScenarioError,
    builtin_scenario,
    load_objects,
    preemption_scenario,
    queue_scenario,
    with_cluster,
)
from extender.sim.stream import (
    WATCHED,
    stream_arrivals,
    stream_cluster,
    stream_failed,
    stream_summary,
    stream_text,
)

PREEMPTION_TITLE = (
    "Preemption scenario (its own cluster: 2 racks x 4 nodes of 8 GPUs, each node half taken by running "
    "low-priority gangs): a priority-1000 JobSet needing a whole rack arrives"
)

QUEUE_TITLE = (
    "Queue scenario (its own cluster: 2 racks x 3 nodes of 8 GPUs; KAI queues team-a, gpu quota 8 limit 12, "
    "and team-b, quota 8 no limit): team-b already runs five 8-GPU gangs and asks for a sixth; team-a "
    "submits a 4-GPU gang and two 8-GPU gangs"
)

FORMATS = ("text", "json")


def run_simulation(
    paths: list[str],
    *,
    fmt: str = "text",
    seed: int = 0,
    settings: Any = None,
    options: DriverOptions | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the built-in scenario (no paths) or the given manifest files; print the report."""
    out = out or sys.stdout
    err = err or sys.stderr
    if fmt not in FORMATS:
        print(f"simulate: --format must be one of {', '.join(FORMATS)}, got {fmt!r}", file=err)
        return 2
    try:
        objects = builtin_scenario() if not paths else with_cluster(load_objects(paths))
    except ScenarioError as exc:
        print(f"simulate: {exc}", file=err)
        return 2
    try:
        result = asyncio.run(simulate(objects, settings=settings, seed=seed, options=options))
        preempted = queued = streamed = None
        if not paths:
            preempted = asyncio.run(
                simulate(preemption_scenario(), settings=settings, seed=seed, options=options)
            )
            queued = asyncio.run(simulate(queue_scenario(), settings=settings, seed=seed, options=options))
            streamed = asyncio.run(
                simulate(
                    stream_cluster(),
                    settings=settings,
                    seed=seed,
                    options=options,
                    arrivals=stream_arrivals(),
                    watch_gang=WATCHED,
                )
            )
    except (RuntimeError, OSError) as exc:
        print(f"simulate: the run failed: {exc}", file=err)
        return 2
    if fmt == "json":
        if preempted is None:
            print(to_json(result), file=out)
        else:
            doc = {**build_report(result), "preemption": preemption_summary(preempted)}
            if queued is not None:
                doc["queues"] = queue_summary(queued)
            if streamed is not None:
                doc["stream"] = stream_summary(streamed)
            print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode(), file=out)
    else:
        print(to_text(result), file=out)
        if preempted is not None:
            print("\n" + preemption_text(preempted, PREEMPTION_TITLE), file=out)
        if queued is not None:
            print("\n" + queue_text(queued, QUEUE_TITLE), file=out)
        if streamed is not None:
            print("\n" + stream_text(stream_summary(streamed)), file=out)
    failed = bool(build_report(result)["summary"]["gangs_partial"] or result.overcommit)
    if preempted is not None:
        pre = preemption_summary(preempted)
        failed |= bool(build_report(preempted)["summary"]["gangs_partial"] or preempted.overcommit)
        failed |= any(not e["whole"] for e in pre["evicted"])
    if queued is not None:
        failed |= queue_run_failed(queued)
    if streamed is not None:
        failed |= stream_failed(stream_summary(streamed))
    return 1 if failed else 0


def queue_run_failed(result: SimulationResult) -> bool:
    """A gang bound or evicted in part, a node over-committed, a queue past its limit at any moment,
    or a reclaim that took a queue below its quota."""
    rep = queue_summary(result)
    return bool(
        build_report(result)["summary"]["gangs_partial"]
        or result.overcommit
        or rep["breaches"]
        or any(not e["whole"] for e in rep["evicted"])
        or any(q["quotaKept"] is False for q in rep["queues"])
    )
