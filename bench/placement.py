"""`python -m bench placement [--quick]`: plan_gang speed against the plain-Python reference and numpy.

Prints one JSON object per line: a row per (nodes, gang_pods) with kernel_ms (median of plan_gang
through the public API, validation included), reference_ms (tests/placement/naive.py), numpy_ms
(the vectorised single-leaf planner below) and whether all three plans agree; then cold-JIT and
cache-warm start rows, each measured in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench.synth import gang, gpu_cluster
from extender.placement import ClusterArrays, GangRequest, Outcome, plan_gang, warm_up

NODES = (1_000, 5_000, 15_000, 50_000, 100_000)
GANGS = (8, 256, 4096)


def numpy_plan(arrays: ClusterArrays, request: GangRequest) -> list[int] | None:
    """The same decision for a one-leaf gang with a root constraint, in whole-array numpy."""
    (node,), (leaf,) = request.tree, request.leaves
    n = arrays.n_rows
    req, count = leaf.request.astype(np.int64), leaf.count
    free, alloc = arrays.free[:n], arrays.allocatable[:n]
    demand = req * count
    cols = np.flatnonzero(demand > 0)
    usable = arrays.schedulable[:n].copy()

    def candidates(rows: np.ndarray, level: int, *, descending: bool, include_unfit: bool) -> np.ndarray:
        dom = arrays.domains[level, rows]
        rows, dom = rows[dom >= 0], dom[dom >= 0]
        n_dom = arrays.n_domains(level)
        counts = np.bincount(dom, minlength=n_dom)
        totals = np.stack(
            [np.bincount(dom, weights=np.maximum(free[rows, j], 0), minlength=n_dom) for j in cols], axis=1
        )
        ratio = (totals / demand[cols]).min(axis=1)
        ok = counts > 0
        if not include_unfit:
            ok &= (totals >= demand[cols]).all(axis=1)
        ids = np.flatnonzero(ok)
        return ids[np.lexsort((ids, -ratio[ids] if descending else ratio[ids]))]

    def fill(rows: np.ndarray, rank: np.ndarray | None) -> list[int] | None:
        f = free[rows]
        with np.errstate(divide="ignore"):
            per = np.where(req > 0, f // np.where(req > 0, req, 1), np.where(f >= 0, 1 << 62, -1)).min(axis=1)
        ok = per > 0
        rows, per, f = rows[ok], per[ok], f[ok]
        a = alloc[rows][:, req > 0]
        u = np.where(a > 0, f[:, req > 0] / np.where(a > 0, a, 1), 0.0).sum(axis=1)
        keys = (rows, u) if rank is None else (rows, u, rank[rows])
        order = np.lexsort(keys)
        take = np.minimum(per[order], count)
        cum = np.cumsum(take)
        if cum.size == 0 or cum[-1] < count:
            return None
        last = int(np.searchsorted(cum, count))
        take[last] -= cum[last] - count
        return np.repeat(rows[order][: last + 1], take[: last + 1]).tolist()

    def inside(rows: np.ndarray, preferred: int) -> list[int] | None:
        if preferred < 0:
            return fill(rows, None)
        for d in candidates(rows, preferred, descending=False, include_unfit=False):
            got = fill(rows[arrays.domains[preferred, rows] == d], None)
            if got is not None:
                return got
        spread = candidates(rows, preferred, descending=True, include_unfit=True)
        rank = np.full(n, 1 << 40, dtype=np.int64)
        rank_of = np.full(arrays.n_domains(preferred) + 1, len(spread), dtype=np.int64)
        rank_of[spread] = np.arange(len(spread))
        dom = arrays.domains[preferred, :n]
        rank[dom >= 0] = rank_of[dom[dom >= 0]]
        return fill(rows, rank)

    all_rows = np.flatnonzero(usable)
    if node.required_level < 0:
        return inside(all_rows, node.preferred_level)
    for d in candidates(all_rows, node.required_level, descending=False, include_unfit=False):
        got = inside(all_rows[arrays.domains[node.required_level, all_rows] == d], node.preferred_level)
        if got is not None:
            return got
    return None


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def _start_probe(cache_dir: str) -> dict[str, float]:
    code = (
        "import time, json; t0 = time.perf_counter();"
        "import extender.placement as p; t1 = time.perf_counter();"
        "w = p.warm_up(); t2 = time.perf_counter();"
        "print(json.dumps({'import_s': t1 - t0, 'warm_up_s': w, 'total_s': t2 - t0}))"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    env.pop("NUMBA_DISABLE_JIT", None)
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    probe["process_wall_s"] = time.perf_counter() - started
    return probe


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench placement", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (under 2 minutes)")
    parser.add_argument("--nodes", type=int, nargs="*", default=list(NODES))
    args = parser.parse_args(argv)
    kernel_repeats, ref_repeats, np_repeats = (15, 1, 5) if args.quick else (101, 3, 21)

    warm_up()
    from tests.placement import naive  # the reference lives with the tests it checks

    for n_nodes in args.nodes:
        arrays = gpu_cluster(n_nodes, seed=n_nodes)
        for pods in GANGS:
            request = gang(pods)
            plan = plan_gang(arrays, request)
            kernel_rows = plan.rows[0].tolist() if plan.outcome is Outcome.PLACED else None
            reference = naive.plan_gang(arrays, request)
            via_numpy = numpy_plan(arrays, request)
            agrees = (
                reference.outcome is plan.outcome
                and reference.domains == plan.domains
                and (kernel_rows is None or reference.rows[0].tolist() == kernel_rows)
                and via_numpy == kernel_rows
            )
            kernel_ms = _median_ms(lambda: plan_gang(arrays, request), kernel_repeats)  # noqa: B023
            reference_ms = _median_ms(lambda: naive.plan_gang(arrays, request), ref_repeats)  # noqa: B023
            numpy_ms = _median_ms(lambda: numpy_plan(arrays, request), np_repeats)  # noqa: B023
            node = request.tree[0]
            print(
                json.dumps(
                    {
                        "bench": "placement",
                        "nodes": n_nodes,
                        "gang_pods": pods,
                        "required_level": ["zone", "block", "rack"][node.required_level],
                        "preferred_level": ["zone", "block", "rack"][node.preferred_level]
                        if node.preferred_level >= 0
                        else None,
                        "outcome": plan.outcome.value,
                        "kernel_ms": round(kernel_ms, 4),
                        "reference_ms": round(reference_ms, 3),
                        "numpy_ms": round(numpy_ms, 4),
                        "x_vs_reference": round(reference_ms / kernel_ms, 1),
                        "x_vs_numpy": round(numpy_ms / kernel_ms, 2),
                        "agrees": agrees,
                        "repeats": {"kernel": kernel_repeats, "reference": ref_repeats, "numpy": np_repeats},
                    }
                ),
                flush=True,
            )
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache_dir:
        cold = _start_probe(cache_dir)
        print(json.dumps({"bench": "placement-start", "cache": "cold", **_rounded(cold)}), flush=True)
        for _ in range(1 if args.quick else 3):
            warm = _start_probe(cache_dir)
            print(json.dumps({"bench": "placement-start", "cache": "warm", **_rounded(warm)}), flush=True)
    return 0


def _rounded(probe: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in probe.items()}


if __name__ == "__main__":
    raise SystemExit(main())
