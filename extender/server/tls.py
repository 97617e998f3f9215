"""The verbs port's TLS context: the server certificate and, optionally, the CA its callers' certificates
must chain to.

It matches kube-scheduler's extender `enableHTTPS: true` with `tlsConfig`: kube-scheduler checks our
certificate against `tlsConfig.caFile` (for the URL's host, or `tlsConfig.serverName`) and presents
`tlsConfig.certFile`/`keyFile` as its client certificate, which --tls-client-ca-file verifies. Every file
problem is found before the service listens and reported as one line naming the flag and the file.

The files are followed: the first handshake after they change (a rotated Secret's volume is swapped
atomically) loads them again, so a renewed certificate is served without a restart. A set that does not
load then (a rotation half done) is logged and the last good one kept.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from pathlib import Path
from typing import Any

from extender.config import ServerSettings

log = logging.getLogger(__name__)


class TLSFileError(Exception):
    """The TLS files cannot serve: each argument is one line naming the flag, the file and what to fix."""


_PEM_CERT = "-----BEGIN CERTIFICATE-----"
_PEM_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def _reason(exc: ssl.SSLError) -> str:
    if exc.reason == "KEY_VALUES_MISMATCH":
        return "the key does not belong to the certificate"
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", exc.strerror or str(exc))


def _read(flag: str, path: str, problems: list[str]) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        problems.append(f"{flag} {path}: cannot read it: {exc.strerror or exc}")
        return None


def server_context(server: ServerSettings) -> ssl.SSLContext | None:
    """The TLS context for --host/--port, None for plain HTTP; TLSFileError when a file will not do.
    Its handshakes follow changes to the files (see _FollowedFiles)."""
    if not server.tls_cert_file:
        return None
    return _FollowedFiles(server).context


class _FollowedFiles:
    """Swaps a newer context into each handshake once the files changed (OpenSSL's servername callback
    runs for every ClientHello, with or without SNI), so the listener's context never needs replacing."""

    def __init__(self, server: ServerSettings) -> None:
        self.paths = [p for p in (server.tls_cert_file, server.tls_key_file, server.tls_client_ca_file) if p]
        self.server = server
        self.stamp = self._stamp()
        self.context = self.current = _load(server)
        self.context.sni_callback = self._handshake
        self.refused: tuple[Any, ...] | None = None  # the stamp of files that did not load, not tried again

    def _stamp(self) -> tuple[Any, ...]:
        def one(path: str) -> tuple[int, int, int] | None:
            try:
                st = os.stat(path)
            except OSError:
                return None
            return (st.st_ino, st.st_mtime_ns, st.st_size)

        return tuple(one(p) for p in self.paths)

    def _handshake(self, conn: Any, server_name: str | None, context: ssl.SSLContext) -> None:
        stamp = self._stamp()
        if stamp != self.stamp and stamp != self.refused:
            try:
                self.current = _load(self.server)
            except (TLSFileError, OSError) as exc:  # OSError: a file gone between reading and loading
                self.refused = stamp
                log.error(
                    "the TLS files changed but do not load; still serving the previous ones: %s",
                    "; ".join(exc.args) if isinstance(exc, TLSFileError) else exc,
                )
            else:
                self.stamp = stamp
                log.info("the TLS files changed; new connections get them: %s", ", ".join(self.paths))
        if self.current is not context:
            conn.context = self.current


def _load(server: ServerSettings) -> ssl.SSLContext:
    cert, key, ca = server.tls_cert_file, server.tls_key_file, server.tls_client_ca_file
    problems: list[str] = []
    cert_text = _read("--tls-cert-file", cert, problems)
    key_text = _read("--tls-key-file", key, problems)
    ca_text = _read("--tls-client-ca-file", ca, problems) if ca else ""
    if cert_text is not None and _PEM_CERT not in cert_text:
        problems.append(f"--tls-cert-file {cert}: no PEM certificate in it ({_PEM_CERT} ...)")
    if key_text is not None and not _PEM_KEY.search(key_text):
        problems.append(f"--tls-key-file {key}: no PEM private key in it (-----BEGIN PRIVATE KEY----- ...)")
    if ca_text is not None and ca and _PEM_CERT not in ca_text:
        problems.append(f"--tls-client-ca-file {ca}: no PEM CA certificate in it ({_PEM_CERT} ...)")
    if problems:
        raise TLSFileError(*problems)

    def encrypted() -> bytes:
        # without a callback OpenSSL would prompt on the terminal, which a pod does not have
        raise TLSFileError(
            f"--tls-key-file {key}: the key is encrypted; give it unencrypted (as a kubernetes.io/tls Secret "
            "holds it)"
        )

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])  # aiohttp serves HTTP/1.1 only; kube-scheduler also offers h2
    try:
        ctx.load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as exc:
        raise TLSFileError(
            f"--tls-cert-file {cert} and --tls-key-file {key} are not a certificate and its key: "
            + _reason(exc)
        ) from None
    if ca:
        try:
            ctx.load_verify_locations(cafile=ca)
        except ssl.SSLError as exc:
            raise TLSFileError(f"--tls-client-ca-file {ca}: {_reason(exc)}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
