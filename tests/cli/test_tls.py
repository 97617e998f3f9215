"""`serve --tls-*`: the verbs over TLS with client certificates, as kube-scheduler's extender tlsConfig
calls them; the probe address stays plain HTTP; bad TLS settings exit 2 before anything listens."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from extender.config import default_settings, validate
from extender.server.tls import TLSFileError, server_context
from tests.builders import make_node
from tests.cli.test_probe_listener import fetch, free_port
from tests.tlscerts import Pki, make_pki

FILTER_BODY = json.dumps(
    {"Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}}, "NodeNames": ["n000"]}
).encode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_service(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """`serve` with TLS and client certificates on one port, the probe address on another: (port, probe)."""
    cluster = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(make_node("n000")))
    port, probe = free_port(), free_port()
    args = ["serve", "--cluster", str(cluster), "--port", str(port)]
    args += ["--probe-host", "127.0.0.1", "--probe-port", str(probe)]
    args += ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)]
    env = {**os.environ, "GANG_EXTENDER_TLS_CLIENT_CA_FILE": str(pki.ca)}  # the env twin, too
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", *args], stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if fetch(f"http://127.0.0.1:{probe}/readyz")[0] == 200:  # plain HTTP on the probe address
                    break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield port, probe
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def client_context(pki: Pki, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    """What kube-scheduler makes of tlsConfig: caFile checks the server; certFile/keyFile are presented."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def post_filter(url: str, ctx: ssl.SSLContext | None) -> tuple[int, dict]:
    req = urllib.request.Request(
        url + "/filter", data=FILTER_BODY, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def test_a_client_certificate_from_the_trusted_ca_is_answered(tls_service, pki):
    port, _ = tls_service
    status, body = post_filter(
        f"https://127.0.0.1:{port}", client_context(pki, pki.client_cert, pki.client_key)
    )
    assert status == 200 and body["NodeNames"] == ["n000"], body


@pytest.mark.parametrize(
    ("scheme", "credentials"),
    [
        ("https", None),
        ("https", "stranger"),
        ("http", None),
    ],
    ids=["no client certificate", "a client certificate from another CA", "plain HTTP to the TLS port"],
)
def test_a_caller_without_a_trusted_certificate_gets_no_answer(tls_service, pki, scheme, credentials):
    port, _ = tls_service
    cert, key = (pki.stranger_cert, pki.stranger_key) if credentials else (None, None)
    ctx = client_context(pki, cert, key) if scheme == "https" else None
    with pytest.raises((OSError, http.client.HTTPException)) as caught:
        post_filter(f"{scheme}://127.0.0.1:{port}", ctx)
    assert not isinstance(caught.value, ConnectionRefusedError | urllib.error.HTTPError), caught.value
    # the service is still up for the callers it trusts
    trusted = client_context(pki, pki.client_cert, pki.client_key)
    assert post_filter(f"https://127.0.0.1:{port}", trusted)[0] == 200


def test_the_probe_address_stays_plain_http_and_serves_no_verbs(tls_service):
    _, probe = tls_service
    assert fetch(f"http://127.0.0.1:{probe}/healthz") == (200, "ok\n")
    assert fetch(f"http://127.0.0.1:{probe}/filter", FILTER_BODY)[0] == 404


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({}, None),
        ({"tls_cert_file": "s.crt", "tls_key_file": "s.key"}, None),
        ({"tls_cert_file": "s.crt", "tls_key_file": "s.key", "tls_client_ca_file": "ca.crt"}, None),
        (
            {"tls_cert_file": "s.crt"},
            "--tls-cert-file needs --tls-key-file: give the certificate's private key too",
        ),
        ({"tls_key_file": "s.key"}, "--tls-key-file needs --tls-cert-file: give the key's certificate too"),
        (
            {"tls_client_ca_file": "ca.crt"},
            "--tls-client-ca-file needs --tls-cert-file and --tls-key-file: client certificates are checked "
            "only on a TLS port",
        ),
    ],
    ids=["plain HTTP", "TLS", "TLS with client certificates", "no key", "no certificate", "a CA without TLS"],
)
def test_tls_flags_go_together(fields, error):
    errors = validate(default_settings(**{f"server_{k}": v for k, v in fields.items()}))
    assert errors == ([error] if error else [])


