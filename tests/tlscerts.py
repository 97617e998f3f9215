"""Throwaway certificates for the TLS tests, made with the `openssl` command: two CAs, a server certificate
for 127.0.0.1 and localhost, a client certificate from each CA. EC P-256 keys: quick to make."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Path  # signs the server and the trusted client certificate
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by `ca`: accepted
    client_key: Path
    stranger_cert: Path  # signed by another CA: refused
    stranger_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-days", "2", "-subj", f"/CN={name}", "-keyout", key, "-out", cert),
    )
    return cert, key


def _leaf(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}.{s}" for s in ("crt", "key", "csr", "ext"))
    ext.write_text(extensions)
    _openssl(
        *("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-subj", f"/CN={name}", "-keyout", key, "-out", csr),
    )
    _openssl(
        *("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial"),
        *("-days", "2", "-extfile", ext, "-out", cert),
    )
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = _ca(directory, "test-ca"), _ca(directory, "other-ca")
    server = _leaf(
        directory,
        "gang-extender",
        ca,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    client = _leaf(directory, "kube-scheduler", ca, "extendedKeyUsage=clientAuth\n")
    stranger = _leaf(directory, "stranger", other, "extendedKeyUsage=clientAuth\n")
    return Pki(ca[0], *server, *client, *stranger)
