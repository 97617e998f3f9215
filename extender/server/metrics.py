"""Prometheus metrics of the service, in a registry of its own (one per app, so tests don't collide).

The process's own metrics (CPU, memory, open files, Python version) are in the same registry. The
cluster source keeps its own counts (API write errors, watch restarts; the state layer knows nothing
of Prometheus) and they are read from it at each scrape.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from extender import __version__

# Filter at 5k nodes is ~1 ms, at 15k ~3 ms; a gang bind waits up to the gang wait (seconds).
_BUCKETS_S = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# A gang waits for its pods (a Job's controller creating them), for room, and for its backoffs:
# from a fraction of a second to many minutes.
_BIND_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class SourceCounts(Collector):
    """The cluster source's counters, read at each scrape: `write_errors` ((write, status class) ->
    count), `watch_restarts` (kind -> count) and `bad_objects` (objects skipped). A source without
    them shows none (zero skipped)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        errors = CounterMetricFamily(
            "gang_extender_api_write_errors",
            "API writes that failed (after retries), by write and HTTP status class (connection: no answer)",
            labels=["write", "status_class"],
        )
        counts: Mapping[tuple[str, str], int] = getattr(self.source, "write_errors", None) or {}
        for (write, status_class), n in sorted(counts.items()):
            errors.add_metric([write, status_class], n)
        yield errors
        restarts = CounterMetricFamily(
            "gang_extender_watch_restarts",
            "Relists and re-watches after an error or 410 Gone, by kind",
            labels=["kind"],
        )
        by_kind: Mapping[str, int] = getattr(self.source, "watch_restarts", None) or {}
        for kind, n in sorted(by_kind.items()):
            restarts.add_metric([kind], n)
        yield restarts
        skipped = CounterMetricFamily(
            "gang_extender_bad_objects_skipped",
            "Objects from the API server the cache could not apply (each skipped and logged)",
        )
        skipped.add_metric([], int(getattr(self.source, "bad_objects", 0) or 0))
        yield skipped


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gang_extender_requests", "Requests by verb and HTTP status", ["verb", "code"], registry=r
        )
        self.latency = Histogram(
            "gang_extender_request_seconds",
            "Request latency by verb",
            ["verb"],
            buckets=_BUCKETS_S,
            registry=r,
        )
        self.errors = Counter(
            "gang_extender_internal_errors",
            "Internal faults of a verb, in its Error field (prioritize: zero scores; preempt: no node)",
            ["verb"],
            registry=r,
        )
        self.fast_path = Counter(
            "gang_extender_filter_fast_path",
            "Filter calls answered from a plan without decoding node names",
            registry=r,
        )
        self.plain_fast_path = Counter(
            "gang_extender_filter_plain_fast_path",
            "Filter calls for plain pods answered by checking only held, cordoned or settling nodes",
            registry=r,
        )
        self.lag_retries = Counter(
            "gang_extender_filter_lag_retries",
            "Refusals answered as an error kube-scheduler retries: an offered node had room in its cache "
            "that this one does not see yet (its pod watch behind)",
            registry=r,
        )
        self.gangs_bound = Counter(
            "gang_extender_gangs_bound", "Gangs whose quorum was bound together", registry=r
        )
        self.gang_timeouts = Counter(
            "gang_extender_gang_timeouts", "Gangs whose bind barrier timed out", registry=r
        )
        self.waiter_deadlines = Counter(
            "gang_extender_bind_deadline_answers",
            "Bind calls answered with an error at their own deadline, before kube-scheduler's httpTimeout",
            registry=r,
        )
        self.fenced_binds = Counter(
            "gang_extender_bind_fence_waits",
            "Bind calls that waited for the start-up bind fence (--bind-fence-s) before binding",
            registry=r,
        )
        self.release_failures = Counter(
            "gang_extender_release_bind_failures",
            "Members of a released gang whose binding the API refused or did not finish",
            registry=r,
        )
        self.release_seconds = Histogram(
            "gang_extender_release_seconds",
            "From a gang's barrier completing to every member's binding answered by the API server; "
            "--gang-wait-s must leave this much before kube-scheduler's httpTimeout",
            buckets=_BUCKETS_S,
            registry=r,
        )
        self.build_info = Gauge(
            "gang_extender_build_info", "1, labelled with the running release", ["version"], registry=r
        )
        self.build_info.labels(__version__).set(1)
        self.leader = Gauge(
            "gang_extender_leader",
            "1 while this replica acts on the cluster (its kube-scheduler holds the Lease, or it is the only "
            "replica), 0 while it follows and writes nothing",
            registry=r,
        )
        self.sizes = Gauge("gang_extender_cache_objects", "Objects held in the caches", ["cache"], registry=r)
        self.time_to_bind = Histogram(
            "gang_extender_gang_time_to_bind_seconds",
            "From a gang's first member seen by the filter to its quorum bound",
            buckets=_BIND_BUCKETS_S,
            registry=r,
        )
        self.gangs_pending = Gauge(
            "gang_extender_gangs_pending",
            "Gangs known to the service whose quorum is not bound yet",
            registry=r,
        )
        self.holds = Gauge(
            "gang_extender_holds",
            "Gangs holding capacity while they wait (the rows where they fit once drained; others plan "
            "around them)",
            registry=r,
        )
        self.hold_drained = Gauge(
            "gang_extender_hold_drained_ratio",
            "Of the head hold's nodes, the share that has the holder's amount free (1: it can start)",
            registry=r,
        )
        self.hold_seconds = Histogram(
            "gang_extender_hold_seconds",
            "How long each ended hold was held: from the gang's first hold to its start (or its leaving)",
            buckets=_BIND_BUCKETS_S,
            registry=r,
        )
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.preempt_candidates = Counter(
            "gang_extender_preempt_candidates",
            "Candidate nodes of kube-scheduler's preempt calls by what the verb did with them: kept, "
            "vetoed-breaks-gang, vetoed-reservation (others hold the room freed), vetoed-queue (KAI's queue "
            "rules forbid its victims), dropped-no-victim",
            ["outcome"],
            registry=r,
        )
        self.preemptions = Counter(
            "gang_extender_preemptions",
            "Gang preemptions by outcome: planned (victims evicted, room held), no-domain (nothing "
            "evicted), completed (planned into the freed room), expired (the hold ended first), given-up "
            "(pods bound by others took the room it held), reclaim "
            "(victims of queues over their fair share evicted for a gang of a queue below its own)",
            ["outcome"],
            registry=r,
        )
        self.preemption_victims = Counter(
            "gang_extender_preemption_victims",
            "Victims evicted by preempting gangs, by kind: gang (evicted whole) or pod",
            ["kind"],
            registry=r,
        )
        self.gang_evictions = Counter(
            "gang_extender_gang_evictions_total",
            "Running gangs evicted whole, once per incident, by why: disruption-all (a member of a "
            "disruptionMode all group went), below-quorum (a disruption left the gang below its quorum), "
            "stale (below its quorum longer than --stale-gang-grace-s)",
            ["why"],
            registry=r,
        )
        self.evicted_pods = Counter(
            "gang_extender_evicted_pods_total",
            "Pods the service evicted through the Eviction API (or removed, in an embedded cluster)",
            registry=r,
        )

        self.queue_allocated = Gauge(
            "gang_extender_queue_allocated",
            "Per KAI queue (its child queues included) and resource: requests of bound pods and capacity "
            "held for planned ones; cpu in millicores, memory in bytes, gpu in devices",
            ["queue", "resource"],
            registry=r,
        )
        self.queue_requested = Gauge(
            "gang_extender_queue_requested",
            "Per KAI queue and resource: allocated plus the requests of pending pods (same units)",
            ["queue", "resource"],
            registry=r,
        )
        self.queue_fair_share = Gauge(
            "gang_extender_queue_fair_share",
            "Per KAI queue and resource: its fair share of the cluster (same units)",
            ["queue", "resource"],
            registry=r,
        )

    def set_queues(self, queues: list[dict[str, Any]]) -> None:
        """The queue gauges from /debug/queues' rows; a queue gone since the last scrape is dropped."""
        gauges = {
            "allocated": self.queue_allocated,
            "requested": self.queue_requested,
            "fairShare": self.queue_fair_share,
        }
        for gauge in gauges.values():
            gauge.clear()
        for row in queues:
            for resource, amounts in (row.get("resources") or {}).items():
                for field, gauge in gauges.items():
                    gauge.labels(row["queue"], resource).set(amounts[field])

    def watch_source(self, source: Any) -> None:
        """Report `source`'s own counters (see SourceCounts) from here on."""
        self.registry.register(SourceCounts(source))

    def observe(self, verb: str, status: int, seconds: float) -> None:
        self.requests.labels(verb, str(status)).inc()
        self.latency.labels(verb).observe(seconds)

    def set_sizes(self, **sizes: int) -> None:
        for name, value in sizes.items():
            self.sizes.labels(name).set(value)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
