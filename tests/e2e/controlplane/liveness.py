"""A kubelet's liveness probe, for the tier's processes: the shipped pod's kube-scheduler container is probed
at its sidecar's /healthz (manifests/base/deployment.yaml), so a dead extender on the leader restarts that
kube-scheduler, which hands the lease to the other replica. The tier has no kubelet for its own processes;
LivenessProbe plays that part from the Deployment's own probe fields: after initialDelaySeconds it GETs the
URL every periodSeconds, and after failureThreshold failures in a row it stops the container (SIGTERM, as
the kubelet does; kube-scheduler then releases its lease) and starts it again, as restartPolicy Always does,
after the kubelet's restart back-off (10 s at first): so the other replica, which retries every 2 s, takes
the lease, as it would in a cluster, rather than racing the restarted container for it.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProbeSpec:
    """A container's httpGet livenessProbe, with the API's defaults for the fields it leaves out."""

    path: str
    port: int
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3

    @classmethod
    def of(cls, probe: dict[str, Any]) -> ProbeSpec:
        get = probe["httpGet"]
        return cls(
            path=str(get["path"]),
            port=int(get["port"]),
            initial_delay_s=float(probe.get("initialDelaySeconds", 0)),
            period_s=float(probe.get("periodSeconds", 10)),
            timeout_s=float(probe.get("timeoutSeconds", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
        )


@dataclass
class LivenessProbe:
    """Probe `url` as `spec` says and restart the plane's process `container` when it fails; `restarts`
    records when each restart happened (time.monotonic())."""

    plane: Any
    container: str
    url: str
    spec: ProbeSpec
    restart_delay_s: float = 10.0
    restarts: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, *, skip_initial_delay: bool = False) -> LivenessProbe:
        """Begin probing; `skip_initial_delay` for a container that has been running longer than it."""
        delay = 0.0 if skip_initial_delay else self.spec.initial_delay_s
        self._thread = threading.Thread(
            target=self._run, args=(delay,), daemon=True, name=f"probe-{self.container}"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.spec.period_s + self.spec.timeout_s + 5)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=self.spec.timeout_s) as resp:
                return 200 <= resp.status < 400
        except OSError:
            return False

    def _run(self, delay_s: float) -> None:
        if self._stop.wait(delay_s):
            return
        failures = 0
        while not self._stop.wait(self.spec.period_s):
            failures = 0 if self._healthy() else failures + 1
            if failures < self.spec.failure_threshold:
                continue
            self.plane.kill(self.container, signal.SIGTERM)
            self.restarts.append(time.monotonic())
            if self._stop.wait(self.restart_delay_s):
                self.plane.respawn(self.container)  # restarted, whatever stops the probing
                return
            self.plane.respawn(self.container)
            failures = 0
            # a restarted container waits out its initial delay again
            if self._stop.wait(self.spec.initial_delay_s):
                return
