"""Prometheus metrics of the service, in a registry of its own (one per app, so tests don't collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Filter at 5k nodes is ~1 ms, at 15k ~3 ms; a gang bind waits up to the gang wait (seconds).
_BUCKETS_S = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


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
            "Internal faults answered in a verb's Error field",
            ["verb"],
            registry=r,
        )
        self.fast_path = Counter(
            "gang_extender_filter_fast_path",
            "Filter calls answered from a plan without decoding node names",
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
        self.bad_objects = Gauge(
            "gang_extender_bad_objects_skipped",
            "Objects from the API server the cache could not apply (skipped, logged)",
            registry=r,
        )
        self.sizes = Gauge("gang_extender_cache_objects", "Objects held in the caches", ["cache"], registry=r)

    def observe(self, verb: str, status: int, seconds: float) -> None:
        self.requests.labels(verb, str(status)).inc()
        self.latency.labels(verb).observe(seconds)

    def set_sizes(self, **sizes: int) -> None:
        for name, value in sizes.items():
            self.sizes.labels(name).set(value)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