def files(pki: Pki, tmp: Path, case: str) -> dict[str, str]:
    """Settings fields for a case: the good files, with the one the case is about replaced."""
    junk, encrypted = tmp / "junk.pem", tmp / "encrypted.key"
    junk.write_text("not a PEM file\n")
    subprocess.run(
        [
            "openssl",
            "pkey",
            "-in",
            str(pki.server_key),
            "-aes256",
            "-passout",
            "pass:x",
            "-out",
            str(encrypted),
        ],
        check=True,
        capture_output=True,
    )
    good = {"cert": pki.server_cert, "key": pki.server_key, "ca": pki.ca}
    bad = {
        "missing certificate": {"cert": tmp / "nonexistent.crt"},
        "missing key and CA": {"key": tmp / "nonexistent.key", "ca": tmp / "nonexistent-ca.crt"},
        "junk certificate": {"cert": junk},
        "junk key": {"key": junk},
        "junk CA": {"ca": junk},
        "key of another certificate": {"key": pki.client_key},
        "encrypted key": {"key": encrypted},
        "a key as the CA": {"ca": pki.server_key},
    }[case]
    chosen = {**good, **bad}
    return {
        "tls_cert_file": str(chosen["cert"]),
        "tls_key_file": str(chosen["key"]),
        "tls_client_ca_file": str(chosen["ca"]),
    }


@pytest.mark.parametrize(
    ("case", "says"),
    [
        (
            "missing certificate",
            ["--tls-cert-file {tmp}/nonexistent.crt: cannot read it: No such file or directory"],
        ),
        (
            "missing key and CA",
            [
                "--tls-key-file {tmp}/nonexistent.key: cannot read it: No such file or directory",
                "--tls-client-ca-file {tmp}/nonexistent-ca.crt: cannot read it: No such file or directory",
            ],
        ),
        ("junk certificate", ["--tls-cert-file {tmp}/junk.pem: no PEM certificate in it"]),
        ("junk key", ["--tls-key-file {tmp}/junk.pem: no PEM private key in it"]),
        ("junk CA", ["--tls-client-ca-file {tmp}/junk.pem: no PEM CA certificate in it"]),
        (
            "key of another certificate",
            ["are not a certificate and its key: the key does not belong to the certificate"],
        ),
        ("encrypted key", ["--tls-key-file {tmp}/encrypted.key: the key is encrypted; give it unencrypted"]),
        ("a key as the CA", ["--tls-client-ca-file", "no PEM CA certificate in it"]),
    ],
)
def test_tls_files_that_will_not_do_are_named_with_what_is_wrong(pki, tmp_path, case, says):
    settings = default_settings(**{f"server_{k}": v for k, v in files(pki, tmp_path, case).items()})
    with pytest.raises(TLSFileError) as caught:
        server_context(settings.server)
    assert len(caught.value.args) == (2 if case == "missing key and CA" else 1), caught.value.args
    text = "\n".join(caught.value.args)
    for fragment in says:
        assert fragment.format(tmp=tmp_path) in text, text


def test_good_files_give_a_context_that_requires_client_certificates(pki):
    server = default_settings(
        server_tls_cert_file=str(pki.server_cert), server_tls_key_file=str(pki.server_key)
    ).server
    assert server_context(default_settings().server) is None
    assert server_context(server).verify_mode == ssl.CERT_NONE  # type: ignore[union-attr]
    with_ca = default_settings(
        server_tls_cert_file=str(pki.server_cert),
        server_tls_key_file=str(pki.server_key),
        server_tls_client_ca_file=str(pki.ca),
    ).server
    assert server_context(with_ca).verify_mode == ssl.CERT_REQUIRED  # type: ignore[union-attr]


