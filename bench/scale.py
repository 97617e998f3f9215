"""Cost against cluster size, 1k to 50k nodes: filter latency, gang planning, memory and sync (issue 15).

    python -m bench scale [--quick] [--nodes 1000,5000,15000,50000] [--pods-per-node 10]
                          [--parts filter,plan,memory] [--out bench/scale.png]

For each node count, three parts, each reusing another bench's machinery:

- filter: bench/http.py's run (the service and the null handler as processes on loopback, calls
  alternating between them): p50/p90 of the cases null, plain, plain-shuffled, gang-plan (a gang's
  planning call through HTTP), gang-planned and gang-all, with each p50's ratio to the null handler's.
- plan: `plan_gang` in process on bench/synth.py's GPU cluster (about 35% in use) for gangs of 8,
  256 and 4096 one-GPU pods, median of repeated runs, as bench/placement.py measures it.
- memory: bench/memory.py's live source (`serve --kubeconfig` against the stand-in API server, objects
  shaped as kube-apiserver serves them) with pods-per-node bound pods per node: resident set and
  peak once ready, the service's CPU until ready (sync CPU) and the time from first list to ready.
  Objects are generated page by page, so the bench holds only the encoded pages.

Prints the tables and writes the figures as JSON and a PNG plot (filter p50 per case and the null
handler against node count; RSS and sync CPU against node count) next to each other: `--out
bench/scale.png` writes bench/scale.png and bench/scale.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import orjson

from bench import http, memory

PARTS = ("filter", "plan", "memory")
PLAN_GANGS = (8, 256, 4096)
# the cases drawn in the latency panel, in legend order
PLOTTED_CASES = ("null", "plain", "plain-shuffled", "gang-plan", "gang-all")


@dataclass(frozen=True)
class Settings:
    nodes: tuple[int, ...]
    pods_per_node: int
    parts: tuple[str, ...]
    gangs: int
    rounds: int
    plan_repeats: int
    png_path: Path
    json_path: Path


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1000 and 2000 nodes, few samples: seconds")
    parser.add_argument("--nodes", default=None, help="comma-separated node counts (1000,5000,15000,50000)")
    parser.add_argument("--pods-per-node", type=int, default=10, help="bound pods per node for memory (10)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which of {','.join(PARTS)} to run")
    parser.add_argument("--gangs", type=int, default=None, help="gangs planned through HTTP (60; quick 5)")
    parser.add_argument("--rounds", type=int, default=None, help="plain-pod calls per case (300; quick 40)")
    parser.add_argument(
        "--out",
        default=None,
        help="the PNG to write, the JSON beside it (bench/scale.png; quick: bench/out/scale-quick.png)",
    )
    args = parser.parse_args(argv)
    try:
        nodes = tuple(
            int(x)
            for x in (args.nodes or ("1000,2000" if args.quick else "1000,5000,15000,50000")).split(",")
        )
    except ValueError:
        parser.error(f"--nodes must be comma-separated integers, not {args.nodes!r}")
    if any(n <= 0 for n in nodes):
        parser.error("--nodes must be positive")
    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        parser.error(f"--parts takes some of {','.join(PARTS)}, not {args.parts!r}")
    if args.pods_per_node < 0:
        parser.error("--pods-per-node must be at least 0")
    # a quick run never overwrites the committed figures
    out = Path(args.out or ("bench/out/scale-quick.png" if args.quick else "bench/scale.png"))
    return Settings(
        nodes=tuple(sorted(nodes)),
        pods_per_node=args.pods_per_node,
        parts=parts,
        gangs=args.gangs or (5 if args.quick else 60),
        rounds=args.rounds or (40 if args.quick else 300),
        plan_repeats=15 if args.quick else 101,
        png_path=out.with_suffix(".png"),
        json_path=out.with_suffix(".json"),
    )


class Generated(Sequence[dict[str, Any]]):
    """n objects made on demand by index: bench/memory.py's pager slices it one page at a time."""

    def __init__(self, n: int, make: Callable[[int], dict[str, Any]]) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self.make(j) for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.make(i % self.n)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.make(j) for j in range(self.n))


def live_cluster(n_nodes: int, n_pods: int) -> tuple[Generated, Generated]:
    """bench/memory.py's nodes and pods (pod i on node i mod n), made as the stand-in pages them."""
    names = [memory.make_node(j)["metadata"]["name"] for j in range(n_nodes)] if n_nodes else []
    return (
        Generated(n_nodes, memory.make_node),
        Generated(n_pods if n_nodes else 0, lambda i: memory.make_pod(i, names[i % n_nodes])),
    )


