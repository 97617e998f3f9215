"""The simulator's report: per workload its gangs, pods, nodes, topology domains and bind times.

`build_report` makes one JSON-able dict; `to_json` prints it and `to_text` renders the same dict
for a person (plain aligned text: the report must read well in a CI log, where colour codes and
box-drawing from a rich-text library would only get in the way). A gang bound below its quorum
is the one outcome that must never happen; it is flagged on its own line and in the summary.

Gangs come from the service's GET /debug/gangs (`{"gangs": [{"gang", "quorum", "policy",
"phase", "members": [{"pod", ...}], "lastReason"}]}`); pods the service lists in no gang are
shown under their workload alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from extender.sim.cluster import BLOCK, GPU, RACK, TPU_SLICE, ZONE
from extender.sim.driver import PodOutcome, PodRecord, SimulationResult

DOMAIN_LEVELS = (("zone", ZONE), ("block", BLOCK), ("rack", RACK), ("tpu-slice", TPU_SLICE))


def gangs_from_debug(raw: Any) -> list[dict[str, Any]]:
    """[{key, quorum, policy, phase, members, reason}] from /debug/gangs, tolerating shape drift."""
    if isinstance(raw, dict):
        items = raw.get("gangs", raw.get("items", list(raw.values()) if raw and "gang" not in raw else [raw]))
    else:
        items = raw if isinstance(raw, list) else []
    out = []
    for g in items:
        if not isinstance(g, dict):
            continue
        key = g.get("gang") or g.get("key") or g.get("name")
        if not key:
            continue
        members = []
        for m in g.get("members") or []:
            if isinstance(m, str):
                members.append(m)
            elif isinstance(m, dict) and (m.get("pod") or m.get("key")):
                members.append(str(m.get("pod") or m.get("key")))
        quorum = next(
            (g[k] for k in ("quorum", "minMember", "minCount", "need") if isinstance(g.get(k), int)), None
        )
        out.append(
            {
                "key": str(key),
                "quorum": quorum,
                "policy": g.get("policy"),
                "phase": g.get("phase") or g.get("state"),
                "members": members,
                "reason": str(g.get("lastReason") or g.get("reason") or ""),
            }
        )
    return out


def build_report(result: SimulationResult) -> dict[str, Any]:
    """The whole report as plain data; the text and JSON forms both come from this."""
    gangs = gangs_from_debug(result.gangs_debug)
    gang_of: dict[str, dict[str, Any]] = {}
    for g in gangs:
        for m in g["members"]:
            gang_of[m] = g
    by_key = {p.key: p for p in result.pods}
    workloads = []
    order = [w.label for w in result.workloads]
    for p in result.pods:
        if p.workload not in order:
            order.append(p.workload)
    totals = Counter()
    for label in order:
        pods = result.pods_of(label)
        groups: list[dict[str, Any]] = []
        seen: set[str] = set()
        for p in pods:
            g = gang_of.get(p.key)
            if g is None or g["key"] in seen:
                continue
            seen.add(g["key"])
            members = [by_key[m] for m in g["members"] if m in by_key]
            groups.append(
                _group_entry(g["key"], members, quorum=g["quorum"], policy=g["policy"], reason=g["reason"])
            )
        loose = [p for p in pods if p.key not in gang_of]
        if loose and pods:
            groups.append(_group_entry(None, loose, quorum=None, policy=None, reason=""))
        for g in groups:
            totals[g["state"]] += 1
        workloads.append(
            {
                "workload": label,
                "pods_bound": sum(p.outcome is PodOutcome.BOUND for p in pods),
                "pods_total": len(pods),
                "groups": groups,
                "domains": _domains(pods, result.node_labels),
                "pods": [_pod_entry(p, result.node_labels) for p in pods],
            }
        )
    bound = sum(p.outcome is PodOutcome.BOUND for p in result.pods)
    return {
        "cluster": {"nodes": len(result.node_labels), "workloads": len(workloads)},
        "workloads": workloads,
        "problems": list(result.problems),
        "held": list(result.held),
        "overcommit": list(result.overcommit),
        "summary": {
            "pods_bound": bound,
            "pods_total": len(result.pods),
            "gangs_whole": totals["whole"],
            "gangs_partial": totals["PARTIAL"],
            "gangs_waiting": totals["waiting"],
            "wall_s": round(result.wall_s, 3),
            "simulated_s": round(result.sim_s, 3),
            "stop_reason": result.stop_reason.value,
            "requests": dict(result.requests),
        },
    }


def _group_entry(
    key: str | None, members: list[PodRecord], *, quorum: int | None, policy: str | None, reason: str
) -> dict[str, Any]:
    bound = sum(p.outcome is PodOutcome.BOUND for p in members)
    if key is None:
        state = "loose"  # the service tracks no gang for these pods: placed one by one
    elif policy == "basic" or (quorum is not None and quorum <= 1):
        state = "basic"
    elif bound == 0:
        state = "waiting"
    elif quorum is not None and bound < quorum:
        state = "PARTIAL"
    else:
        state = "whole"
    if not reason and state == "waiting":
        reason = next((p.last_message for p in members if p.last_message), "")
    return {
        "gang": key,
        "policy": policy,
        "quorum": quorum,
        "members": len(members),
        "bound": bound,
        "state": state,
        "reason": reason,
    }


def _domains(pods: list[PodRecord], node_labels: dict[str, dict[str, str]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for level, label in DOMAIN_LEVELS:
        counts = Counter(
            node_labels.get(p.node, {}).get(label)
            for p in pods
            if p.node and node_labels.get(p.node, {}).get(label)
        )
        if counts:
            out[level] = dict(sorted(counts.items()))
    return out


def _pod_entry(p: PodRecord, node_labels: dict[str, dict[str, str]]) -> dict[str, Any]:
    labels = node_labels.get(p.node or "", {})
    ttb = p.time_to_bind_s
    return {
        "namespace": p.namespace,
        "name": p.name,
        "outcome": p.outcome.value,
        "node": p.node,
        "rack": labels.get(RACK),
        "block": labels.get(BLOCK),
        "time_to_bind_s": None if ttb is None else round(ttb, 3),
        "attempts": p.attempts,
        "nudges": p.nudges,
        "reason": "" if p.outcome is PodOutcome.BOUND else p.last_message,
    }


def to_json(result: SimulationResult) -> str:
    return orjson.dumps(build_report(result), option=orjson.OPT_INDENT_2).decode()


def to_text(result: SimulationResult) -> str:
    rep = build_report(result)
    lines: list[str] = [
        f"gang-extender simulation: {rep['cluster']['nodes']} nodes, "
        f"{rep['cluster']['workloads']} workloads, {rep['summary']['pods_total']} pods",
        "times are on the simulated clock: from a pod's creation to its bind, backoff waits included",
        "",
    ]
    for w in rep["workloads"]:
        lines.append(f"{w['workload']}  —  {w['pods_bound']}/{w['pods_total']} pods bound")
        for g in w["groups"]:
            lines.append("  " + _group_line(g))
        if w["domains"]:
            doms = "   ".join(
                f"{level}: " + ", ".join(f"{d}×{n}" if n > 1 else d for d, n in counts.items())
                for level, counts in w["domains"].items()
            )
            lines.append(f"  domains  {doms}")
        rows = [
            (
                p["name"],
                p["node"] or "—",
                p["rack"] or "—",
                p["block"] or "—",
                "—" if p["time_to_bind_s"] is None else f"{p['time_to_bind_s']:.2f}s",
                str(p["attempts"]),
            )
            for p in w["pods"]
        ]
        if rows:
            lines.extend(
                "    " + r for r in _table(("POD", "NODE", "RACK", "BLOCK", "BOUND AFTER", "TRIES"), rows)
            )
        # pods of one gang usually wait for the same reason: say it once for all of them
        waiting: dict[tuple[str, str], list[str]] = {}
        for p in w["pods"]:
            if p["outcome"] != "bound":
                waiting.setdefault((p["outcome"], p["reason"] or "not tried yet"), []).append(p["name"])
        for (outcome, reason), names in waiting.items():
            who = names[0] if len(names) == 1 else f"{len(names)} pods ({names[0]}, ...)"
            lines.append(f"    {outcome.upper()} {who}: {reason}")
        lines.append("")
    if rep["held"]:
        lines.append("Sequenced steps never released (predecessor not Ready): " + ", ".join(rep["held"]))
    for msg in rep["problems"]:
        lines.append(f"input problem: {msg}")
    for msg in rep["overcommit"]:
        lines.append(f"!!! OVER-COMMITTED NODE {msg}")
    partial = [(w["workload"], g) for w in rep["workloads"] for g in w["groups"] if g["state"] == "PARTIAL"]
    for wl, g in partial:
        lines.append(f"!!! PARTIAL GANG {g['gang']} ({wl}): {g['bound']} bound, quorum {g['quorum']}")
    s = rep["summary"]
    lines.append(
        f"pods bound {s['pods_bound']}/{s['pods_total']} · gangs whole {s['gangs_whole']}, "
        f"waiting {s['gangs_waiting']}, PARTIAL {s['gangs_partial']} · "
        f"wall {s['wall_s']:.1f}s (simulated {s['simulated_s']:.1f}s) · stopped: {s['stop_reason']}"
    )
    return "\n".join(lines)


def _group_line(g: dict[str, Any]) -> str:
    if g["gang"] is None:
        return f"no gang: {g['bound']}/{g['members']} placed pod by pod"
    quorum = f"quorum {g['quorum']}" if g["quorum"] is not None else "quorum ?"
    head = f"gang {g['gang']} ({g['policy'] or 'gang'}, {quorum}): {g['bound']}/{g['members']} bound"
    if g["state"] == "PARTIAL":
        return f"!!! {head} — PARTIAL, below quorum"
    if g["state"] == "waiting":
        return f"{head} — waiting: {g['reason'] or 'no reason given'}"
    return f"{head} — {g['state']}"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def preemption_summary(result: SimulationResult) -> dict[str, Any]:
    """Who was evicted (and whether whole), who was left alone, and where the newcomers landed."""
    evicted, untouched, landed = [], [], []
    for label in dict.fromkeys(p.workload for p in result.pods):
        pods = result.pods_of(label)
        racks = sorted({result.node_labels.get(p.node or "", {}).get(RACK) or "?" for p in pods if p.node})
        gone = sum(p.outcome is PodOutcome.EVICTED for p in pods)
        bound = sum(p.outcome is PodOutcome.BOUND for p in pods)
        entry = {"workload": label, "pods": len(pods), "evicted": gone, "bound": bound, "racks": racks}
        if gone:
            entry["whole"] = gone == len(pods)
            evicted.append(entry)
        elif all(p.last_message == "already bound in the input" for p in pods):
            untouched.append(entry)
        else:
            landed.append(entry)
    return {"evicted": evicted, "untouched": untouched, "arrived": landed}


def preemption_text(result: SimulationResult, title: str) -> str:
    rep = preemption_summary(result)

    def where(e: dict[str, Any]) -> str:
        return f"rack {', '.join(e['racks'])}" if e["racks"] else "nowhere"

    lines = [title]
    for e in rep["arrived"]:
        lines.append(f"  arrived  {e['workload']}: {e['bound']}/{e['pods']} bound in {where(e)}")
    for e in rep["evicted"]:
        state = "whole" if e["whole"] else "!!! ONLY PART OF IT"
        lines.append(f"  evicted  {e['workload']}: {e['evicted']}/{e['pods']} pods ({state}) from {where(e)}")
    for e in rep["untouched"]:
        lines.append(f"  kept     {e['workload']}: {e['bound']}/{e['pods']} running in {where(e)}")
    return "\n".join(lines)


def queue_summary(result: SimulationResult) -> dict[str, Any]:
    """Each queue's gpu quota, limit, fair share, use (now, peak, after an eviction) and held gangs;
    the gangs placed in the run and those still waiting; the gangs a reclaim evicted (whole or not)
    and whether their queue kept its quota; every moment a queue went past its limit."""
    raw = result.queues_debug if isinstance(result.queues_debug, dict) else {}
    queues = []
    for q in raw.get("queues") or []:
        if not isinstance(q, dict) or "resources" not in q:
            continue
        name = str(q.get("queue"))
        gpu = (q.get("resources") or {}).get("gpu") or {}
        low = result.queue_low_after_eviction.get(name, {}).get(GPU)
        quota = gpu.get("quota")
        queues.append(
            {
                "queue": name,
                "quota": quota,
                "limit": gpu.get("limit"),
                "overQuotaWeight": gpu.get("overQuotaWeight"),
                "fairShare": gpu.get("fairShare"),
                "allocated": gpu.get("allocated"),
                "requested": gpu.get("requested"),
                "peak": result.queue_peak.get(name, {}).get(GPU, 0),
                "lowAfterEviction": low,
                "quotaKept": None if low is None else quota is None or low >= quota,
                "held": dict(q.get("held") or {}),
            }
        )
    queue_of_workload = {p.workload: result.pod_queues.get(p.key) for p in result.pods}
    moved = preemption_summary(result)
    evicted = [{**e, "queue": queue_of_workload.get(e["workload"])} for e in moved["evicted"]]
    placed = [
        {
            "workload": e["workload"],
            "queue": queue_of_workload.get(e["workload"]),
            "bound": e["bound"],
            "pods": e["pods"],
        }
        for e in moved["arrived"]
        if e["bound"]
    ]
    held = {g for q in queues for g in q["held"]}
    workloads = build_report(result)["workloads"]
    waiting = [
        {"gang": g["gang"], "queue": queue_of_workload.get(w["workload"]), "reason": g["reason"]}
        for w in workloads
        for g in w["groups"]
        if g["state"] == "waiting" and g["gang"] not in held
    ]
    turned_away = [
        {"gang": g["gang"], "queue": queue_of_workload.get(w["workload"]), "reason": reason}
        for w in workloads
        for g in w["groups"]
        if g["gang"]
        for reason in _queue_reasons(g["gang"], result.pods_of(w["workload"]))
    ]
    return {
        "queues": queues,
        "placed": placed,
        "evicted": evicted,
        "waiting": waiting,
        "turnedAway": turned_away,
        "breaches": list(result.queue_breaches),
    }


def _queue_reasons(gang: str, pods: list[PodRecord]) -> list[str]:
    """The distinct reasons the service gave for turning `gang`'s pods away on account of a queue (a
    limit, a fair-share hold, a reclaim under way), first seen first, each cut from kube-scheduler's
    summary of every node's reason."""
    out: list[str] = []
    for p in pods:
        for message in p.reasons:
            at = message.find(f"gang {gang}: queue ")
            if at < 0:
                continue
            reason = message[at + len(f"gang {gang}: ") :].rstrip(".")
            if reason not in out:
                out.append(reason)
    return out