def test_tls_errors_exit_2_with_every_reason_before_listening(pki, tmp_path):
    port = free_port()
    argv = ["serve", "--cluster", str(tmp_path / "nonexistent.yaml"), "--port", str(port)]
    argv += ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.client_key)]
    env = {**os.environ, "GANG_EXTENDER_TLS_CLIENT_CA_FILE": str(tmp_path / "nonexistent-ca.crt")}
    proc = subprocess.run(
        [sys.executable, "-m", "extender", *argv], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 2, proc.stderr[-500:]
    lines = proc.stderr.strip().splitlines()
    assert any("nonexistent.yaml" in line for line in lines), lines  # the cluster file's error too
    assert any(
        f"--tls-client-ca-file {tmp_path}/nonexistent-ca.crt: cannot read it" in line for line in lines
    )
    assert all(line.startswith("gang-extender: error: ") for line in lines), lines


def test_a_lone_tls_flag_exits_2_naming_its_partner(pki):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "extender",
            "serve",
            "--cluster",
            "x.yaml",
            "--tls-key-file",
            str(pki.server_key),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--tls-key-file needs --tls-cert-file" in proc.stderr


def test_rotated_files_are_served_from_the_next_handshake_and_a_broken_set_is_not(pki, tmp_path):
    """A renewed Secret (new CA, server and client certificates) is picked up without a restart; files
    that stop loading are logged and the last good set kept."""
    live = {"cert": tmp_path / "tls.crt", "key": tmp_path / "tls.key", "ca": tmp_path / "ca.crt"}
    for name, src in (("cert", pki.server_cert), ("key", pki.server_key), ("ca", pki.ca)):
        live[name].write_bytes(src.read_bytes())
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(make_node("n000")))
    port = free_port()
    argv = ["serve", "--cluster", str(cluster), "--port", str(port), "--tls-cert-file", str(live["cert"])]
    argv += ["--tls-key-file", str(live["key"]), "--tls-client-ca-file", str(live["ca"])]
    proc = subprocess.Popen([sys.executable, "-m", "extender", *argv], stderr=subprocess.PIPE, text=True)

    def served(ctx: ssl.SSLContext) -> tuple[int, bytes]:
        """One request on a new connection: its status and the server certificate it was served with."""
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        try:
            conn.request("POST", "/filter", body=FILTER_BODY, headers={"Content-Type": "application/json"})
            status = conn.getresponse().status
            return status, conn.sock.getpeercert(binary_form=True)
        finally:
            conn.close()

    def der(path: Path) -> bytes:
        return ssl.PEM_cert_to_DER_cert(path.read_text())

    try:
        old = client_context(pki, pki.client_cert, pki.client_key)
        deadline = time.monotonic() + 60
        while True:
            try:
                assert served(old) == (200, der(pki.server_cert))
                break
            except (ConnectionRefusedError, ConnectionResetError):
                assert proc.poll() is None and time.monotonic() < deadline, "the service did not start"
                time.sleep(0.2)
        renewed = make_pki(tmp_path / "renewed")
        for name, src in (("cert", renewed.server_cert), ("key", renewed.server_key), ("ca", renewed.ca)):
            staged = live[name].with_suffix(".new")
            staged.write_bytes(src.read_bytes())
            os.replace(staged, live[name])  # as a Secret volume swaps its files: atomically
        new = client_context(renewed, renewed.client_cert, renewed.client_key)
        assert served(new) == (200, der(renewed.server_cert))
        # the old client certificate is refused now, though the client would trust either server
        old_trusting_both = client_context(pki, pki.client_cert, pki.client_key)
        old_trusting_both.load_verify_locations(cafile=str(renewed.ca))
        with pytest.raises((OSError, http.client.HTTPException)):
            served(old_trusting_both)
        live["cert"].write_text("not a certificate\n")
        assert served(new) == (200, der(renewed.server_cert))  # the last good set, still
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    log = proc.stderr.read() if proc.stderr else ""
    assert "the TLS files changed; new connections get them" in log, log[-2000:]
    assert "the TLS files changed but do not load; still serving the previous ones" in log, log[-2000:]
    assert f"--tls-cert-file {live['cert']}: no PEM certificate in it" in log


@pytest.mark.parametrize(
    ("credentials", "says"),
    [
        (
            ["--ca-file", "{ca}", "--client-cert-file", "{cert}", "--client-key-file", "{key}"],
            "no gang ml/train",
        ),
        (["--ca-file", "{ca}"], "cannot reach the extender at https://127.0.0.1:"),
        (["--client-cert-file", "{cert}", "--client-key-file", "{key}"], "CERTIFICATE_VERIFY_FAILED"),
        (["--ca-file", "{ca}", "--client-key-file", "{key}"], "--client-key-file needs --client-cert-file"),
        (["--ca-file", "{ca}", "--client-cert-file", "/nonexistent.crt"], "cannot use the TLS files"),
    ],
    ids=[
        "trusted client certificate: the service answers (404: no such gang)",
        "no client certificate",
        "the service's CA not given",
        "a key without its certificate",
        "a certificate file that is not there",
    ],
)
def test_explain_reaches_a_tls_service_with_a_client_certificate(tls_service, pki, credentials, says):
    port, _ = tls_service
    files = {"ca": pki.ca, "cert": pki.client_cert, "key": pki.client_key}
    argv = ["explain", "ml/train", "--url", f"https://127.0.0.1:{port}"]
    argv += [a.format(**files) for a in credentials]
    proc = subprocess.run(
        [sys.executable, "-m", "extender", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