def plan_figures(n_nodes: int, repeats: int) -> dict[str, Any]:
    """plan_gang's median ms per gang size, on bench/synth.py's cluster as bench/placement.py plans."""
    from bench.placement import _median_ms
    from bench.synth import gang, gpu_cluster
    from extender.placement import Outcome, plan_gang, warm_up

    warm_up()
    arrays = gpu_cluster(n_nodes, seed=n_nodes)
    out: dict[str, Any] = {}
    for pods in PLAN_GANGS:
        request = gang(pods)
        outcome = plan_gang(arrays, request).outcome
        ms = _median_ms(lambda: plan_gang(arrays, request), repeats)  # noqa: B023
        out[str(pods)] = {"ms": round(ms, 4), "placed": outcome is Outcome.PLACED, "repeats": repeats}
    return out


async def measure_part(settings: Settings, part: str, n_nodes: int) -> dict[str, Any]:
    """One part's figures at one node count, keyed as they go into the size's row."""
    if part == "filter":
        rows = await http.bench_size(n_nodes, settings.gangs, settings.rounds)
        skip = ("bench", "nodes", "case")
        return {"filter": {r["case"]: {k: v for k, v in r.items() if k not in skip} for r in rows}}
    if part == "plan":
        return {"plan_ms": plan_figures(n_nodes, settings.plan_repeats)}
    nodes, pods = live_cluster(n_nodes, n_nodes * settings.pods_per_node)
    with tempfile.TemporaryDirectory() as tmp:
        return {"memory": await memory.measure("live", nodes, pods, tmp)}  # type: ignore[arg-type]


PART_TITLES = {
    "filter": "filter through HTTP, against the null handler",
    "plan": "plan_gang in process",
    "memory": "memory and sync through the stand-in API server",
}


async def run(settings: Settings, argv: Sequence[str]) -> dict[str, Any]:
    """Every part at every node count; the figures are written after each size, so a failed or
    interrupted long run still leaves what it measured."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TimeElapsedColumn

    t0 = time.monotonic()
    result: dict[str, Any] = {
        "bench": "scale",
        "command": " ".join(["python -m bench scale", *argv]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "pods_per_node": settings.pods_per_node,
        "sizes": [],
    }
    if "memory" in settings.parts:
        memory.warm_kernel_cache()  # no row pays a cold compile
    with Progress(
        SpinnerColumn(),
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ) as progress:
        task = progress.add_task("scale", total=len(settings.nodes) * len(settings.parts))
        for n in settings.nodes:
            row: dict[str, Any] = {"nodes": n}
            if "memory" in settings.parts:
                row["pods"] = n * settings.pods_per_node
            result["sizes"].append(row)
            for part in settings.parts:
                what = f"{n:,} nodes: {PART_TITLES[part]}"
                progress.update(task, description=what)
                part_t0 = time.monotonic()
                try:
                    row.update(await measure_part(settings, part, n))
                # a failed part is reported with the figures, and the other parts and sizes still run
                except Exception as exc:
                    row.setdefault("errors", {})[part] = f"{type(exc).__name__}: {exc}"[:2000]
                    progress.console.log(f"[red]{what} failed[/red]: {row['errors'][part]}")
                else:
                    progress.console.log(f"{what}: {time.monotonic() - part_t0:.1f} s")
                progress.advance(task)
            result["wall_s"] = round(time.monotonic() - t0, 1)
            write_report(result, settings.png_path, settings.json_path)
        progress.update(task, description="done")
    return result


def print_tables(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))  # piped output would wrap at 80 columns
    sizes = result["sizes"]
    if any("filter" in s for s in sizes):
        table = Table(title="filter through HTTP (ratio: p50 / null handler p50, same run)")
        for col in ("nodes", "case", "p50 ms", "p90 ms", "calls", "x null", "server CPU ms/call"):
            table.add_column(col, justify="left" if col == "case" else "right")
        for s in sizes:
            for case, f in s.get("filter", {}).items():
                table.add_row(
                    f"{s['nodes']:,}",
                    case,
                    f"{f['p50_ms']:.3f}",
                    f"{f['p90_ms']:.3f}",
                    f"{f['n']}",
                    f"{f['ratio_to_null_p50']:.2f}",
                    f"{f['server_cpu_ms_per_call']:.3f}",
                )
        console.print(table)
    if any("plan_ms" in s or "memory" in s for s in sizes):
        table = Table(title="planning in process, and memory and sync through a stand-in API server")
        cols = [f"plan {g} pods ms" for g in PLAN_GANGS]
        cols += ["pods", "RSS MiB", "peak MiB", "sync CPU s", "sync s", "ready s"]
        table.add_column("nodes", justify="right")
        for col in cols:
            table.add_column(col, justify="right")
        for s in sizes:
            plan = s.get("plan_ms", {})
            mem = s.get("memory", {})
            table.add_row(
                f"{s['nodes']:,}",
                *(plan_cell(plan.get(str(g))) for g in PLAN_GANGS),
                *(
                    f"{mem[k]:,}" if mem.get(k) is not None else "-"
                    for k in ("pods", "rss_mib", "peak_mib", "cpu_s", "sync_s", "ready_s")
                ),
            )
        console.print(table)


def plan_cell(figure: dict[str, Any] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['ms']:.3f}" + ("" if figure["placed"] else " (no fit)")


def write_report(result: dict[str, Any], png_path: Path, json_path: Path) -> None:
    """The figures as JSON and as a two-panel plot against node count."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    plot(result, png_path)


