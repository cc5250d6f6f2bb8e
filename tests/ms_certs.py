"""Certificates for MindSpore's secure channel, made by the real `openssl` command in a test's
directory: a CA (PEM), and server and client certificates signed by it, each packed with its key
into a password-protected PKCS#12 file, as MindSpore's config wants them. Keys are EC P-256:
MindSpore 2.10's TLS refuses a 2048-bit RSA key in the handshake ("ee key too small").

An expired certificate is made with `openssl x509 -req -days -1`: OpenSSL 3.0 takes a negative
day count and writes a notAfter one day before now (its notBefore is now), which is all an
expiry check reads; no clock faking needed.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# MindSpore verifies that a certificate's Authority Key Identifier matches its CA's Subject Key
# Identifier (a leaf without one fails `init()` with "The pointer[akeyid] is null").
LEAF_EXTENSIONS = (
    "basicConstraints=CA:FALSE\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid,issuer\n"
    "keyUsage=digitalSignature,keyEncipherment\n"
)
EC_CURVE = "ec_paramgen_curve:prime256v1"
PASSWORD = "p12-s3cret-Pw"  # a test value; the tests check it never shows in marun's outputs


def _openssl(*args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    import os

    subprocess.run(
        ["openssl", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@dataclass(frozen=True)
class Certs:
    ca: Path
    server: Path
    client: Path
    password: str


def make_p12(d: Path, name: str, days: int, password: str = PASSWORD) -> Path:
    """A key and a certificate signed by `d`'s CA, valid `days` days (negative: expired)."""
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", EC_CURVE, "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip
    (d / "leaf.ext").write_text(LEAF_EXTENSIONS)
    _openssl(
        "x509", "-req", "-extfile", "leaf.ext", "-in", f"{name}.csr",
        "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", str(days), cwd=d,
    )  # fmt: skip
    _openssl(
        "pkcs12", "-export", "-in", f"{name}.pem", "-inkey", f"{name}.key", "-out", f"{name}.p12",
        "-passout", "env:P12_PASS", cwd=d, env={"P12_PASS": password},
    )  # fmt: skip
    return d / f"{name}.p12"


def make_certs(d: Path, ca_days: int = 365, days: int = 365) -> Certs:
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", EC_CURVE, "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=marun-test-ca",
        "-days", str(ca_days), cwd=d,
    )  # fmt: skip
    server = make_p12(d, "server", days)
    client = make_p12(d, "client", days)
    return Certs(d / "ca.pem", server, client, PASSWORD)


def make_expired_pem(d: Path, name: str) -> Path:
    """A self-signed PEM certificate that expired yesterday (`req -x509` refuses negative days;
    `x509 -req -signkey` takes them)."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", EC_CURVE, "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-signkey", f"{name}.key", "-days", "-1",
        "-out", f"{name}.pem", cwd=d,
    )  # fmt: skip
    return d / f"{name}.pem"
