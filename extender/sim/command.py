"""`gang-extender simulate [FILE ...]`: load the scenario, run the simulation, print the report.

Exit codes: 0 when the run kept every invariant (pods left waiting are not a failure: the
contention scenario leaves one gang waiting on purpose), 1 when a gang was bound below its quorum
or a node was over-committed, 2 when the input could not be read or the run failed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TextIO

from extender.sim.driver import DriverOptions, simulate
from extender.sim.report import build_report, to_json, to_text
from extender.sim.scenario import ScenarioError, builtin_scenario, load_objects, with_cluster

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
    except (RuntimeError, OSError) as exc:
        print(f"simulate: the run failed: {exc}", file=err)
        return 2
    print(to_json(result) if fmt == "json" else to_text(result), file=out)
    summary = build_report(result)["summary"]
    return 1 if summary["gangs_partial"] or result.overcommit else 0
