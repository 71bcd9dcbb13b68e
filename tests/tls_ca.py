"""A throwaway certificate authority for TLS tests, made with the openssl command-line tool.

Each test run makes its own CA and broker certificate (valid two days, for 127.0.0.1 and
localhost), so no key is ever checked in and nothing expires under the suite.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lagd.embedded.services import ServiceError


@dataclass(frozen=True)
class Ca:
    """A CA's certificate (what clients trust: `tls-ca-file`) and its private key."""

    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ServiceError("the TLS tests make their certificates with openssl: apt-get install openssl")
    done = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ServiceError(f"openssl {' '.join(args[:2])} failed: {done.stderr[-2000:]}")


def make_ca(folder: Path, name: str) -> Ca:
    """A self-signed CA called `name`, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = Ca(folder / f"{name}.pem", folder / f"{name}.key")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", str(ca.key), "-out", str(ca.cert), "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return ca


def issue_server(ca: Ca, folder: Path, name: str) -> Path:
    """A server certificate for 127.0.0.1 and localhost signed by `ca`: one PEM file holding the
    private key (PKCS#8, unencrypted) and the chain, as Kafka's PEM key store reads it."""
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt"
    ext = folder / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key), "-CAcreateserial",
        "-days", "2", "-out", str(cert), "-extfile", str(ext),
    )  # fmt: skip
    keystore = folder / f"{name}-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text() + ca.cert.read_text())
    return keystore
