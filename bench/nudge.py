"""How soon kube-scheduler retries a pod its filter extender turned away, with and without the nudge.

    python -m bench nudge [--quick] [--versions 1.20.2,1.36.2] [--pods N] [--cap-s 90] [--nudge-after-s 0.5]
        [--cases plain,unresolvable,nudge,repeat,parked]

For each version: a loopback control plane (tests/e2e/controlplane/start.py; no controller-manager),
a few fake Ready nodes, and kube-scheduler with the shipped manifests/base/scheduler-config.yaml (as it is
on 1.36, converted to v1beta1 on 1.20, the way start.py does it) whose extender is a tiny instrumented
aiohttp app served from this process. Only the filter verb is kept (kube-scheduler binds the pods
itself) and leader election is off; everything else is the shipped file. The extender answers a test
pod's first filter call with every node failed, and passes every later call (except in the repeat and
parked cases); it records when each call arrived and when each rejection was answered.

Cases, one batch of N pods each (all created at once; plain, unresolvable and repeat run together):

- plain: FailedNodes, no nudge. Delay = rejection answered -> next filter call for that pod.
- unresolvable: the same with FailedAndUnresolvableNodes.
- nudge: FailedNodes, then `--nudge-after-s` after the rejection a merge patch of one annotation
  (gang-extender.io/nudge, a fresh value: what extender/state/kube.py nudge_pod sends).
  Delay = patch sent -> next filter call (and rejection -> next call, to compare with plain).
- repeat: FailedNodes on the first 6 calls, no nudge: the gap after each rejection. The first
  rejection is retried at once on both releases (most likely because kube-scheduler's own
  PodScheduled=False status write comes back as a pod update that requeues it; a repeat of the same
  condition is not written), and a pod turned away again stays parked much longer.
- parked: every call turned away until the nudge; pods are nudged one at a time, each once it has had
  no call for 2 s since its last rejection (parked). Delay = patch sent -> next filter call.

A pod not called again within `--cap-s` of its rejection is counted as "> cap". Prints one JSON
object per case and version, then a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from controlplane.start import (  # noqa: E402  (the e2e tier is not a package)
    SCHEDULER_NAME,
    TOKEN,
    VERSIONS,
    ControlPlane,
    PlaneUnavailable,
    free_port,
)

NUDGE_ANNOTATION = "gang-extender.io/nudge"  # extender.model.labels.NUDGE
NAMESPACE = "default"
NODES = 3
CASES = ("plain", "unresolvable", "nudge", "repeat", "parked")
PARKED_QUIET_S = 2.0  # the parked case: a pod not called for this long since its last rejection is parked
REPEAT_REJECTIONS = 6  # the repeat case: the first calls turned away, to see the gaps between retries


@dataclass
class Trace:
    """One test pod as the extender saw it."""

    case: str
    rejections: int = 1  # how many first calls are turned away
    until_nudged: bool = False  # the parked case: every call is turned away until the nudge is sent
    closed: bool = False  # its batch is over: later calls are neither recorded nor turned away
    rejections_before_patch: int | None = None
    calls: list[float] = field(default_factory=list)  # arrival of every filter call (monotonic)
    answers: list[float] = field(default_factory=list)  # every rejecting answer, just before it was sent
    rejected_at: float | None = None  # the rejecting answer, just before it was sent
    rejected: asyncio.Event = field(default_factory=asyncio.Event)
    nudge_sent: float | None = None
    nudge_done: float | None = None

    def retry_at(self) -> float | None:
        return self.calls[1] if len(self.calls) > 1 else None


class Extender:
    """The instrumented filter extender: rejects a traced pod's first call, passes the rest."""

    def __init__(self) -> None:
        self.traces: dict[str, Trace] = {}
        self.untraced_calls = 0

    async def filter(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        doc = orjson.loads(await request.read())
        names = doc.get("NodeNames")
        if names is None:  # not nodeCacheCapable: whole Node objects
            names = [n["metadata"]["name"] for n in ((doc.get("Nodes") or {}).get("items") or [])]
        pod = ((doc.get("Pod") or {}).get("metadata") or {}).get("name", "")
        trace = self.traces.get(pod)
        reply: dict[str, Any] = {
            "NodeNames": names,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
        if trace is None or trace.closed:
            self.untraced_calls += 1
        else:
            trace.calls.append(now)
            if trace.until_nudged:
                reject = trace.nudge_sent is None
            else:
                reject = len(trace.calls) <= trace.rejections
            if reject:
                reason = {n: "bench: turned away by the extender" for n in names}
                key = "FailedAndUnresolvableNodes" if trace.case == "unresolvable" else "FailedNodes"
                reply["NodeNames"] = []
                reply[key] = reason
                trace.answers.append(time.monotonic())
                if trace.rejected_at is None:
                    trace.rejected_at = trace.answers[0]
                    trace.rejected.set()
        return web.Response(body=orjson.dumps(reply), content_type="application/json")


def pod_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "sleep:v0.1.0"}],
        },
    }


