"""`gang-extender simulate [FILE ...]`: load the scenario, run the simulation, print the report.

Exit codes: 0 when the run kept every invariant (pods left waiting are not a failure: the
contention scenario leaves one gang waiting on purpose), 1 when a gang was bound below its quorum,
a node was over-committed or a preemption evicted part of a gang, 2 when the input could not be
read or the run failed. The built-in scenario is followed by the preemption scenario (its own
cluster, its own run), reported after it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TextIO

import orjson

from extender.sim.driver import DriverOptions, simulate
from extender.sim.report import build_report, preemption_summary, preemption_text, to_json, to_text
from extender.sim.scenario import (
    ScenarioError,
    builtin_scenario,
    load_objects,
    preemption_scenario,
    with_cluster,
)

PREEMPTION_TITLE = (
    "Preemption scenario (its own cluster: 2 racks x 4 nodes of 8 GPUs, each node half taken by running "
    "low-priority gangs): a priority-1000 JobSet needing a whole rack arrives"
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
        preempted = (
            None
            if paths
            else asyncio.run(simulate(preemption_scenario(), settings=settings, seed=seed, options=options))
        )
    except (RuntimeError, OSError) as exc:
        print(f"simulate: the run failed: {exc}", file=err)
        return 2
    if fmt == "json":
        if preempted is None:
            print(to_json(result), file=out)
        else:
            doc = {**build_report(result), "preemption": preemption_summary(preempted)}
            print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode(), file=out)
    else:
        print(to_text(result), file=out)
        if preempted is not None:
            print("\n" + preemption_text(preempted, PREEMPTION_TITLE), file=out)
    failed = bool(build_report(result)["summary"]["gangs_partial"] or result.overcommit)
    if preempted is not None:
        pre = preemption_summary(preempted)
        failed |= bool(build_report(preempted)["summary"]["gangs_partial"] or preempted.overcommit)
        failed |= any(not e["whole"] for e in pre["evicted"])
    return 1 if failed else 0
