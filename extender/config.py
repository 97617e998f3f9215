"""Settings: frozen dataclasses, each field's unit in its name, validated in one pass.

Every flag of the CLI has an environment-variable twin (GANG_EXTENDER_<FLAG>); `validate` returns
every error at once so an operator fixes a configuration in one go.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.model.lease import split_lease_ref

MIN_BIND_MARGIN_S = 1.0
"""How much sooner than kube-scheduler's `httpTimeout` the gang wait must end. When a gang is released
(or its wait ends) the waiting binds still have work to do before they answer: the release's binds are
parallel POSTs to the API server, each normally well under 100 ms but slower under load, and
kube-scheduler's clock for the bind call starts before ours (its request is still in flight to us).
With no margin, `--gang-wait-s 3.99 --http-timeout-s 4` answered a bind at 4.004 s, after
kube-scheduler had given up on it."""


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    """Where `serve` listens. Loopback by default: the service runs beside kube-scheduler in its pod."""
    port: int = 8888
    probe_host: str = ""
    """Where /healthz, /readyz and /metrics are also served (and nothing else), e.g. 0.0.0.0 in a pod
    so the kubelet and Prometheus reach them on the pod IP while the verbs stay on loopback. Empty: off."""
    probe_port: int = 8889
    max_body_bytes: int = 64 * 2**20
    """Larger request bodies get HTTP 400. 15k node names are ~0.7 MiB; full-Node mode at 5k is ~30 MB."""
    tls_cert_file: str = ""
    """PEM certificate (chain) for TLS on --host/--port; empty: plain HTTP. The probe address stays plain HTTP
    (the kubelet probes it). kube-scheduler reaches it with `enableHTTPS: true` and checks it against
    `tlsConfig.caFile`, so it must name the URL's host (an IP SAN for 127.0.0.1) or `tlsConfig.serverName`."""
    tls_key_file: str = ""
    """The unencrypted PEM private key of tls_cert_file."""
    tls_client_ca_file: str = ""
    """PEM CA bundle: when set, every caller must present a certificate it signed (kube-scheduler's
    `tlsConfig.certFile`/`keyFile`); without one the TLS handshake fails. Empty: none is asked for."""