def source_config(workdir: Path) -> Path:
    """The shipped v1 file with only the filter verb and no leader election; start.py converts it."""
    cfg = yaml.safe_load((REPO / "manifests" / "base" / "scheduler-config.yaml").read_text())
    cfg["leaderElection"] = {"leaderElect": False}
    (ext,) = cfg["extenders"]
    for verb in ("prioritizeVerb", "bindVerb", "preemptVerb"):
        ext.pop(verb, None)
    path = workdir / "scheduler-config.source.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def stats(values: list[float | None], cap_s: float) -> dict[str, Any]:
    """p50 and max over every pod; a pod never retried within the cap counts as +inf."""
    vals = sorted(float("inf") if v is None else v for v in values)
    if not vals:
        return {"n": 0}
    p50 = statistics.median(vals)
    return {
        "n": len(vals),
        "over_cap": sum(1 for v in vals if v == float("inf")),
        "p50_s": None if p50 == float("inf") else round(p50, 3),
        "max_s": None if vals[-1] == float("inf") else round(vals[-1], 3),
        "min_s": None if vals[0] == float("inf") else round(vals[0], 3),
    }


def fmt(value: float | None, cap_s: float) -> str:
    return f"> {cap_s:g} s" if value is None else f"{value:.2f} s"


async def run_version(version: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    t_start = time.monotonic()
    plane = ControlPlane(controller_manager=False, version=version)
    extender = Extender()
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/filter", extender.filter)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    rows: list[dict[str, Any]] = []
    ok = False
    try:
        await asyncio.to_thread(plane.start)
        for i in range(NODES):
            await asyncio.to_thread(plane.add_node, f"node-{i}", labels={})
        await asyncio.to_thread(
            plane.start_scheduler,
            url_prefix=f"http://127.0.0.1:{port}",
            config=source_config(plane.workdir),
        )
        headers = {"Authorization": f"Bearer {TOKEN}"}
        connector = aiohttp.TCPConnector(ssl=False, limit=64)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            pods_path = f"{plane.server}/api/v1/namespaces/{NAMESPACE}/pods"

            async def create(name: str) -> None:
                async with session.post(
                    pods_path,
                    data=orjson.dumps(pod_object(name)),
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    if resp.status not in (200, 201):
                        raise RuntimeError(f"create {name} -> {resp.status}: {(await resp.read())[:200]!r}")

            async def bound(name: str) -> bool:
                async with session.get(f"{pods_path}/{name}") as resp:
                    return bool(((await resp.json()).get("spec") or {}).get("nodeName"))

            # Warm-up: an untraced pod, passed on its first call, proves the path and syncs the caches.
            await create("warmup")
            deadline = time.monotonic() + 60
            while not await bound("warmup"):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"warm-up pod not bound in 60 s: {plane.log_tail('kube-scheduler', 8)}"
                    )
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # let the warm-up's own events settle before any test pod is rejected

            async def nudge(name: str, trace: Trace) -> None:
                await trace.rejected.wait()
                await asyncio.sleep(args.nudge_after_s)
                await patch(name, trace)

            async def patch(name: str, trace: Trace) -> None:
                body = orjson.dumps({"metadata": {"annotations": {NUDGE_ANNOTATION: str(time.time_ns())}}})
                trace.nudge_sent = time.monotonic()
                async with session.patch(
                    f"{pods_path}/{name}",
                    data=body,
                    headers={"Content-Type": "application/merge-patch+json"},
                ) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"nudge {name} -> {resp.status}")
                trace.nudge_done = time.monotonic()

            async def batch(cases: tuple[str, ...]) -> dict[str, dict[str, Trace]]:
                traces: dict[str, dict[str, Trace]] = {c: {} for c in cases}
                for case in cases:
                    for i in range(args.pods):
                        name = f"{case}-{i:03d}"
                        rejections = REPEAT_REJECTIONS if case == "repeat" else 1
                        trace = Trace(case, rejections, until_nudged=case == "parked")
                        traces[case][name] = extender.traces[name] = trace
                await asyncio.gather(*(create(n) for c in cases for n in traces[c]))
                if cases == ("parked",):
                    await nudge_parked(traces["parked"])
                    for t in traces["parked"].values():
                        t.closed = True
                    return traces
                nudges = [asyncio.create_task(nudge(n, t)) for n, t in traces.get("nudge", {}).items()]
                every = [t for c in cases for t in traces[c].values()]
                end = time.monotonic() + args.cap_s + 30  # a pod never rejected would hang the run

                def settled(t: Trace) -> bool:
                    if len(t.calls) > t.rejections:
                        return True
                    return t.rejected_at is not None and time.monotonic() > t.rejected_at + args.cap_s

                while not all(settled(t) for t in every) and time.monotonic() < end:
                    await asyncio.sleep(0.05)
                for task in nudges:
                    task.cancel()
                await asyncio.gather(*nudges, return_exceptions=True)
                for t in every:
                    t.closed = True
                return traces

            async def nudge_parked(traces: dict[str, Trace]) -> None:
                """One pod at a time: once it has been left alone for PARKED_QUIET_S since its last
                rejection, patch it and wait for its next call (every call before the patch is refused)."""
                cap = min(args.cap_s, 30.0)
                for name, t in traces.items():
                    end = time.monotonic() + cap + 30
                    while time.monotonic() < end:
                        quiet = t.answers and len(t.calls) == len(t.answers)
                        if quiet and time.monotonic() - t.answers[-1] >= PARKED_QUIET_S:
                            break
                        await asyncio.sleep(0.05)
                    else:
                        continue  # never rejected, or never left alone: reported as never patched
                    t.rejections_before_patch = len(t.answers)
                    await patch(name, t)
                    end = time.monotonic() + cap
                    while len(t.calls) == len(t.answers) and time.monotonic() < end:
                        await asyncio.sleep(0.01)

            cases_now = tuple(c for c in ("plain", "unresolvable", "repeat") if c in args.cases)
            results: dict[str, dict[str, Trace]] = {}
            if cases_now:
                results |= await batch(cases_now)
            if "nudge" in args.cases:
                results |= await batch(("nudge",))
            if "parked" in args.cases:
                results |= await batch(("parked",))

        for case, traces in results.items():
            never_rejected = sum(1 for t in traces.values() if t.rejected_at is None)
            from_reject: list[float | None] = []
            from_patch: list[float | None] = []
            before_patch = 0
            for t in traces.values():
                retry, rej = t.retry_at(), t.rejected_at
                in_cap = retry is not None and rej is not None and retry - rej <= args.cap_s
                from_reject.append(retry - rej if in_cap and retry and rej else None)
                if case == "nudge":
                    if retry is not None and (t.nudge_sent is None or retry < t.nudge_sent):
                        before_patch += 1  # came back on its own: the patch had nothing to do
                    elif t.nudge_sent is not None:
                        from_patch.append(retry - t.nudge_sent if in_cap and retry else None)
            calls = [len(t.calls) for t in traces.values()]
            row: dict[str, Any] = {
                "bench": "nudge",
                "version": version,
                "case": case,
                "pods": len(traces),
                "never_rejected": never_rejected,
                "reject_to_retry": stats(from_reject, args.cap_s),
                "filter_calls_per_pod_max": max(calls) if calls else 0,
            }
            if case == "repeat":
                # gap k: the k-th rejecting answer -> the next call, median and max over the pods
                # (no next call within the batch: +inf, shown as "> cap")
                gaps: list[list[float]] = [[] for _ in range(REPEAT_REJECTIONS)]
                for t in traces.values():
                    for k, answered in enumerate(t.answers):
                        gaps[k].append(t.calls[k + 1] - answered if k + 1 < len(t.calls) else float("inf"))
                row["rejections"] = REPEAT_REJECTIONS
                row["gaps"] = [stats([None if v == float("inf") else v for v in g], args.cap_s) for g in gaps]
                row["pods_done"] = sum(1 for t in traces.values() if len(t.calls) > REPEAT_REJECTIONS)
                spans = [
                    t.calls[REPEAT_REJECTIONS] - t.calls[0]
                    for t in traces.values()
                    if len(t.calls) > REPEAT_REJECTIONS
                ]
                if spans:
                    row["first_to_passing_call_p50_s"] = round(statistics.median(spans), 3)
            if case == "parked":
                waits: list[float | None] = []
                for t in traces.values():
                    k = t.rejections_before_patch
                    if k is None or t.nudge_sent is None:
                        continue
                    waits.append(t.calls[k] - t.nudge_sent if len(t.calls) > k else None)
                row["quiet_s"] = PARKED_QUIET_S
                row["patched"] = len(waits)
                row["patch_to_retry"] = stats(waits, min(args.cap_s, 30.0))
                before = [t.rejections_before_patch for t in traces.values() if t.rejections_before_patch]
                row["rejections_before_parked_p50"] = statistics.median(before) if before else None
                row["rejections_before_parked_max"] = max(before) if before else None
            if case == "nudge":
                row["nudge_after_s"] = args.nudge_after_s
                row["patch_to_retry"] = stats(from_patch, args.cap_s)
                row["retried_before_patch"] = before_patch
                row["patch_rtt_ms_p50"] = round(
                    1000
                    * statistics.median(
                        [
                            t.nudge_done - t.nudge_sent
                            for t in traces.values()
                            if t.nudge_done and t.nudge_sent
                        ]
                        or [0.0]
                    ),
                    1,
                )
            row["untraced_calls"] = extender.untraced_calls
            rows.append(row)
            print(json.dumps(row), flush=True)
        ok = True
    except (PlaneUnavailable, AssertionError, RuntimeError) as exc:
        print(f"# {version}: bench failed: {exc}\n# logs in {plane.workdir}", file=sys.stderr)
    finally:
        await asyncio.to_thread(plane.stop)
        await runner.cleanup()
        if ok and not args.keep_dir:
            shutil.rmtree(plane.workdir, ignore_errors=True)
    print(f"# {version}: {time.monotonic() - t_start:.0f}s", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict[str, Any]], cap_s: float) -> str:
    lines = [
        "| kube-scheduler | case | pods | rejection -> retry p50 | max | nudge patch -> retry p50 | max "
        "| came back before the patch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    titles = {
        "plain": "FailedNodes, no nudge",
        "unresolvable": "FailedAndUnresolvableNodes, no nudge",
        "nudge": "FailedNodes, nudge",
    }
    repeats = [r for r in rows if r["case"] == "repeat"]
    for r in rows:
        if r["case"] == "repeat":
            continue
        rej = r["reject_to_retry"]
        cells = [r["version"], titles.get(r["case"], r["case"]), str(r["pods"])]
        if r["case"] == "parked":
            cap = min(cap_s, 30.0)
            pat = r["patch_to_retry"]
            cells[1] = (
                f"turned away until nudged; patched once parked ({r['quiet_s']:g} s without a call; "
                f"after {r['rejections_before_parked_p50']:g} rejections p50, "
                f"{r['rejections_before_parked_max']} max)"
            )
            cells += ["-", "-", fmt(pat.get("p50_s"), cap), fmt(pat.get("max_s"), cap), "-"]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        cells += [fmt(rej.get("p50_s"), cap_s), fmt(rej.get("max_s"), cap_s)]
        if r["case"] == "nudge":
            pat = r["patch_to_retry"]
            cells[1] = f"{titles['nudge']} {r['nudge_after_s']:g} s after the rejection"
            if pat.get("n"):
                cells += [fmt(pat.get("p50_s"), cap_s), fmt(pat.get("max_s"), cap_s)]
            else:
                cells += ["n/a", "n/a"]
            cells.append(f"{r['retried_before_patch']} of {r['pods']}")
        else:
            cells += ["-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    if repeats:
        n = max(len(r["gaps"]) for r in repeats)
        lines += [
            "",
            f"| kube-scheduler | pods turned away on their first {n} calls | "
            + " | ".join(f"gap {k + 1} p50 (max)" for k in range(n))
            + " |",
            "|---|---|" + "---|" * n,
        ]
        for r in repeats:
            gaps = [f"{fmt(g.get('p50_s'), cap_s)} ({fmt(g.get('max_s'), cap_s)})" for g in r["gaps"]]
            cells = [r["version"], f"{r['pods_done']} of {r['pods']} passed within the cap", *gaps]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench nudge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 pods per case (default 20)")
    parser.add_argument("--versions", default=",".join(VERSIONS), help="control-plane versions, in order")
    parser.add_argument("--pods", type=int, default=None, help="pods per case (default 20; quick 5)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"subset of {','.join(CASES)}")
    parser.add_argument("--cap-s", type=float, default=90.0, help="give up on a retry after this long")
    parser.add_argument("--nudge-after-s", type=float, default=0.5, help="rejection -> patch")
    parser.add_argument("--keep-dir", action="store_true", help="keep each plane's work directory (logs)")
    args = parser.parse_args(argv)
    args.versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    unknown = [v for v in args.versions if v not in VERSIONS]
    if unknown:
        parser.error(f"--versions: unknown {unknown}; choose from {','.join(VERSIONS)}")
    args.cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    if any(c not in CASES for c in args.cases):
        parser.error(f"--cases: choose from {','.join(CASES)}")
    args.pods = args.pods or (5 if args.quick else 20)
    return args


async def bench_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for version in args.versions:
        rows += await run_version(version, args)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    t0 = time.monotonic()
    try:
        rows = asyncio.run(bench_all(args))
    except PlaneUnavailable as exc:
        print(f"control plane unavailable: {exc}", file=sys.stderr)
        return 2
    print(markdown(rows, args.cap_s))
    print(f"# total {time.monotonic() - t0:.0f}s", file=sys.stderr)
    expected = len(args.versions) * len(args.cases)
    return 0 if len(rows) == expected and all(r["never_rejected"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
