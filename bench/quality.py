"""`python -m bench quality [--quick]`: how well each domain order packs a stream of gangs.

A seeded stream of gangs of mixed sizes arrives (Poisson) at a 4096-node, 8-GPU-per-node cluster
(racks of 32, blocks of 256), runs for an exponential time and leaves. Waiting gangs are retried
in arrival order whenever capacity is released (backfill: a later gang may start first). The same
stream is replayed for tightest-fit (production), first-fit and random domain choice; only the
choice of domain differs, the fill inside a domain is the same. The `hold` policy is tightest-fit
plus `extender.placement.backfill`: the oldest waiting gang (the first `--depth` of them) holds the
least used rows that fit them once drained, and the others backfill around the hold. The `pool`
policy is `extender.placement.pools.admit`, the service's steps (its holding pass, then each
gang's pooled plan) over the same code: blocks are pools of small or large gangs (large: half a
block or more; a block's class is read off what runs there), small gangs open a new block only
while `--reserve` blocks' worth of room is left for large gangs, and the first `--depth` waiting
gangs hold, each within its pool first.

One JSON line per policy, over the `--gangs` measured gangs; `large_*` are the block-sized gangs
(block required: 128 and 256 whole nodes), `small_*` the others. Arrivals go on after the last
measured gang (its own seeded generator, so the measured gangs are the same) until every measured
gang has started or `--tail` time units have passed: a measured gang still waiting then is
unplaced, and its wait counts up to that time. Racks partly used (some GPU in use, not all), those
of them with no held row (`_unheld`: not draining for a waiting gang), racks with a held row, and
GPUs busy are sampled as each measured gang arrives. A block-sized gang's wait is split in two where it
held: `large_wait_before_hold_mean` (queued behind other gangs, holding nothing) and
`large_draining_mean` (from its first hold to its start: its rows draining).
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
import time
from collections.abc import Hashable, Sequence

import numpy as np

from bench.synth import BLOCK, GPU_POD, RACK, RACK_NODES, gpu_cluster
from extender.placement import DomainOrder, GangRequest, LeafDemand, Outcome, Plan, TreeNode, plan_gang, pools
from extender.placement.backfill import Hold, admit

WHOLE_NODE = GPU_POD * 8
# (weight, pods, pod request, required level, preferred level)
MIX = (
    (0.35, 8, GPU_POD, RACK, -1),
    (0.25, 32, GPU_POD, RACK, -1),
    (0.20, 16, WHOLE_NODE, RACK, -1),
    (0.10, 32, WHOLE_NODE, RACK, -1),
    (0.07, 128, WHOLE_NODE, BLOCK, RACK),
    (0.03, 256, WHOLE_NODE, BLOCK, -1),
)
N_NODES = 4096
MEAN_RUN = 100.0


def _stream(n_gangs: int, *, load: float, seed: int) -> list[tuple[float, int, float]]:
    """(arrival time, mix index, run time) per gang, for an offered GPU load of `load`."""
    rng = np.random.default_rng(seed)
    weights = np.array([m[0] for m in MIX])
    gpus = np.array([m[1] * int(m[2][2]) for m in MIX])
    rate = load * N_NODES * 8 / (float(weights @ gpus) * MEAN_RUN)
    kinds = rng.choice(len(MIX), size=n_gangs, p=weights / weights.sum())
    arrivals = np.cumsum(rng.exponential(1 / rate, size=n_gangs))
    runs = rng.exponential(MEAN_RUN, size=n_gangs)
    return [(float(a), int(k), float(r)) for a, k, r in zip(arrivals, kinds, runs, strict=True)]


def _request(kind: int) -> GangRequest:
    _, pods, req, required, preferred = MIX[kind]
    return GangRequest(
        tree=(TreeNode(-1, required_level=required, preferred_level=preferred),),
        leaves=(LeafDemand(0, req, pods),),
    )


HOLD = "hold"  # tightest-fit, plus a hold for the oldest waiting gang that others backfill around
POOL = "pool"  # size-class pools over blocks (extender.placement.pools), with the head's hold
TAIL_S = 5 * MEAN_RUN  # how long arrivals go on after the last measured one while measured gangs wait


def run(
    policy: DomainOrder,
    stream: list[tuple[float, int, float]],
    *,
    seed: int,
    hold: bool = False,
    depth: int = 1,
    pool: pools.PoolSettings | None = None,
    measured: int | None = None,
    tail_s: float = TAIL_S,
) -> dict[str, object]:
    """Replay `stream`; the first `measured` gangs (all by default) are the ones reported.

    Arrivals go on (the rest of `stream`) until every measured gang has started or `tail_s` after
    the last measured arrival, so a gang that arrived just before the end is not counted unplaced
    while the load that would delay it has stopped; what still waits then is unplaced.
    """
    n = len(stream) if measured is None else measured
    arrays = gpu_cluster(N_NODES, busy=0.0)
    rng = np.random.default_rng(seed)
    requests = [_request(k) for k in range(len(MIX))]
    events: list[tuple[float, int, int]] = [(a, 1, i) for i, (a, _, _) in enumerate(stream)]  # 1 = arrive
    heapq.heapify(events)
    waiting: list[int] = []
    started: dict[int, float] = {}
    running: dict[int, np.ndarray] = {}
    partly_used: list[float] = []
    partly_used_unheld: list[float] = []  # those with no held row: not draining for a waiting gang
    racks_held: list[float] = []
    busy: list[float] = []
    held: tuple[Hold, ...] = ()
    typical = pools.typical_domain(arrays, BLOCK)
    share = pool.large_share if pool is not None else 1.0
    kind_large = [
        pools.size_class(pools.gang_demand(arrays, r), typical, share) is pools.SizeClass.LARGE
        for r in requests
    ]
    large_count = np.zeros(arrays.capacity, dtype=np.int32)  # members of large gangs running, by row
    holds = 0
    first_held: dict[Hashable, float] = {}  # gang -> when it first held
    plan_s = 0.0
    last = stream[n - 1][0]
    end = last + tail_s
    gpu_col = 2
    n_racks = N_NODES // RACK_NODES
    rack_of = arrays.domains[RACK, :N_NODES]

    def try_start(i: int, now: float) -> bool:
        nonlocal plan_s
        kind = stream[i][1]
        t0 = time.perf_counter()
        plan = plan_gang(arrays, requests[kind], order=policy, rng=rng)
        plan_s += time.perf_counter() - t0
        if plan.outcome is not Outcome.PLACED:
            return False
        start(i, plan, now)
        return True

    def start(i: int, plan: Plan, now: float) -> None:
        if i in started:
            raise AssertionError(f"gang {i} started twice (at {started[i]} and {now})")
        kind = stream[i][1]
        rows = plan.rows[0]
        for r in rows:
            arrays.sub(int(r), MIX[kind][2])
        running[i] = rows
        if kind_large[kind]:
            large_count[rows] += 1
        started[i] = now
        heapq.heappush(events, (now + stream[i][2], 0, i))  # 0 = leave (before arrivals at a tie)

    def serve(queue: list[int], now: float) -> set[int]:
        """The hold policy: start what `admit` says, in queue order; the gangs started."""
        nonlocal plan_s, held, holds
        t0 = time.perf_counter()
        gangs = [(j, requests[stream[j][1]]) for j in queue]
        if pool is not None:
            pooled = pools.admit(
                arrays, gangs, held, pool, level=BLOCK, large_rows=large_count > 0, depth=depth, order=policy
            )
            decision_starts, new_holds = pooled.starts, pooled.holds
        else:
            decision = admit(arrays, gangs, held, depth=depth, order=policy)
            decision_starts, new_holds = decision.starts, decision.holds
        plan_s += time.perf_counter() - t0
        holds += len({h.owner for h in new_holds} - {h.owner for h in held})
        for h in new_holds:
            first_held.setdefault(h.owner, now)
        held = new_holds
        for pos, plan in decision_starts:
            start(queue[pos], plan, now)
        return {queue[pos] for pos, _ in decision_starts}

    while events:
        now, what, i = heapq.heappop(events)
        if now > end or (now > last and all(j in started for j in range(n))):
            break
        if what == 1 and i < n:  # the cluster as measured gangs find it on arrival
            used = 8 - arrays.free[:N_NODES, gpu_col]
            per_rack = np.bincount(rack_of, weights=used, minlength=n_racks)
            partly = (per_rack > 0) & (per_rack < RACK_NODES * 8)
            held_rack = np.zeros(n_racks, dtype=bool)
            for h in held:
                held_rack[rack_of[h.rows[h.rows < N_NODES]]] = True
            partly_used.append(float(np.mean(partly)))
            partly_used_unheld.append(float(np.mean(partly & ~held_rack)))
            racks_held.append(float(np.mean(held_rack)))
            busy.append(float(used.sum()) / (N_NODES * 8))
        if what == 1:
            if hold or pool is not None:
                # an arrival frees nothing: only the newcomer can start, around the holds, or a holder
                # whose hold the last pass chose ready (it fits now, outside its pool)
                holders = {h.owner for h in held}
                gone = serve([*(j for j in waiting if j in holders), i], now)
                waiting = [j for j in waiting if j not in gone]  # a holder may start too (its hold ready)
                if i not in gone:
                    waiting.append(i)
            elif not try_start(i, now):
                waiting.append(i)
        else:
            rows = running.pop(i)
            for r in rows:
                arrays.add(int(r), MIX[stream[i][1]][2])
            if kind_large[stream[i][1]]:
                large_count[rows] -= 1
            if hold or pool is not None:
                gone = serve(waiting, now)
                waiting = [j for j in waiting if j not in gone]
            else:
                waiting = [j for j in waiting if not try_start(j, now)]

    if all(i in started for i in range(n)):
        end = max(started[i] for i in range(n))
    else:
        end = min(end, now)  # the cut, or the last event if the queue emptied before it
    waits = [started[i] - stream[i][0] for i in range(n) if i in started]
    censored = [(started[i] if i in started else end) - stream[i][0] for i in range(n)]
    small = [i for i in range(n) if MIX[stream[i][1]][3] != BLOCK]
    large = [i for i in range(n) if MIX[stream[i][1]][3] == BLOCK]
    large_waits = [censored[i] for i in large]
    # a block-sized gang's wait in two parts: queued behind other gangs before it held, then draining
    large_held = [i for i in large if i in first_held]
    before_hold = [first_held[i] - stream[i][0] for i in large_held]
    draining = [(started[i] if i in started else end) - first_held[i] for i in large_held]
    return {
        "bench": "quality",
        "policy": POOL if pool is not None else HOLD if hold else policy.value,
        "gangs": n,
        "placed_share": round(sum(i in started for i in range(n)) / n, 4),
        "large_placed_share": round(sum(i in started for i in large) / max(len(large), 1), 4),
        "wait_mean": round(statistics.fmean(waits), 2) if waits else None,
        "wait_p90": round(float(np.percentile(waits, 90)), 2) if waits else None,
        "wait_mean_incl_unplaced": round(statistics.fmean(censored), 2),
        "small_wait_mean_incl_unplaced": round(statistics.fmean(censored[i] for i in small), 2)
        if small
        else None,
        "large_wait_mean_incl_unplaced": round(statistics.fmean(large_waits), 2) if large else None,
        "large_wait_max": round(max(large_waits), 1) if large else None,
        "large_to_all_wait": round(statistics.fmean(large_waits) / statistics.fmean(censored), 2)
        if large and statistics.fmean(censored) > 0
        else None,
        "large_held_share": round(len(large_held) / max(len(large), 1), 4),
        "large_wait_before_hold_mean": round(statistics.fmean(before_hold), 2) if before_hold else None,
        "large_draining_mean": round(statistics.fmean(draining), 2) if draining else None,
        "large_unplaced": [round(end - stream[i][0], 1) for i in large if i not in started],
        # per MIX entry (8x1, 32x1, 16 nodes, 32 nodes, 128 nodes, 256 nodes): mean wait incl. unplaced
        "wait_mean_by_kind": [
            round(statistics.fmean(w), 2) if w else None
            for w in ([censored[i] for i in range(n) if stream[i][1] == k] for k in range(len(MIX)))
        ],
        "racks_partly_used_mean": round(statistics.fmean(partly_used), 4),
        "racks_partly_used_unheld_mean": round(statistics.fmean(partly_used_unheld), 4),
        "racks_held_mean": round(statistics.fmean(racks_held), 4),
        "gpus_busy_mean": round(statistics.fmean(busy), 4),
        "holds": holds,
        "plan_ms_mean": round(plan_s * 1e3 / max(len(started) + len(waiting), 1), 3),
        # after the last measured arrival: when the last measured gang started, or the cut
        "ended_at": round(end - last, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a shorter stream (1500 gangs)")
    parser.add_argument("--gangs", type=int, default=None)
    parser.add_argument("--load", type=float, default=1.0, help="offered GPU load, 0..1+")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--depth", type=int, default=1, help="hold and pool: how many waiting gangs hold")
    parser.add_argument(
        "--reserve", type=float, default=4.0, help="pool policy: blocks' worth of room small gangs leave"
    )
    parser.add_argument(
        "--tail", type=float, default=TAIL_S, help="time units arrivals go on after the last measured gang"
    )
    parser.add_argument(
        "--policy",
        action="append",
        choices=[HOLD, POOL, *(p.value for p in DomainOrder)],
        help="run only this policy (repeatable); default all",
    )
    args = parser.parse_args(argv)
    n_gangs = args.gangs or (1500 if args.quick else 3000)
    stream = _stream(n_gangs, load=args.load, seed=args.seed)
    # the tail is drawn from its own generator so the measured gangs are the same whatever its length
    last = stream[-1][0]
    tail = [(last + a, k, r) for a, k, r in _stream(n_gangs, load=args.load, seed=args.seed + 1_000_003)]
    stream += [g for g in tail if g[0] <= last + args.tail]
    pool = pools.PoolSettings(reserve=args.reserve)
    runs = [(POOL, DomainOrder.TIGHTEST), (HOLD, DomainOrder.TIGHTEST), *((p.value, p) for p in DomainOrder)]
    for name, policy in runs:
        if args.policy and name not in args.policy:
            continue
        out = run(
            policy,
            stream,
            seed=args.seed,
            hold=name == HOLD,
            depth=args.depth,
            pool=pool if name == POOL else None,
            measured=n_gangs,
            tail_s=args.tail,
        )
        if name in (HOLD, POOL):
            out["depth"] = args.depth
        if name == POOL:
            out["reserve"] = args.reserve
        out["load"] = args.load
        out["seed"] = args.seed
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