def plot(result: dict[str, Any], png_path: Path) -> None:
    # imported here, so nothing but this bench ever loads matplotlib; Figure needs no GUI backend
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    counts = FuncFormatter(lambda x, _: f"{x:,.0f}")

    sizes = result["sizes"]
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    with_filter = [s for s in sizes if "filter" in s]
    for case in PLOTTED_CASES:
        points = [(s["nodes"], s["filter"][case]["p50_ms"]) for s in with_filter if case in s["filter"]]
        if points:
            xs, ys = zip(*points, strict=True)
            style = {"color": "black", "linestyle": "--"} if case == "null" else {}
            left.plot(xs, ys, marker="o", label="null handler" if case == "null" else case, **style)
    left.set_xscale("log")
    left.set_yscale("log")
    left.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    left.yaxis.set_minor_formatter(NullFormatter())
    left.set_xlabel("nodes")
    left.set_ylabel("filter p50, ms (HTTP, loopback)")
    left.set_title("filter latency against node count")
    left.grid(True, which="both", alpha=0.3)
    if with_filter:
        left.legend()

    with_memory = [s for s in sizes if "memory" in s]
    xs = [s["nodes"] for s in with_memory]
    right.plot(xs, [s["memory"]["rss_mib"] for s in with_memory], marker="o", color="tab:blue", label="RSS")
    right.plot(
        xs,
        [s["memory"]["peak_mib"] for s in with_memory],
        marker=".",
        color="tab:blue",
        linestyle=":",
        label="peak RSS",
    )
    right.set_xscale("log")
    right.set_ylim(bottom=0, top=max([s["memory"]["peak_mib"] for s in with_memory], default=1) * 1.1)
    right.set_xlabel(f"nodes ({result.get('pods_per_node', '?')} bound pods per node)")
    right.set_ylabel("resident memory, MiB", color="tab:blue")
    right.set_title("memory and initial sync against node count")
    right.grid(True, which="both", alpha=0.3)
    cpu = right.twinx()
    cpu.plot(xs, [s["memory"]["cpu_s"] for s in with_memory], marker="s", color="tab:red", label="sync CPU")
    cpu.set_ylabel("service CPU until ready, s", color="tab:red")
    cpu.set_ylim(bottom=0, top=max([s["memory"]["cpu_s"] for s in with_memory], default=1) * 1.1)
    for ax in (left, right):
        ax.set_xticks([s["nodes"] for s in sizes])
        ax.xaxis.set_major_formatter(counts)
        ax.xaxis.set_minor_formatter(NullFormatter())
    if with_memory:
        handles = right.get_legend_handles_labels()[0] + cpu.get_legend_handles_labels()[0]
        right.legend(handles=handles, loc="upper left")
    fig.suptitle(f"gang-extender at scale: {result.get('command', '')}, {result.get('started_utc', '')}")
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = parse_args(argv)
    result = asyncio.run(run(settings, argv))
    print_tables(result)
    print(f"wrote {settings.json_path} and {settings.png_path}", flush=True)
    failed = [f"{s['nodes']} nodes: {part}" for s in result["sizes"] for part in s.get("errors", {})]
    if failed:
        print(f"failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
