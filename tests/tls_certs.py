"""Test certificates made with the openssl command: a CA, a server certificate for localhost
and 127.0.0.1 that it issued, a client certificate for mutual TLS, and a second CA that
issued nothing here (for "wrong CA" cases). All PEM files in one directory."""

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path

    def read(self, name: str) -> bytes:
        return getattr(self, name).read_bytes()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def _issue(d: Path, ca: str, name: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


def make(d: Path, ips: tuple[str, ...] = ()) -> Certs:
    """The certificates; the server's also for `ips` (another host's addresses)."""
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    names = ",".join(["DNS:localhost", "IP:127.0.0.1", *(f"IP:{ip}" for ip in ips)])
    _issue(d, "ca", "server", f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    _issue(d, "ca", "client", "extendedKeyUsage=clientAuth\n")
    return Certs(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key",
                 d / "other-ca.pem")


def arrow_test_data(d: Path) -> Path:
    """The certificates Arrow's own Flight tests read from ARROW_TEST_DATA/flight (in Arrow's
    repository they are checked in): a root CA, and two localhost certificates that serve as
    both server and client (mutual TLS). Returns the directory to set ARROW_TEST_DATA to."""
    flight = d / "flight"
    flight.mkdir(parents=True, exist_ok=True)
    _ca(flight, "root-ca")
    for name in ("cert0", "cert1"):
        _issue(flight, "root-ca", name, "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
               "extendedKeyUsage=serverAuth,clientAuth\n")
    return d