@dataclasses.dataclass(frozen=True)
class GangSettings:
    wait_s: float = 8.0
    """How long a gang's bind barrier waits for quorum. Must end at least MIN_BIND_MARGIN_S before
    kube-scheduler's `httpTimeout` (10 s in the shipped configuration), so the waiting binds answer
    with our error, or the release's binds land, before kube-scheduler times the call out."""
    hold_s: float = 30.0
    """How long a gang's plan and reservation wait for the next planned member to reach bind: the
    plan ends `hold_s` after it was made or after the last member that reached bind for the first
    time, whichever is later, so a gang of thousands, one kube-scheduler cycle a member, keeps its
    plan while its members keep coming. Longer than kube-scheduler's longest pod backoff (10 s by
    default): members whose bind calls were answered at the end of a gang wait come back spread over
    that backoff, and a member that reached bind once keeps its place until the rest arrive."""
    backoff_initial_s: float = 2.0
    """Delay before a gang that timed out at the barrier is planned again; doubles per failure."""
    backoff_max_s: float = 60.0
    native_gang_scheduling: bool = False
    """kube-scheduler's own GangScheduling plugin is on in the profile that calls this service. Pods
    that join a scheduling.k8s.io PodGroup through `spec.schedulingGroup` are then gated by that
    plugin (it holds them until minCount are ready and releases them together), so this service
    places them pod by pod, respecting every reservation, and never gates them a second time.
    Every other gang (KAI PodGroups, derived groups, JobSet spec.scheduling without the native
    field) stays this service's."""
    reason_nodes: int = 16
    """How many rejected nodes carry the reason. kube-scheduler 1.20 reads only FailedNodes, and a map of
    every node costs it ~6.6 ms to decode at 5k nodes, so a bounded sample carries the message."""
    preemption_hold_s: float = 60.0
    """How long the room a preempting gang freed (its victims' capacity, as each victim goes) is held
    for it alone. The gang is planned into it as soon as every victim is gone; past this, the room
    is free to everyone again. Long enough for the victims' graceful termination."""
    stale_grace_s: float = 60.0
    """How long a gang that was bound whole may run below its quorum (members failed or went) before
    the rest are evicted, so a broken gang does not hold its nodes forever. 0: never."""
    release_on_first_bind: bool = True
    """Bind a planned gang whole when its first member reaches bind, rather than once every member
    has reached bind through its own kube-scheduler cycle. kube-scheduler takes one cycle per pod,
    each over every node (16-25 ms at 5,000 nodes), so a gang of thousands waits minutes for its
    barrier; released early it waits one cycle and the API server's writes. The barrier's check that
    kube-scheduler's own filters pass each member on its planned node is then skipped for members
    whose filters the plan models (model.cycle) and no bound pod's anti-affinity selects
    (state.repelling); the others still reach bind first. False keeps the barrier for every member:
    each is checked by kube-scheduler's own filters, a plugin added to the profile included."""
    holds: bool = True
    """A gang that fits nowhere holds the rows where it would fit once drained (the oldest of the
    highest priority first, `hold_depth` of them): every other gang and plain pod plans around the
    hold, so a stream of small gangs cannot starve a large one. The cost is capacity left idle while
    the held rows drain (at most the holder's own request, on rows chosen where the least is in use)."""
    hold_depth: int = 1
    """How many waiting gangs hold capacity at once: 1, the head only (the least idled); more lets the
    next gangs drain towards their own fit too, each around the older holds, and idles more."""
    pools: bool = True
    """Size-class pools (with holds): a gang that asks half a pool domain or more is large, a smaller
    one small; each plans first in the domains that host gangs of its class, then in an empty one,
    and waits (bounded by its hold as head) rather than start in the other class's domains, so small
    gangs pack together and leave domains whole for large ones."""
    pool_label: str = ""
    """The node label whose domains are the pools (a block label, say). Empty: each gang's own
    required topology level (a gang without one is not pooled)."""
    pool_reserve: float = 0.0
    """Domains' worth of room small gangs leave for large ones: a small gang opens an empty domain only
    while that much would be left (an empty domain counts 1, a large one its free share)."""
    default_queue: str = "default-queue"
    """The KAI queue of a gang that names none (no PodGroup spec.queue, no kai.scheduler/queue label).
    Queues are enforced only where the cluster has Queue objects (scheduling.run.ai/v2)."""


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    cluster_file: str | None = None
    """An embedded cluster: a YAML stream or JSON List of Kubernetes objects, held in memory."""
    kubeconfig: str | None = None
    """A live cluster through this kubeconfig."""
    in_cluster: bool = False
    """A live cluster through the pod's service account."""
    http_timeout_s: float = 10.0
    """kube-scheduler's `httpTimeout` for this extender; the gang wait must end MIN_BIND_MARGIN_S sooner."""
    bind_fence_s: float = 5.0
    """A live cluster only: for this long after start-up the service binds nothing, and every binding
    POST asks the API server to give it up after this long (`?timeout=`). So a binding that a killed
    predecessor left in flight lands before this process binds anything, or never: it cannot fill a
    node after this process planned onto it. 0: no fence (only one process ever binds here)."""
    podgrouper: bool = True
    """Create and keep a `scheduling.run.ai/v2alpha2` PodGroup for every gang derived from a Job, JobSet
    or PyTorchJob (KAI's podgrouper role), owned by the workload. Off where KAI's own podgrouper runs."""
    leader_lease: str = ""
    """NAMESPACE/NAME of this replica's kube-scheduler's leader-election Lease (its leaderElection
    resourceNamespace and resourceName): the service writes nothing on its own (PodGroups, status,
    events, nudges, evictions) unless that kube-scheduler holds it. Empty: the only replica, it acts."""
    leader_identity: str = ""
    """The name this replica's kube-scheduler leads under, before its `_<uuid>`: its pod's name (the
    hostname both containers share). Empty: $POD_NAME (the downward API), else the hostname."""


@dataclasses.dataclass(frozen=True)
class Settings:
    server: ServerSettings = ServerSettings()
    gang: GangSettings = GangSettings()
    cluster: ClusterSettings = ClusterSettings()
    log_level: str = "INFO"
    log_format: str = "text"
    """"text" (a line per record, structured fields as key=value) or "json" (an object per line)."""


