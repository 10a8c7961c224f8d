"""The cluster's certificates, made by openssl, and the admin kubeconfig that uses them."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def issue(out: Path, name: str, ca: Path, subject: str, san: str | None) -> tuple[Path, Path]:
    """A key and a certificate `name` in `out`, signed by the CA `ca` (its .crt and .key): a serving
    certificate for the names in `san` (openssl's subjectAltName syntax), or without, a client's."""
    key, csr, crt, ext = (out / f"{name}.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))
    ext.write_text(
        (f"subjectAltName={san}\n" if san else "")
        + "keyUsage=critical,digitalSignature,keyEncipherment\n"
        + f"extendedKeyUsage={'serverAuth' if san else 'clientAuth'}\n"
    )
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca.with_suffix(".crt")), "-CAkey", str(ca.with_suffix(".key")),
            "-CAcreateserial", "-days", "3650", "-extfile", str(ext), "-out", str(crt))  # fmt: skip
    return crt, key


# name: (its CA, subject, subjectAltName or None for a client certificate)
CERTS = {
    "apiserver": ("ca", "/CN=kube-apiserver", "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                  "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"),
    "webhook": ("ca", "/CN=webhooks", "DNS:localhost,IP:127.0.0.1"),
    "to-webhook": ("to-ca", "/CN=training-operator", "DNS:training-operator.kubeflow.svc,IP:127.0.0.1"),
    "admin": ("ca", "/O=system:masters/CN=admin", None),
    "kubelet-client": ("ca", "/O=system:masters/CN=kube-apiserver-kubelet-client", None),
}  # fmt: skip


def make_pki(pki: Path) -> None:
    """One CA signs the API server's and the webhooks' serving certs and the admin client cert.

    The training-operator v1 gets a CA of its own: its cert rotator keeps given certs only when the
    CA is valid for the name `training-operator-ca` and the server cert for its Service's name.
    Done once per state folder (a `done` marker)."""
    if (pki / "done").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    for ca, subject in (("ca", "/CN=ddpctl-test-ca"), ("to-ca", "/O=training-operator/CN=training-operator-ca")):
        (pki / f"{ca}.ext").write_text(
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,digitalSignature,keyEncipherment\n"
            + ("subjectAltName=DNS:training-operator-ca\n" if ca == "to-ca" else "")
        )
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", subject,
                "-extensions", "v3_ca", "-addext", f"subjectAltName=DNS:{subject.rsplit('=', 1)[1]}",
                "-keyout", str(pki / f"{ca}.key"), "-out", str(pki / f"{ca}.crt"))  # fmt: skip
    for name, (ca, subject, san) in CERTS.items():
        issue(pki, name, pki / ca, subject, san)
    for name in ("to-ca", "to-webhook"):  # the rotator parses PKCS#1 ("RSA PRIVATE KEY") keys only
        openssl("rsa", "-in", str(pki / f"{name}.key"), "-traditional", "-out", str(pki / f"{name}.key"))
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    # controller-runtime's webhook servers read tls.crt/tls.key from a folder.
    certdir = pki / "webhook-certs"
    certdir.mkdir(exist_ok=True)
    for src, dst in (("webhook.crt", "tls.crt"), ("webhook.key", "tls.key"), ("ca.crt", "ca.crt")):
        (certdir / dst).write_bytes((pki / src).read_bytes())
    (pki / "done").touch()


def kubeconfig(server_port: int, pki: Path) -> dict[str, object]:
    """The admin's kubeconfig: our CA, the admin client certificate, the API server on loopback."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ddpctl-test", "cluster": {
            "server": f"https://127.0.0.1:{server_port}", "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {
            "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "ddpctl-test", "context": {"cluster": "ddpctl-test", "user": "admin"}}],
        "current-context": "ddpctl-test",
    }  # fmt: skip


def write_kubeconfig(path: Path, server_port: int, pki: Path) -> Path:
    import yaml  # here, not above: `down` and `status` import this package without the venv

    path.write_text(yaml.safe_dump(kubeconfig(server_port, pki), sort_keys=False))
    path.chmod(0o600)
    return path
