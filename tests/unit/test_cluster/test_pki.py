"""testcluster.pki with the real openssl: every certificate verifies against the CA that signed it, for
the names its server is reached by, and the kubeconfig points at them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from testcluster.pki import CERTS, issue, kubeconfig, make_pki, write_kubeconfig


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pki")
    make_pki(path)
    return path


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name", sorted(CERTS))
def test_each_certificate_verifies_against_its_ca(pki: Path, name: str) -> None:
    ca, _, san = CERTS[name]
    purpose = "sslserver" if san else "sslclient"
    out = openssl("verify", "-purpose", purpose, "-CAfile", str(pki / f"{ca}.crt"), str(pki / f"{name}.crt"))
    assert out.strip().endswith(": OK")


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("apiserver", ["IP Address:127.0.0.1", "DNS:kubernetes.default.svc", "IP Address:10.96.0.1"]),
        ("webhook", ["IP Address:127.0.0.1", "DNS:localhost"]),
        # the training operator's rotator keeps the cert only when it names its Service
        ("to-webhook", ["DNS:training-operator.kubeflow.svc"]),
        ("to-ca", ["DNS:training-operator-ca"]),
    ],
)
def test_servers_are_certified_for_the_names_they_are_reached_by(pki: Path, name: str, names: list[str]) -> None:
    text = openssl("x509", "-noout", "-ext", "subjectAltName", "-in", str(pki / f"{name}.crt"))
    for n in names:
        assert n in text


def test_the_operators_keys_are_pkcs1_and_the_webhook_folder_is_complete(pki: Path) -> None:
    for name in ("to-ca", "to-webhook"):
        assert (pki / f"{name}.key").read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")
    folder = pki / "webhook-certs"
    assert sorted(p.name for p in folder.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (folder / "tls.crt").read_bytes() == (pki / "webhook.crt").read_bytes()


def test_a_second_run_keeps_the_certificates(pki: Path) -> None:
    before = (pki / "ca.crt").read_bytes()
    make_pki(pki)
    assert (pki / "ca.crt").read_bytes() == before


def test_issue_signs_a_serving_certificate_with_another_folder_s_ca(pki: Path, tmp_path: Path) -> None:
    crt, key = issue(tmp_path, "node", pki / "ca", "/CN=node", "IP:10.88.0.1,DNS:node")
    assert key.exists()
    openssl("verify", "-purpose", "sslserver", "-CAfile", str(pki / "ca.crt"), str(crt))
    assert "IP Address:10.88.0.1" in openssl("x509", "-noout", "-ext", "subjectAltName", "-in", str(crt))


def test_the_kubeconfig_is_the_admins_on_loopback_and_private(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", 36402, tmp_path / "pki")
    assert path.stat().st_mode & 0o777 == 0o600
    cfg = yaml.safe_load(path.read_text())
    assert cfg == kubeconfig(36402, tmp_path / "pki")
    assert cfg["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:36402",
        "certificate-authority": str(tmp_path / "pki/ca.crt"),
    }
    assert cfg["users"][0]["user"]["client-certificate"] == str(tmp_path / "pki/admin.crt")
    assert cfg["current-context"] == cfg["contexts"][0]["name"]