def validate(settings: Settings) -> list[str]:
    """Every problem with `settings`, as sentences an operator can act on; empty when valid."""
    errors: list[str] = []
    s, g, c = settings.server, settings.gang, settings.cluster
    if not s.host:
        errors.append("--host must not be empty")
    if not 0 <= s.port <= 65535:
        errors.append(f"--port must be between 0 and 65535, got {s.port}")
    if s.probe_host:
        if not 1 <= s.probe_port <= 65535:
            errors.append(f"--probe-port must be between 1 and 65535, got {s.probe_port}")
        elif s.probe_port == s.port:
            errors.append(f"--probe-port must differ from --port ({s.port}): the verbs must not be on it")
    if s.max_body_bytes < 1024:
        errors.append(f"--max-body-bytes must be at least 1024, got {s.max_body_bytes}")
    if s.tls_cert_file and not s.tls_key_file:
        errors.append("--tls-cert-file needs --tls-key-file: give the certificate's private key too")
    if s.tls_key_file and not s.tls_cert_file:
        errors.append("--tls-key-file needs --tls-cert-file: give the key's certificate too")
    if s.tls_client_ca_file and not s.tls_cert_file:
        errors.append(
            "--tls-client-ca-file needs --tls-cert-file and --tls-key-file: client certificates are "
            "checked only on a TLS port"
        )
    if g.wait_s <= 0:
        errors.append(f"--gang-wait-s must be positive, got {g.wait_s}")
    if not 0 <= c.bind_fence_s <= 600:  # NaN fails both
        errors.append(f"--bind-fence-s must be between 0 and 600 seconds, got {c.bind_fence_s}")
    if c.http_timeout_s <= 0:
        errors.append(f"--http-timeout-s must be positive, got {c.http_timeout_s}")
    elif g.wait_s > 0 and c.http_timeout_s - g.wait_s < MIN_BIND_MARGIN_S - 1e-9:  # 3.9 - 2.9 < 1.0
        highest_wait = round(c.http_timeout_s - MIN_BIND_MARGIN_S, 3)
        lowest_timeout = round(g.wait_s + MIN_BIND_MARGIN_S, 3)
        raise_timeout = f"raise the scheduler's httpTimeout and --http-timeout-s to {lowest_timeout:g}"
        fix = (
            f"lower --gang-wait-s to {highest_wait:g}, or {raise_timeout}"
            if highest_wait > 0
            else raise_timeout
        )
        errors.append(
            f"--gang-wait-s ({g.wait_s:g}) must end at least {MIN_BIND_MARGIN_S:g}s before --http-timeout-s "
            f"({c.http_timeout_s:g}), so that a released gang's binds (parallel POSTs to the API server) "
            f"are answered before kube-scheduler gives up on them: {fix}"
        )
    if g.hold_s < g.wait_s:
        errors.append(
            f"--gang-hold-s ({g.hold_s:g}) must be at least --gang-wait-s ({g.wait_s:g}): the plan is held "
            "while its members come back to bind; raise --gang-hold-s"
        )
    if g.backoff_initial_s <= 0:
        errors.append(f"--gang-backoff-initial-s must be positive, got {g.backoff_initial_s}")
    if g.backoff_max_s < g.backoff_initial_s:
        errors.append(
            f"--gang-backoff-max-s ({g.backoff_max_s}) must be at least --gang-backoff-initial-s "
            f"({g.backoff_initial_s})"
        )
    if g.reason_nodes < 1:
        errors.append(f"--reason-nodes must be at least 1, got {g.reason_nodes}")
    if not g.preemption_hold_s > 0:
        errors.append(f"--preemption-hold-s must be positive, got {g.preemption_hold_s}")
    if not g.stale_grace_s >= 0:  # NaN too
        errors.append(f"--stale-gang-grace-s must be 0 (off) or positive, got {g.stale_grace_s}")
    if g.hold_depth < 1:
        errors.append(
            f"--hold-depth must be at least 1 (the head's hold is what keeps a large gang from starving; "
            f"--holds false turns holds off), got {g.hold_depth}"
        )
    if not g.pool_reserve >= 0:  # NaN too
        errors.append(f"--pool-reserve must be 0 or more domains' worth of room, got {g.pool_reserve}")
    if g.pool_label != g.pool_label.strip() or any(c.isspace() for c in g.pool_label):
        errors.append(f"--pool-label must be a node label key without spaces, got {g.pool_label!r}")
    if not g.default_queue.strip():
        errors.append("--default-queue must name a queue, got an empty name")
    if c.leader_lease:
        try:
            split_lease_ref(c.leader_lease)
        except ValueError as exc:
            errors.append(str(exc))
    if "_" in c.leader_identity:
        errors.append(
            f"--leader-identity is the pod's name, which kube-scheduler leads under as <name>_<uuid>; it "
            f"has no '_', got {c.leader_identity!r}"
        )
    sources = sum(bool(x) for x in (c.cluster_file, c.kubeconfig, c.in_cluster))
    if sources > 1:
        errors.append("choose one cluster source: --cluster FILE, --kubeconfig PATH or --in-cluster")
    if settings.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        errors.append(f"--log-level must be DEBUG, INFO, WARNING or ERROR, got {settings.log_level!r}")
    if settings.log_format not in ("text", "json"):
        errors.append(f"--log-format must be text or json, got {settings.log_format!r}")
    return errors


def default_settings(**overrides: Any) -> Settings:
    """Settings with defaults; overrides are section fields, e.g. gang_wait_s=2.0 or server_port=0."""
    sections: dict[str, dict[str, Any]] = {"server": {}, "gang": {}, "cluster": {}}
    top: dict[str, Any] = {}
    for key, value in overrides.items():
        section, _, field = key.partition("_")
        if section in sections and field:
            sections[section][field] = value
        else:
            top[key] = value
    return Settings(
        server=ServerSettings(**sections["server"]),
        gang=GangSettings(**sections["gang"]),
        cluster=ClusterSettings(**sections["cluster"]),
        **top,
    )