def queue_text(result: SimulationResult, title: str) -> str:
    rep = queue_summary(result)

    def amount(v: Any) -> str:
        return "none" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

    rows = [
        (
            q["queue"],
            amount(q["quota"]),
            amount(q["limit"]),
            amount(q["overQuotaWeight"]),
            amount(q["fairShare"]),
            amount(q["allocated"]),
            amount(q["peak"]),
            amount(q["requested"]),
        )
        for q in rep["queues"]
    ]
    lines = [title, "  GPUs per queue:"]
    if rows:
        header = ("QUEUE", "QUOTA", "LIMIT", "WEIGHT", "FAIR SHARE", "IN USE", "PEAK", "REQUESTED")
        lines.extend("    " + r for r in _table(header, rows))
    else:
        lines.append("    the service reported no queues")
    for p in rep["placed"]:
        lines.append(
            f"  placed   {p['workload']} of {p['queue'] or '?'}: {p['bound']}/{p['pods']} pods bound"
        )
    for q in rep["queues"]:
        if q["limit"] is not None:
            above = any(b.startswith(f"queue {q['queue']}: ") for b in rep["breaches"])
            verdict = "!!! WENT ABOVE" if above else "never above"
            lines.append(
                f"  limit    {q['queue']}: peak in use {q['peak']} GPUs, {verdict} its limit of {q['limit']}"
            )
        for gang, why in q["held"].items():
            lines.append(f"  held     {gang} ({q['queue']}): {why}")
    shown = {(gang, why) for q in rep["queues"] for gang, why in q["held"].items()}
    for t in rep["turnedAway"]:
        if (t["gang"], t["reason"]) not in shown:
            lines.append(f"  earlier  {t['gang']} ({t['queue'] or '?'}): {t['reason']}")
    for w in rep["waiting"]:
        lines.append(f"  waiting  {w['gang']} ({w['queue'] or '?'}): {w['reason'] or 'no reason given'}")
    quota_kept = {q["queue"]: q for q in rep["queues"] if q["quotaKept"] is not None}
    for e in rep["evicted"]:
        state = "whole" if e["whole"] else "!!! ONLY PART OF IT"
        q = quota_kept.get(e["queue"] or "")
        kept = ""
        if q is not None:
            verdict = "at or above" if q["quotaKept"] else "!!! BELOW"
            low, quota = q["lowAfterEviction"], amount(q["quota"])
            kept = f"; {q['queue']} kept {low} GPUs, {verdict} its quota of {quota}"
        who = f"{e['workload']} of {e['queue'] or '?'}"
        lines.append(f"  reclaim  evicted {who}: {e['evicted']}/{e['pods']} pods ({state}){kept}")
    for msg in rep["breaches"]:
        lines.append(f"!!! QUEUE OVER ITS LIMIT {msg}")
    return "\n".join(lines)
