"""A real kube-scheduler (1.20.2, then 1.36.2) calls the service over HTTPS with its extender `tlsConfig`:
it checks the service's certificate against `caFile` and presents `certFile`/`keyFile`, which the service
requires (--tls-client-ca-file).

A second service and a second kube-scheduler run beside the shared ones: their own schedulerName
(gang-scheduler-tls), no leader election, so neither fights the shared pair; both are stopped afterwards.
"""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from controlplane.start import REPO, ControlPlane, convert_scheduler_config, free_port, wait_until
from test_e2e_gangs import batch_job, bound_nodes, pods, wait_all_bound

from extender.model import labels as keys
from tests.tlscerts import Pki, make_pki

if TYPE_CHECKING:
    from conftest import Cluster

TLS_SCHEDULER = "gang-scheduler-tls"
SERVICE, SCHEDULER = "service-tls", "kube-scheduler-tls"


def tls_scheduler_config(pki: Pki) -> dict[str, Any]:
    """The shipped configuration for a second kube-scheduler: its own schedulerName, no lease, and the
    extender over HTTPS with kube-scheduler's client certificate."""
    cfg = yaml.safe_load((REPO / "manifests" / "base" / "scheduler-config.yaml").read_text())
    cfg["leaderElection"] = {"leaderElect": False}
    for profile in cfg["profiles"]:
        profile["schedulerName"] = TLS_SCHEDULER
    for ext in cfg["extenders"]:
        ext["enableHTTPS"] = True
        ext["tlsConfig"] = {
            "certFile": str(pki.client_cert),
            "keyFile": str(pki.client_key),
            "caFile": str(pki.ca),
        }
    return cfg


def test_tls_config_survives_the_conversion_to_v1beta1(tmp_path: Path) -> None:
    """1.20's v1beta1 takes the extender entry as v1 does (both embed the same Extender type, whose
    tlsConfig fields are insecure, serverName, certFile, keyFile, caFile and their *Data forms)."""
    v1 = tls_scheduler_config(make_pki(tmp_path))
    got = convert_scheduler_config(v1, url_prefix="https://127.0.0.1:1234", kubeconfig="/k")
    assert got["extenders"] == [{**v1["extenders"][0], "urlPrefix": "https://127.0.0.1:1234"}]
    assert got["extenders"][0]["enableHTTPS"] is True
    assert set(got["extenders"][0]["tlsConfig"]) == {"certFile", "keyFile", "caFile"}
    assert got["leaderElection"] == {"leaderElect": False}


def stop(plane: ControlPlane, name: str) -> None:
    if name in plane.procs:
        plane.kill(name, signal.SIGTERM)
        del plane.procs[name]


@pytest.fixture
def tls_pair(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """A TLS service (client certificates required; plain probe address) and a kube-scheduler calling it;
    yields the probe address's base URL."""
    plane = cluster.plane
    pki = make_pki(tmp_path / "pki")
    config = tmp_path / "tls-scheduler-config.yaml"
    config.write_text(yaml.safe_dump(tls_scheduler_config(pki)))
    probe = f"http://127.0.0.1:{free_port()}"
    args = ["--probe-host", "127.0.0.1", "--probe-port", probe.rsplit(":", 1)[1]]
    args += ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)]
    args += ["--tls-client-ca-file", str(pki.ca)]
    try:
        url = plane.start_service(name=SERVICE, extra_args=args, readyz_url=probe)
        assert url.startswith("https://127.0.0.1:"), url
        plane.start_scheduler(url_prefix=url, config=config, name=SCHEDULER)
        yield probe
    except Exception as exc:
        pytest.fail(
            f"{exc}\n--- {SERVICE} log ---\n{plane.log_tail(SERVICE)}\n"
            f"--- {SCHEDULER} log ---\n{plane.log_tail(SCHEDULER)}",
            pytrace=False,
        )
    finally:
        stop(plane, SCHEDULER)
        stop(plane, SERVICE)


def metric(probe: str, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{probe}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] == name and all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return 0.0


def test_a_gang_binds_whole_through_an_extender_called_over_tls(
    cluster: Cluster, namespace: str, tls_pair: str
) -> None:
    api, probe = cluster.plane.api, tls_pair
    job = batch_job(namespace, "pair", pods_n=2, cpu="1", annotations={keys.BATCH_MIN_MEMBER: "2"})
    job["spec"]["template"]["spec"]["schedulerName"] = TLS_SCHEDULER
    api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    try:
        items = wait_all_bound(api, namespace, 2, "job-name=pair")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- {SCHEDULER} log ---\n{cluster.plane.log_tail(SCHEDULER)}\n"
            f"--- {SERVICE} log ---\n{cluster.plane.log_tail(SERVICE)}"
        ) from None
    assert len(bound_nodes(items)) == 2 and all(p["spec"]["schedulerName"] == TLS_SCHEDULER for p in items)
    # bound by the TLS service's bind verb, as one gang: kube-scheduler reached it over HTTPS
    wait_until(
        lambda: metric(probe, "gang_extender_gangs_bound_total") >= 1,
        timeout_s=10,
        what="the TLS service to count the gang bound",
    )
    assert metric(probe, "gang_extender_requests_total", verb="bind", code="200") >= 2
    assert len(pods(api, namespace, "job-name=pair")) == 2
