"""The `gang-extender` command: serve, simulate, podgroups, explain. The only place that wires layers.

Every flag has an environment-variable twin, GANG_EXTENDER_<FLAG> (e.g. --gang-wait-s and
GANG_EXTENDER_GANG_WAIT_S); a flag given on the command line wins. Values are converted and
validated in one pass and every error is reported at once, with exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from extender import __version__
from extender.config import Settings, validate

ENV_PREFIX = "GANG_EXTENDER_"


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str  # --name
    convert: Callable[[str], Any]
    help: str
    target: str  # "section.field" in Settings
    metavar: str = ""


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


SERVE_FLAGS = (
    Flag("host", str, "address to listen on (default 127.0.0.1)", "server.host", "ADDR"),
    Flag("port", int, "port to listen on (default 8888; 0 picks a free one)", "server.port", "PORT"),
    Flag(
        "probe-host",
        str,
        "also serve /healthz, /readyz and /metrics (only those) on this address, e.g. 0.0.0.0 in a pod "
        "(default: off)",
        "server.probe_host",
        "ADDR",
    ),
    Flag("probe-port", int, "port of --probe-host (default 8889)", "server.probe_port", "PORT"),
    Flag(
        "max-body-bytes",
        int,
        "larger request bodies get HTTP 400 (default 64 MiB)",
        "server.max_body_bytes",
        "N",
    ),
    Flag(
        "cluster",
        str,
        "embedded cluster: a YAML stream or JSON List of objects",
        "cluster.cluster_file",
        "FILE",
    ),
    Flag("kubeconfig", str, "live cluster through this kubeconfig", "cluster.kubeconfig", "PATH"),
    Flag("in-cluster", _bool, "live cluster through the pod's service account", "cluster.in_cluster", "BOOL"),
    Flag(
        "http-timeout-s",
        float,
        "kube-scheduler's httpTimeout for this extender (default 10); the gang wait must be shorter",
        "cluster.http_timeout_s",
        "S",
    ),
    Flag(
        "bind-fence-s",
        float,
        "live cluster: bind nothing this long after start-up, and have the API server give up each "
        "binding POST after it, so none a killed predecessor left in flight lands after ours (default 5; "
        "0: off)",
        "cluster.bind_fence_s",
        "S",
    ),
    Flag(
        "gang-wait-s",
        float,
        "how long a gang's bind barrier waits for quorum (default 8)",
        "gang.wait_s",
        "S",
    ),
    Flag(
        "gang-hold-s",
        float,
        "how long a gang's plan is held for its next member to reach bind for the first time (default 30)",
        "gang.hold_s",
        "S",
    ),
    Flag(
        "gang-backoff-initial-s",
        float,
        "delay before a timed-out gang is planned again; doubles per failure (default 2)",
        "gang.backoff_initial_s",
        "S",
    ),
    Flag("gang-backoff-max-s", float, "longest gang backoff (default 60)", "gang.backoff_max_s", "S"),
    Flag(
        "native-gang-scheduling",
        _bool,
        "kube-scheduler's GangScheduling plugin gates pods with spec.schedulingGroup; do not gate them again "
        "(default false)",
        "gang.native_gang_scheduling",
        "BOOL",
    ),
    Flag(
        "reason-nodes",
        int,
        "how many rejected nodes carry the reason in a filter reply (default 16)",
        "gang.reason_nodes",
        "N",
    ),
    Flag("log-level", str, "DEBUG, INFO, WARNING or ERROR (default INFO)", "log_level", "LEVEL"),
    Flag(
        "log-format",
        str,
        "text, or json: one JSON object per line, a gang's pod, gang and domain as keys (default text)",
        "log_format",
        "text|json",
    ),
    Flag(
        "podgrouper",
        _bool,
        "create and keep a KAI PodGroup (scheduling.run.ai/v2alpha2) for every gang derived from a Job, "
        "JobSet or PyTorchJob, owned by it; false where KAI's own podgrouper runs (default true)",
        "cluster.podgrouper",
        "BOOL",
    ),
    Flag(
        "tls-cert-file",
        str,
        "serve --host/--port over TLS with this PEM certificate (chain); the probe address stays plain HTTP "
        "(default: plain HTTP)",
        "server.tls_cert_file",
        "PATH",
    ),
    Flag(
        "tls-key-file", str, "unencrypted PEM private key of --tls-cert-file", "server.tls_key_file", "PATH"
    ),
    Flag(
        "tls-client-ca-file",
        str,
        "require a client certificate signed by a CA in this PEM file (kube-scheduler's tlsConfig.certFile) "
        "(default: none asked)",
        "server.tls_client_ca_file",
        "PATH",
    ),
    Flag(
        "preemption-hold-s",
        float,
        "how long the room a preempting gang freed is held for it alone (default 60)",
        "gang.preemption_hold_s",
        "S",
    ),
    Flag(
        "release-on-first-bind",
        _bool,
        "bind a planned gang whole when its first member reaches bind, not once every member has "
        "passed its own kube-scheduler cycle (a gang of thousands waits one cycle, not thousands); "
        "members with host ports, volumes that bind, resource claims, spread or pod affinity, or "
        "that a bound pod's anti-affinity selects, still pass their own first; false: every member "
        "passes its own cycle before the gang binds (default true)",
        "gang.release_on_first_bind",
        "BOOL",
    ),
    Flag(
        "holds",
        _bool,
        "a gang that fits nowhere holds the rows where it fits once drained, and everyone else plans "
        "around them, so small gangs cannot starve a large one (default true)",
        "gang.holds",
        "BOOL",
    ),
    Flag(
        "hold-depth",
        int,
        "how many waiting gangs hold capacity at once, the highest priority, then the oldest, first "
        "(default 1: the head only)",
        "gang.hold_depth",
        "N",
    ),
    Flag(
        "pools",
        _bool,
        "size-class pools: small gangs pack into the domains that host small gangs, large ones into "
        "theirs or an empty one, so domains stay whole for large gangs (needs holds; default true)",
        "gang.pools",
        "BOOL",
    ),
    Flag(
        "pool-label",
        str,
        "the node label whose domains are the pools (default: each gang's own required topology level)",
        "gang.pool_label",
        "KEY",
    ),
    Flag(
        "pool-reserve",
        float,
        "domains' worth of room small gangs leave empty for large ones (default 0)",
        "gang.pool_reserve",
        "N",
    ),
    Flag(
        "stale-gang-grace-s",
        float,
        "evict a gang that was bound whole once it has run below its quorum this long; 0: never (default 60)",
        "gang.stale_grace_s",
        "S",
    ),
    Flag(
        "leader-lease",
        str,
        "NAMESPACE/NAME of this replica's kube-scheduler's leader-election Lease: write nothing on our own "
        "(PodGroups, status, events, nudges, evictions) unless it holds it (default: the only replica, act)",
        "cluster.leader_lease",
        "NS/NAME",
    ),
    Flag(
        "leader-identity",
        str,
        "the name this replica's kube-scheduler leads under, its pod's name (default $POD_NAME, else the "
        "hostname)",
        "cluster.leader_identity",
        "NAME",
    ),
    Flag(
        "default-queue",
        str,
        "the KAI queue of a gang that names none (no PodGroup spec.queue, no kai.scheduler/queue label); "
        "queues are enforced only where Queue objects exist (default default-queue)",
        "gang.default_queue",
        "NAME",
    ),
)


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.upper().replace("-", "_")


def _add_flags(parser: argparse.ArgumentParser, flags: Sequence[Flag]) -> None:
    for f in flags:
        parser.add_argument(
            f"--{f.name}",
            dest=f.name.replace("-", "_"),
            metavar=f.metavar or None,
            default=None,
            help=f"{f.help} [env {_env_name(f.name)}]",
        )


def settings_from(
    ns: argparse.Namespace, flags: Sequence[Flag], base: Settings | None = None
) -> tuple[Settings, list[str]]:
    """Settings from flags, then environment, then defaults; every conversion error collected."""
    errors: list[str] = []
    sections: dict[str, dict[str, Any]] = {"server": {}, "gang": {}, "cluster": {}, "": {}}
    for f in flags:
        raw = getattr(ns, f.name.replace("-", "_"), None)
        origin = f"--{f.name}"
        if raw is None:
            raw = os.environ.get(_env_name(f.name))
            origin = _env_name(f.name)
        if raw is None:
            continue
        try:
            value = f.convert(raw)
        except ValueError:
            kind = {int: "a whole number", float: "a number"}.get(f.convert, "a valid value")  # type: ignore[call-overload]
            errors.append(f"{origin} must be {kind}, got {raw!r}")
            continue
        section, _, field = f.target.rpartition(".")
        sections[section][field] = value
    base = base or Settings()
    settings = Settings(
        server=dataclasses.replace(base.server, **sections["server"]),
        gang=dataclasses.replace(base.gang, **sections["gang"]),
        cluster=dataclasses.replace(base.cluster, **sections["cluster"]),
        log_level=sections[""].get("log_level", base.log_level),
        log_format=sections[""].get("log_format", base.log_format),
    )
    return settings, errors + validate(settings)


def _fail(errors: list[str]) -> int:
    for e in errors:
        print(f"gang-extender: error: {e}", file=sys.stderr)
    return 2


def _setup_logging(level: str, fmt: str = "text") -> None:
    from extender.logformat import formatter

    handler = logging.StreamHandler()  # stderr, as before
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


# ------------------------------------------------------------------ serve
def cmd_serve(ns: argparse.Namespace) -> int:
    settings, errors = settings_from(ns, SERVE_FLAGS)
    flags_valid = not errors
    c = settings.cluster
    if not errors and not (c.cluster_file or c.kubeconfig or c.in_cluster):
        errors.append("serve needs a cluster source: --cluster FILE, --kubeconfig PATH or --in-cluster")
    if not errors and c.leader_lease and c.cluster_file:
        errors.append(
            "--leader-lease follows kube-scheduler's Lease on a live cluster (--kubeconfig or --in-cluster); "
            "an embedded --cluster has no Lease, so the service would never write: drop --leader-lease"
        )
    # the name this replica's kube-scheduler leads under: its pod's (both containers share the hostname)
    identity = c.leader_identity or os.environ.get("POD_NAME", "") or socket.gethostname()
    if not errors and c.leader_lease and "_" in identity:
        errors.append(f"the hostname {identity!r} is no pod name: give --leader-identity (the pod's name)")
    settings = dataclasses.replace(settings, cluster=dataclasses.replace(c, leader_identity=identity))
    c = settings.cluster
    source = None
    if not errors and c.cluster_file:
        from extender.state.embedded import ClusterFileError, EmbeddedCluster

        try:
            source = EmbeddedCluster.from_file(c.cluster_file)
        except ClusterFileError as exc:
            errors.append(str(exc))
    client_config = None
    if not errors and source is None:
        from extender.state.kube import SourceConfigError, load_client_config

        try:
            client_config = load_client_config(None if c.in_cluster else c.kubeconfig)
        except SourceConfigError as exc:
            errors.append(str(exc))
    ssl_context = None
    if flags_valid:  # the TLS files' problems are reported with the cluster source's
        from extender.server.tls import TLSFileError, server_context

        try:
            ssl_context = server_context(settings.server)
        except TLSFileError as exc:
            errors.extend(exc.args)
    if errors:
        return _fail(errors)
    _setup_logging(settings.log_level, settings.log_format)
    if source is None:
        from extender.model.lease import split_lease_ref
        from extender.state.kube import DEFAULT_KINDS, KubeClusterSource, KubeSettings, lease_kind

        lease_ns, lease_name = split_lease_ref(c.leader_lease) if c.leader_lease else ("", "")
        source = KubeClusterSource(
            None if c.in_cluster else c.kubeconfig,
            settings=KubeSettings(user_agent=f"gang-extender/{__version__} ({identity})"),
            kinds=DEFAULT_KINDS + ((lease_kind(lease_ns, lease_name),) if c.leader_lease else ()),
            client_config=client_config,
            bind_fence_s=c.bind_fence_s,
        )
    from extender.server.app import ListenError, build_app, fatal_reason, run

    app = build_app(settings, source=source)
    try:
        run(app, settings.server, version=__version__, ssl_context=ssl_context)
    except ListenError as exc:
        return _fail([str(exc)])
    fatal = fatal_reason(app)
    return _fail([fatal]) if fatal else 0


# ------------------------------------------------------------------ simulate
SIM_FLAGS = (
    Flag(
        "gang-wait-s", float, "the service's gang wait during the simulation (default 8)", "gang.wait_s", "S"
    ),
    Flag("log-level", str, "DEBUG, INFO, WARNING or ERROR (default WARNING)", "log_level", "LEVEL"),
)


def cmd_simulate(ns: argparse.Namespace) -> int:
    settings, errors = settings_from(ns, SIM_FLAGS, base=Settings(log_level="WARNING"))
    fmt = ns.format or os.environ.get(_env_name("format"), "text")
    if fmt not in ("text", "json"):
        errors.append(f"--format must be text or json, got {fmt!r}")
    seed_raw = ns.seed if ns.seed is not None else os.environ.get(_env_name("seed"), "0")
    try:
        seed = int(seed_raw)
    except ValueError:
        errors.append(f"--seed must be a whole number, got {seed_raw!r}")
        seed = 0
    for path in ns.files:
        if not os.path.isfile(path):
            errors.append(f"{path}: no such file")
    if errors:
        return _fail(errors)
    _setup_logging(settings.log_level)
    from extender.sim import run_simulation

    return run_simulation(list(ns.files), fmt=fmt, settings=settings, seed=seed)


# ------------------------------------------------------------------ podgroups
def cmd_podgroups(ns: argparse.Namespace) -> int:
    import orjson
    import yaml

    from extender.grouping import SCHEDULING_API_VERSIONS, GroupingError, podgroup_objects
    from extender.state.embedded import ClusterFileError, load_objects

    errors = []
    fmt = ns.output or os.environ.get(_env_name("output"), "yaml")
    if fmt not in ("yaml", "json"):
        errors.append(f"-o must be yaml or json, got {fmt!r}")
    api_version = ns.api_version or os.environ.get(_env_name("api_version"), SCHEDULING_API_VERSIONS[0])
    if "/" not in api_version:
        api_version = f"scheduling.k8s.io/{api_version}"
    if api_version not in SCHEDULING_API_VERSIONS:
        errors.append(
            f"--api-version must be one of {', '.join(SCHEDULING_API_VERSIONS)} "
            f"(v1beta1 for Kubernetes 1.37, v1alpha2 for 1.36), got {api_version!r}"
        )
    if not ns.file:
        errors.append("podgroups needs -f FILE")
    if errors:
        return _fail(errors)
    try:
        objects = load_objects(ns.file)
        notes: list[str] = []
        derived = podgroup_objects(objects, api_version=api_version, notes=notes)
    except ClusterFileError as exc:
        return _fail([str(exc)])
    except GroupingError as exc:
        field = getattr(exc, "field", "")
        return _fail(
            [
                f"{ns.file}: invalid workload: {exc}"
                + (f" (field {field})" if field and field not in str(exc) else "")
            ]
        )
    for note in notes:  # on stderr: the output stays a document to apply
        sys.stderr.write(f"note: {note}\n")
    if fmt == "json":
        sys.stdout.write(
            orjson.dumps(
                {"apiVersion": "v1", "kind": "List", "items": derived}, option=orjson.OPT_INDENT_2
            ).decode()
            + "\n"
        )
    else:
        sys.stdout.write(yaml.safe_dump_all(derived, sort_keys=False))
    return 0


# ------------------------------------------------------------------ explain
_EXPLAIN_TLS = ("ca_file", "client_cert_file", "client_key_file")


def cmd_explain(ns: argparse.Namespace) -> int:
    import urllib.error
    import urllib.request

    import orjson

    from extender.model.keys import split_key

    try:
        namespace, name = split_key(ns.gang)
    except ValueError as exc:
        return _fail([str(exc)])
    url = (ns.url or os.environ.get(_env_name("url"), "http://127.0.0.1:8888")).rstrip("/")
    tls = {f: getattr(ns, f) or os.environ.get(_env_name(f.replace("_", "-")), "") for f in _EXPLAIN_TLS}
    context = None
    if url.startswith("https://"):  # a service with --tls-cert-file (and maybe --tls-client-ca-file)
        import ssl

        if tls["client_key_file"] and not tls["client_cert_file"]:
            return _fail(["--client-key-file needs --client-cert-file: give the key's certificate too"])
        try:
            context = ssl.create_default_context(cafile=tls["ca_file"] or None)
            if tls["client_cert_file"]:
                context.load_cert_chain(tls["client_cert_file"], tls["client_key_file"] or None)
        except OSError as exc:  # ssl.SSLError included
            return _fail([f"cannot use the TLS files {', '.join(v for v in tls.values() if v)}: {exc}"])
    try:
        with urllib.request.urlopen(
            f"{url}/debug/gangs/{namespace}/{name}", timeout=5, context=context
        ) as resp:
            doc = orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return _fail([exc.read().decode().strip() or f"{url} answered {exc.code}"])
    except (urllib.error.URLError, OSError) as exc:
        return _fail([f"cannot reach the extender at {url}: {getattr(exc, 'reason', exc)} (set --url)"])
    print(render_gang(doc))
    return 0


def render_gang(doc: dict[str, Any]) -> str:
    lines = [
        f"Gang:        {doc.get('gang')}",
        f"Phase:       {doc.get('phase')}",
        f"Policy:      {doc.get('policy')}   quorum: {doc.get('quorum')} pods",
    ]
    if doc.get("domain"):
        lines.append(f"Domain:      {doc['domain']}")
    lines.append(f"Last reason: {doc.get('lastReason') or '-'}")
    if doc.get("queue"):
        lines.append(f"Queue:       {doc['queue']}")
    if doc.get("queueHold"):
        lines.append(f"Held:        {doc['queueHold']}")
    hold = doc.get("hold") or {}
    if hold.get("none"):
        lines.append(f"Hold:        {hold['none']}")
    elif hold:
        lines.append(
            f"Hold:        {hold.get('domain') or 'nodes'}: {hold.get('drainedNodes')} of "
            f"{hold.get('heldNodes')} nodes drained, held {hold.get('heldForS', 0):g}s "
            f"(rank {hold.get('rank')})"
        )
    for around in doc.get("heldFor") or []:
        lines.append(f"Plans around: {around}")
    if doc.get("failures"):
        lines.append(f"Failures:    {doc['failures']}")
    pre = doc.get("preemption")
    if pre:
        lines.append(
            f"Preempting:  {pre.get('domain') or 'the cluster'} for priority {pre.get('priority')} "
            f"(victims <= {pre.get('victimPriority')}); room held {pre.get('holdLeftS', 0):g}s more"
        )
        for v in pre.get("victims") or []:
            whole = f", with its gang {v['gang']}" if v.get("gang") else ""
            state = "gone" if v.get("gone") else "terminating" if v.get("terminating") else "being evicted"
            lines.append(f"  {v['pod']} on {v.get('node') or '-'}{whole}: {state}")
    disruption = doc.get("disruption") or {}
    if disruption:
        grace = disruption.get("staleGraceS")
        below = disruption.get("belowQuorumForS")
        lines.append(
            f"Disruption:  {disruption.get('decision') or '-'}"
            + (f"   below quorum for {below:g}s" if below is not None else "")
            + (f"   stale after {grace:g}s" if grace else "   stale-gang eviction off")
        )
    members = doc.get("members") or []
    lines.append(f"Members ({len(members)}):")
    width = max((len(m["pod"]) for m in members), default=3)
    for m in members:
        if m.get("node"):
            where = f"bound to {m['node']}"
        elif m.get("planned"):
            where = f"planned on {m['planned']}"
        else:
            where = "pending"
        if m.get("waitingAtBind"):
            where += ", waiting at bind"
        sub = f" [{m['subgroup']}]" if m.get("subgroup") else ""
        lines.append(f"  {m['pod']:<{width}}  {where}{sub}")
    return "\n".join(lines)


# ------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gang-extender",
        description="A kube-scheduler extender that schedules training and batch jobs as gangs, "
        "placed by topology.",
    )
    parser.add_argument("--version", action="version", version=f"gang-extender {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the HTTP service kube-scheduler calls")
    _add_flags(serve, SERVE_FLAGS)
    serve.set_defaults(func=cmd_serve)

    sim = sub.add_parser(
        "simulate",
        help="drive the real service as kube-scheduler would and print a report",
        description="With no FILE: every seed workload on a built-in cluster of zones, blocks and racks.",
    )
    sim.add_argument("files", nargs="*", metavar="FILE", help="YAML streams of nodes and workloads")
    sim.add_argument(
        "--format",
        choices=None,
        default=None,
        metavar="text|json",
        help=f"report format (default text) [env {_env_name('format')}]",
    )
    sim.add_argument(
        "--seed",
        default=None,
        metavar="N",
        help=f"random seed for pod names (default 0) [env {_env_name('seed')}]",
    )
    _add_flags(sim, SIM_FLAGS)
    sim.set_defaults(func=cmd_simulate)

    pg = sub.add_parser("podgroups", help="print the group objects derived for each workload in a file")
    pg.add_argument("-f", "--file", metavar="FILE", help="a YAML stream or JSON List of workloads")
    pg.add_argument(
        "-o",
        "--output",
        metavar="yaml|json",
        default=None,
        help=f"output format (default yaml) [env {_env_name('output')}]",
    )
    pg.add_argument(
        "--api-version",
        metavar="VERSION",
        default=None,
        help="the scheduling.k8s.io version of the Workload and PodGroups printed for a JobSet with "
        "spec.scheduling: v1beta1 (default; Kubernetes 1.37), v1alpha3 (1.37) or v1alpha2 (1.36) "
        f"[env {_env_name('api_version')}]",
    )
    pg.set_defaults(func=cmd_podgroups)

    ex = sub.add_parser("explain", help="show a gang's members, plan and last reason from a running service")
    ex.add_argument("gang", metavar="NAMESPACE/NAME")
    ex.add_argument(
        "--url",
        default=None,
        help=f"the service's base URL (default http://127.0.0.1:8888) [env {_env_name('url')}]",
    )
    for flag, what in (
        ("ca-file", "verify an https --url's certificate with this PEM CA bundle (default: the system's)"),
        ("client-cert-file", "present this PEM client certificate to an https --url (--tls-client-ca-file)"),
        ("client-key-file", "the private key of --client-cert-file (default: in the certificate's file)"),
    ):
        ex.add_argument(f"--{flag}", default=None, metavar="PATH", help=f"{what} [env {_env_name(flag)}]")
    ex.set_defaults(func=cmd_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not getattr(ns, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(ns.func(ns))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
