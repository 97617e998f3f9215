"""Mapping a NodeNames array to rows, against decoding it, side by side in one process.

    python -m bench names [--quick] [--nodes 5000,15000,50000] [--calls 300]

A plain pod's filter call must know that every offered name is a node of the cache, and which offered
rows it refuses. Cases, on shuffled arrays (as kube-scheduler's parallel filters send them), calls
interleaved so that noise falls on all of them, CPU time per call (robust to a neighbour's load, not
to its cache pressure):

- fingerprint:      `placement.rows_of_names`, the service's way (one pass over the bytes)
- orjson:           `orjson.loads` of the array, what the null handler pays for its whole decode
- orjson+frozenset: decode, then every name tested against the set of known names (the way before)

Each line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import orjson

from extender.placement import index_names, rows_of_names

ARRAYS = 16


def measure(n_nodes: int, calls: int) -> dict[str, object]:
    names = {row: f"node-{row:06d}" for row in range(n_nodes)}
    known = frozenset(names.values())
    index = index_names(names)
    rng = random.Random(15)
    arrays = []
    for _ in range(ARRAYS):
        order = list(names.values())
        rng.shuffle(order)
        arrays.append(orjson.dumps(order))
    expected = [int(n[5:]) for n in orjson.loads(arrays[0])]
    got = rows_of_names(index, arrays[0])
    if got is None or got.tolist() != expected:
        raise RuntimeError("rows_of_names disagrees with decoding the array")
    cases = {
        "fingerprint": lambda a: rows_of_names(index, a),
        "orjson": orjson.loads,
        "orjson+frozenset": lambda a: known.issuperset(orjson.loads(a)),
    }
    cpu = dict.fromkeys(cases, 0.0)
    order = list(cases.items())
    for i in range(calls):
        array = arrays[i % ARRAYS]
        # the first case to read an array pays its trip from memory: each case goes first in turn
        for case, fn in order[i % len(order) :] + order[: i % len(order)]:
            t0 = time.process_time()
            fn(array)
            cpu[case] += time.process_time() - t0
    t0 = time.perf_counter()
    index_names(names)
    build_ms = 1000 * (time.perf_counter() - t0)
    row: dict[str, object] = {"bench": "names", "nodes": n_nodes, "calls": calls}
    row.update({f"{case}_ms": round(1000 * s / calls, 3) for case, s in cpu.items()})
    row["fingerprint_x_orjson"] = round(cpu["fingerprint"] / cpu["orjson"], 2)
    row["index_build_ms"] = round(build_ms, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench names", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k and 5k nodes, 100 calls")
    parser.add_argument("--nodes", default=None, help="comma-separated sizes (default 5000,15000,50000)")
    parser.add_argument("--calls", type=int, default=None, help="calls per case (default 300)")
    args = parser.parse_args(argv)
    try:
        default = "1000,5000" if args.quick else "5000,15000,50000"
        sizes = [int(x) for x in (args.nodes or default).split(",")]
    except ValueError:
        parser.error("--nodes: expected comma-separated integers, e.g. 5000,15000")
    if any(n < 1 for n in sizes):
        parser.error("--nodes: sizes must be positive")
    calls = args.calls if args.calls is not None else (100 if args.quick else 300)
    if calls < 1:
        parser.error("--calls: must be positive")
    rows_of_names(index_names({0: "warm"}), b'["warm"]')  # load the kernels before timing
    for n in sizes:
        print(json.dumps(measure(n, calls)), flush=True)
    return 0
